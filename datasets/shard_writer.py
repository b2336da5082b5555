"""Writing Parquet shards: the one shard writer of ``pack``, ``import`` and public installs.

Rows go into row groups of about ``row_group_bytes`` of sample data, row groups into shards that close once they
hold ``shard_bytes``. Each shard is written to a local file, hashed, and sent to the store into the writer's own pack
folder (:func:`datamount.datasets.layout.new_pack_folder`); the writer returns the shards' manifest entries, and the
caller commits them. Shards are plain Parquet, with every row's number in the version in an ``index`` column.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from datamount.datasets import layout
from datamount.datasets.manifest import SHARD_BLOCK_BYTES, Kind, ShardEntry
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.shard_checks import shard_checks
from datamount.storage import IntegrityError, Store, arguments
from datamount.storage.checksums import block_digests

DEFAULT_SHARD_BYTES = 256 << 20
DEFAULT_ROW_GROUP_BYTES = 8 << 20
#: The first row group of each shard ``pack`` and ``upload --pack`` cut is no larger than this: a pass over a remote
#: shard hands out its first sample once that row group has come (a 256 MB shard of 110 KB samples on Ceph RGW: the
#: first sample 0.04 s after the imports, 0.07 s with a first row group of 8 MiB).
FIRST_ROW_GROUP_BYTES = 1 << 20
#: The codec of every column but the binary ones (stored as they are). Beside Snappy, the codec of shards packed
#: before it: 200,000 text pairs 40% smaller (8.9 -> 5.3 MB) and a quarter less CPU to decode (28 -> 21 ms), a
#: ``uint8`` tensor column 31% smaller and 17% less.
COMPRESSION = "zstd"
#: Schema metadata that marks a datamount shard, and the version of its layout.
FORMAT_KEY = b"datamount.shard"
FORMAT_VALUE = b"1"
#: The columns a shard adds to a version's own: each row's number, and (image versions) its file's list path.
INDEX_COLUMN = "index"
PATH_COLUMN = "path"


#: The most bytes an Arrow ``binary`` or ``string`` array holds (its offsets are 32-bit).
_MAX_ARRAY_BYTES = (1 << 31) - 1


def column(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    """``values`` as an Arrow array of ``arrow_type``. ``bytes`` and ``str`` values become a ``binary`` or ``string``
    array from one join of their bytes: ``pa.array`` asks, the first time it is given a list, whether pandas is
    installed, and imports it (0.17-0.41 s here) although nothing here uses it. Any other values, and any that do not
    fit the type (its error then names them), go through ``pa.array``."""
    if arrow_type in (pa.binary(), pa.string()):
        try:
            encoded = values if arrow_type == pa.binary() else [value.encode() for value in values]
            data = b"".join(encoded)
        except (AttributeError, TypeError, UnicodeEncodeError):
            return pa.array(values, type=arrow_type)
        if len(data) <= _MAX_ARRAY_BYTES:
            offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
            np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
            if offsets[-1] == len(data):  # not where a value's len() is not its bytes (a view of wider items)
                buffers = [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
                return pa.Array.from_buffers(arrow_type, len(encoded), buffers)
    return pa.array(values, type=arrow_type)


def numbered(first: int, count: int) -> pa.Array:
    """The ``int64`` array ``first, first + 1, ... first + count - 1`` (built from a buffer, as :func:`column`)."""
    values = np.arange(first, first + count, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(values)])


def check_sizes(shard_bytes: int, row_group_bytes: int) -> None:
    """Refuse shard and row-group sizes that are not positive whole numbers of bytes, and shards smaller than a row
    group: a shard holds whole row groups, so it would be a row group's size (or more), not the size asked for."""
    arguments.whole_number(shard_bytes, "shard_bytes", minimum=1)
    arguments.whole_number(row_group_bytes, "row_group_bytes", minimum=1)
    if shard_bytes < row_group_bytes:
        raise ValueError(
            f"a shard size of {shard_bytes:,} bytes is less than one row group of {row_group_bytes:,} bytes: a shard "
            f"holds whole row groups, so it cannot be that small; ask for shards of at least {row_group_bytes:,} bytes"
        )


def list_fields(kind: Kind, columns: Sequence[str]) -> list[pa.Field]:
    """The Arrow fields of an image or text version's own columns: an image's bytes ``binary``, the rest
    ``string``."""
    return [
        pa.field(column, pa.binary() if kind is Kind.IMAGE and position == 0 else pa.string())
        for position, column in enumerate(columns)
    ]


def list_schema(name: str, kind: Kind, columns: Sequence[str]) -> pa.Schema:
    """The shards' schema of an image or text version: its columns (:func:`list_fields`), then ``index`` and, for
    images, ``path``."""
    fields = list_fields(kind, columns)
    fields.append(pa.field(INDEX_COLUMN, pa.int64()))
    if kind is Kind.IMAGE:
        fields.append(pa.field(PATH_COLUMN, pa.string()))
    return pa.schema(fields, metadata={FORMAT_KEY: FORMAT_VALUE, b"datamount.dataset": name.encode()})


