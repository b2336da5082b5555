"""Parquet files as an import's source (``--from-format parquet``): one file, files named by a brace pattern, or a
folder.

The rule:

- The shards are the files, in the order a pattern names them; a folder's are the ``*.parquet`` files below it,
  sorted by path, leaving out (as Arrow's dataset discovery does) a path with a part that starts with ``_`` or ``.``
  (Spark's ``_temporary/``, hidden files). A hive-partitioned folder (``year=2024/part-0.parquet``) is read as
  plain files: its partition keys do not become columns.
- The schema is the first file's Arrow schema, with ``datasets``' features applied where the file records them
  (:mod:`.hf_features`: an ``Image`` column becomes its images' bytes). Every file's footer is read when the source
  is opened: one whose schema differs from the first's (its columns, or ``datasets``' features; other metadata
  aside), that has no footer (truncated), or whose row groups do not add up to its row count is a
  :class:`~.source.SourceError` naming it.
- Rows are read row group by row group, each with one ranged read of its column chunks (memory: one row group's
  bytes and a batch); a resumed read starts at the row group that holds its first row, reading none before it. Each
  page is checked against its CRC where the writer wrote one (``write_page_checksum``: Arrow writes none by
  default, and a damaged page without one decodes to wrong values unseen), each row group's rows against its count
  in the footer; a page that fails its CRC or cannot be decoded is an error naming the file, the row group and the
  first sample not read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import accumulate

import pyarrow as pa
import pyarrow.parquet as pq

from datamount.datasets.imports.hf_features import FeatureColumns, schema_difference, stored_features
from datamount.datasets.imports.location import Location
from datamount.datasets.imports.source import BATCH_ROWS, SourceError, SourceShard
from datamount.datasets.rows.shards import SparseFile
from datamount.datasets.shard_checks import group_range
from datamount.storage import ObjectNotFoundError
from datamount.storage.pools import generator_pool

#: Bytes read from a file's end to find its footer: one ranged read for the footer of a file of thousands of row
#: groups (a larger one takes a second).
FOOTER_GUESS = 64 << 10
#: Footers read at once when a source is opened.
FOOTER_READERS = 8
_MAGIC = b"PAR1"
#: The footer's length and the closing magic.
_TAIL = 8


def open_parquet(location: Location) -> ParquetSource:
    """The Parquet files at ``location`` (see the module's rule), their footers read and checked."""
    return ParquetSource(location)


class ParquetSource:
    """Parquet files opened for import (a :class:`~.source.Source`)."""

    format = "parquet"

    def __init__(self, location: Location) -> None:
        self.store = location.store
        self.where = location.where
        sizes = location.sizes() if location.names else _folder_files(location)
        if not sizes:
            raise ObjectNotFoundError(f"{self.where}: no .parquet file in it")
        self.shards: list[SourceShard] = []
        with generator_pool(FOOTER_READERS, "parquet-footers") as pool:
            footers = pool.map(self._footer, sizes, sizes.values())
            for (name, size), footer in zip(sizes.items(), footers, strict=True):
                schema = footer.schema.to_arrow_schema()
                if not self.shards:
                    self._stored = schema
                self._check_schema(name, schema)
                self.shards.append(SourceShard(name, size, footer.num_rows))
        features = stored_features(self._stored)
        self._columns = FeatureColumns.of_source(self.where, self.shards[0].name, self._stored, features)
        self.schema = self._columns.schema

    def batches(self, shard: int, skip: int = 0) -> Iterator[pa.RecordBatch]:
        if skip < 0:
            raise ValueError(f"skip must be >= 0, got {skip}")
        entry = self.shards[shard]
        footer = self._footer(entry.name, entry.size)
        if footer.num_rows != entry.rows:
            raise SourceError(self.where, entry.name, f"it holds {footer.num_rows} rows now, {entry.rows} when opened")
        self._check_schema(entry.name, footer.schema.to_arrow_schema())
        starts = list(accumulate((footer.row_group(g).num_rows for g in range(footer.num_row_groups)), initial=0))
        for group in range(footer.num_row_groups):
            if starts[group + 1] > skip:
                yield from self._group(entry, footer, group, starts[group], max(0, skip - starts[group]))

    def _group(
        self, entry: SourceShard, footer: pq.FileMetaData, group: int, first: int, skip: int
    ) -> Iterator[pa.RecordBatch]:
        """Row group ``group`` (its first row is the shard's row ``first``) after its first ``skip`` rows."""
        start, end = group_range(footer, group)
        data = self.store.read_range_buffer(entry.name, start, end)
        if len(data) != end - start:
            raise SourceError(self.where, entry.name, f"it ends before row group {group} does", sample=first)
        source = SparseFile(entry.size, {start: data}, name=self.store.url_for(entry.name))
        expected = footer.row_group(group).num_rows
        read = 0
        try:
            parquet = pq.ParquetFile(source, metadata=footer, pre_buffer=False, page_checksum_verification=True)
            batches = parquet.iter_batches(BATCH_ROWS, row_groups=[group], use_threads=False)
            while (batch := next(batches, None)) is not None:
                read += batch.num_rows
                if read > skip:
                    part = batch.slice(max(0, skip - read + batch.num_rows))
                    yield self._columns.batch(part, self._refuse(entry, first + read - part.num_rows))
        except (OSError, pa.ArrowException) as exc:
            raise SourceError(
                self.where, entry.name, f"row group {group} is damaged: {exc}", sample=first + min(read, expected)
            ) from exc
        if read != expected:
            raise SourceError(
                self.where, entry.name, f"row group {group} holds {read} rows, not the {expected} of its footer"
            )

    def _refuse(self, entry: SourceShard, first: int) -> Callable[[int, str], SourceError]:
        """Refusals of rows of a batch whose first row is the shard's row ``first``."""
        return lambda row, reason: SourceError(self.where, entry.name, reason, sample=first + row)

    def _footer(self, name: str, size: int) -> pq.FileMetaData:
        """The footer of file ``name`` (``size`` bytes), checked: one ranged read (two for a large footer)."""
        tail_start = max(size - FOOTER_GUESS, 0)
        tail = self.store.read_range(name, tail_start, size)
        if size < len(_MAGIC) + _TAIL or len(tail) != size - tail_start or tail[-len(_MAGIC) :] != _MAGIC:
            raise SourceError(self.where, name, "it does not end with a Parquet footer (truncated?)")
        length = int.from_bytes(tail[-_TAIL : -len(_MAGIC)], "little")
        if length + len(_MAGIC) + _TAIL > size:
            raise SourceError(self.where, name, f"its footer's length ({length} bytes) is more than it holds")
        if length + _TAIL > len(tail):
            tail = self.store.read_range(name, size - _TAIL - length, tail_start) + tail
        try:
            footer = pq.read_metadata(pa.BufferReader(tail[-_TAIL - length :]))
        except (OSError, pa.ArrowException) as exc:
            raise SourceError(self.where, name, f"its footer cannot be read: {exc}") from exc
        counted = sum(footer.row_group(g).num_rows for g in range(footer.num_row_groups))
        if counted != footer.num_rows:
            raise SourceError(
                self.where, name, f"its row groups hold {counted} rows, its footer says {footer.num_rows}"
            )
        return footer

    def _check_schema(self, name: str, schema: pa.Schema) -> None:
        """File ``name``'s ``schema`` is the first file's (:func:`.hf_features.schema_difference`)."""
        try:
            difference = schema_difference(schema, self._stored)
        except ValueError as exc:
            raise SourceError(self.where, name, str(exc)) from exc
        if difference is not None:
            raise SourceError(self.where, name, f"its schema is not {self.shards[0].name}'s: {difference}")


def _folder_files(location: Location) -> dict[str, int]:
    """The ``*.parquet`` files below a folder, sorted by path, with their sizes (see the module's rule)."""
    return {
        name: size
        for name, size in location.store.list("").items()
        if name.endswith(".parquet") and not any(part[:1] in ("_", ".") for part in name.split("/"))
    }