def table_schema(columns: pa.Schema) -> pa.Schema:
    """The shards' schema of a ``table`` version: its own columns and their metadata, then ``index``."""
    schema = columns.append(pa.field(INDEX_COLUMN, pa.int64()))
    return schema.with_metadata({**(schema.metadata or {}), FORMAT_KEY: FORMAT_VALUE})


def _narrow_integer_columns(schema: pa.Schema) -> list[str]:
    """The Parquet column paths (``image.list.element``) of ``schema``'s 8- and 16-bit integers, tensors' included,
    read from the Parquet schema pyarrow makes for it."""
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_batches([], schema=schema), sink)  # empty_table() would import pandas
    parquet = pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema
    paths = []
    for column in (parquet.column(i) for i in range(len(parquet))):
        logical = json.loads(column.logical_type.to_json() or "{}")
        if column.physical_type == "INT32" and logical.get("Type") == "Int" and logical.get("bitWidth", 32) <= 16:
            paths.append(column.path)
    return paths


#: The level of a codec that has levels (zstd's fastest; Arrow's default for it is the same today).
_LEVELS = {"zstd": 1}


class ShardFile:
    """One shard being written to a local file, one row group per batch, then hashed and sent by :meth:`commit`."""

    def __init__(self, path: str, schema: pa.Schema, compression: str = COMPRESSION) -> None:
        self.path = path
        text_columns = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
        # Parquet stores 8- and 16-bit integers as INT32: plainly written, a uint8 image takes four times its bytes;
        # dictionary-encoded, about its own size (16-bit noise 1.3x: its 65,536 values overflow the dictionary page).
        narrow_columns = _narrow_integer_columns(schema)
        binary_columns = {f.name for f in schema if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)}
        level = _LEVELS.get(compression)
        levels = None if level is None else {f.name: level for f in schema if f.name not in binary_columns}
        self._writer = pq.ParquetWriter(
            path,
            schema,
            # Image bytes are already compressed (JPEG, PNG): compressing them again costs time for nothing.
            compression={f.name: "NONE" if f.name in binary_columns else compression for f in schema},
            compression_level=levels,
            use_dictionary=text_columns + narrow_columns,
            # Min/max statistics of a binary column would copy whole images into the footer.
            write_statistics=[f.name for f in schema if f.name not in binary_columns],
            # A CRC per page, for readers of these shards that do not know their entries' xxh3-64 (other Parquet
            # readers, datamount before format 5): every read of a row group is checked by one or the other.
            write_page_checksum=True,
        )
        self.rows = 0
        self.row_groups: list[int] = []

    @property
    def size(self) -> int:
        return os.path.getsize(self.path)

    def write(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch, row_group_size=batch.num_rows)
        self.rows += batch.num_rows
        self.row_groups.append(batch.num_rows)

    def commit(self, store: Store, dataset: str, key: str, *, sha256: str | None = None) -> ShardEntry:
        """Close the file, send it to ``key`` in ``dataset``'s folder, remove it; return its manifest entry.

        With ``sha256`` (the bytes a manifest records for the shard), a file without that sha256 is not sent: it is
        removed and the :class:`~datamount.storage.IntegrityError` names both.
        """
        self._writer.close()
        digest, blocks = block_digests(self.path, SHARD_BLOCK_BYTES)
        size = self.size
        if sha256 is not None and digest != sha256:
            os.remove(self.path)
            raise IntegrityError(
                f"shard {key} of {dataset} made again has sha256 {digest}, not the {sha256} its manifest records "
                "(it was written by another pyarrow or with other settings, or its rows changed): nothing was stored"
            )
        checks = shard_checks(self.path)
        store.put_file(self.path, f"{layout.dataset_folder(dataset)}/{key}")
        os.remove(self.path)
        return ShardEntry(
            key, self.rows, size, digest, self.row_groups, xxh3=checks, block_bytes=SHARD_BLOCK_BYTES, blocks=blocks
        )


class ShardWriter:
    """Rows of one version into Parquet shards in a pack folder of its own.

    Rows come one at a time (:meth:`add_row`), as Arrow columns (:meth:`add_batch`), or as whole row groups
    (:meth:`add_group`); every value but ``index``, which is numbered here from ``first_index``. :meth:`end_shard`
    closes the current shard (a split starts a shard of its own), :meth:`close` returns every shard's entry, and
    :meth:`abort` removes what was sent. Shards are numbered from ``first_shard`` (a pack writes each planned shard
    with a writer of its own, in any process); a writer with a ``run`` name puts it in its shards' file names.
    ``compression`` is the codec of every column but the binary ones (a pack made again uses its first codec).
    ``expected`` maps shard keys to the sha256 their bytes must have (a shard made again): a shard that does not
    have it is not sent (:meth:`ShardFile.commit`).
    """

    def __init__(
        self,
        store: Store,
        dataset: str,
        schema: pa.Schema,
        *,
        shard_bytes: int = DEFAULT_SHARD_BYTES,
        row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
        pack_folder: str | None = None,
        first_shard: int = 0,
        first_index: int = 0,
        run: str = "",
        progress: Progress | None = None,
        compression: str = COMPRESSION,
        expected: Mapping[str, str] | None = None,
    ) -> None:
        check_sizes(shard_bytes, row_group_bytes)
        self.store = store
        self.dataset = dataset
        self.schema = schema
        self.pack_folder = pack_folder or layout.new_pack_folder()
        self.shards: list[ShardEntry] = []
        self._shard_bytes = shard_bytes
        self._row_group_bytes = row_group_bytes
        self._next_shard = first_shard
        self._next_index = first_index
        self._run = run
        self._compression = compression
        self._expected = dict(expected or {})
        self._progress = progress or Silent()
        self._index_position = schema.get_field_index(INDEX_COLUMN)
        self._scratch = tempfile.TemporaryDirectory(prefix="datamount-shards-")
        self._file: ShardFile | None = None
        self._rows: list[list[Any]] = [[] for _ in schema]
        self._row_bytes = 0
        self._batches: list[pa.RecordBatch] = []
        self._batch_bytes = 0

    @property
    def rows(self) -> int:
        """Rows added so far."""
        return self._next_index

    def add_row(self, values: Sequence[Any]) -> None:
        """One row: a value for every column of the schema but ``index``, in schema order."""
        row = list(values)
        row.insert(self._index_position, self._next_index)
        if len(row) != len(self._rows):
            raise ValueError(f"a row of {self.dataset} has {len(self._rows) - 1} values, got {len(values)}")
        for column, value in zip(self._rows, row, strict=True):
            column.append(value)
        self._next_index += 1
        self._row_bytes += sum(len(value) for value in values if isinstance(value, (bytes, str)))
        if self._row_bytes >= self._row_group_bytes:
            self._flush_rows()

    def add_batch(self, columns: Sequence[pa.Array | Sequence[Any]]) -> None:
        """Many rows: an array for every column but ``index``; regrouped into row groups of about the set size."""
        self._flush_rows()
        batch = self._numbered(columns)
        per_row = max(1, batch.nbytes // max(batch.num_rows, 1))
        step = max(1, self._row_group_bytes // per_row)
        for start in range(0, batch.num_rows, step):
            piece = batch.slice(start, step)
            self._batches.append(piece)
            self._batch_bytes += piece.nbytes
            if self._batch_bytes >= self._row_group_bytes:
                self._flush_batches()

    def add_group(self, columns: Sequence[pa.Array | Sequence[Any]]) -> None:
        """Exactly one row group: an array (or a list of values) for every column but ``index``."""
        self._flush_rows()
        self._flush_batches()
        self._write(self._numbered(columns))

    def end_shard(self) -> None:
        """Write what is pending and close the current shard: the next rows start a new one."""
        self._flush_rows()
        self._flush_batches()
        if self._file is not None:
            key = layout.shard_key(self.pack_folder, self._next_shard, self._run)
            self.shards.append(self._file.commit(self.store, self.dataset, key, sha256=self._expected.get(key)))
            self._file = None
            self._next_shard += 1

    def close(self) -> list[ShardEntry]:
        """Write the last shard; return the entries of every shard written, in order."""
        self.end_shard()
        self._scratch.cleanup()
        return self.shards

    def discard(self) -> None:
        """Drop the shard being written (its local file); the shards sent stay (a resumable writer's)."""
        self._file = None
        self._scratch.cleanup()

    def abort(self) -> None:
        """Remove every shard this writer sent (it was never committed) and its local files."""
        self.discard()
        folder = f"{layout.dataset_folder(self.dataset)}/{self.pack_folder}"
        self.store.remove(folder, recursive=True, missing_ok=True)

    def _numbered(self, columns: Sequence[pa.Array | Sequence[Any]]) -> pa.RecordBatch:
        count = len(columns[0]) if columns else 0
        fields = [field for field in self.schema if field.name != INDEX_COLUMN]
        if len(columns) != len(fields):
            raise ValueError(f"a batch of {self.dataset} has {len(fields)} columns, got {len(columns)}")
        arrays = [c if isinstance(c, pa.Array) else column(c, f.type) for c, f in zip(columns, fields, strict=True)]
        arrays.insert(self._index_position, numbered(self._next_index, count))
        self._next_index += count
        return pa.record_batch(arrays, schema=self.schema)

    def _flush_rows(self) -> None:
        if self._rows[0]:
            arrays = [column(values, field.type) for values, field in zip(self._rows, self.schema, strict=True)]
            batch = pa.record_batch(arrays, schema=self.schema)
            self._rows = [[] for _ in self.schema]
            self._row_bytes = 0
            self._write(batch)

    def _flush_batches(self) -> None:
        if self._batches:
            table = pa.Table.from_batches(self._batches).combine_chunks()
            self._batches, self._batch_bytes = [], 0
            for batch in table.to_batches():
                self._write(batch)

    def _write(self, batch: pa.RecordBatch) -> None:
        if self._file is None:
            local = os.path.join(self._scratch.name, f"shard-{self._next_shard:05d}.parquet")
            self._file = ShardFile(local, self.schema, self._compression)
        self._file.write(batch)
        self._progress.advance(items=batch.num_rows, size=batch.nbytes)
        if self._file.size >= self._shard_bytes:
            self.end_shard()
