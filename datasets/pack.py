"""``pack``: a dataset version as Parquet shards, for fast sequential and sharded reads.

Each shard holds whole rows in ``.list`` order: the list's columns (an image file's bytes in a binary column, labels
and text as strings), then ``index`` (the row's number in the version) and, for image datasets, ``path`` (the file's
path in the original list). Shards are plain Parquet: pyarrow, DuckDB, Spark, Ray or pandas read them.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from datamount.datasets import catalog
from datamount.datasets.manifest import Manifest, ShardEntry
from datamount.datasets.progress import Progress, Silent
from datamount.storage import Store, open_store
from datamount.storage.checksums import sha256_file

DEFAULT_SHARD_BYTES = 256 << 20
DEFAULT_ROW_GROUP_BYTES = 8 << 20
FORMAT_KEY = b"datamount.shard"
FORMAT_VALUE = b"1"


def pack(
    ref: str,
    *,
    store: Store | str | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    progress: Progress | None = None,
) -> Manifest:
    """Pack dataset version ``ref`` (``name`` or ``name@N``) into Parquet shards; return the updated manifest.

    Shards are written first, then the version's manifest is replaced by one that lists them (the samples do not
    change, so readers that opened the version before keep reading its objects). Packing a packed version again
    is a no-op.
    """
    if shard_bytes < 1 or row_group_bytes < 1:
        raise ValueError("shard and row-group sizes must be positive")
    target = open_store(store)
    manifest = catalog.resolve(target, ref, public_fallback=False)
    if manifest.shards:
        return manifest
    report = progress or Silent()
    report.start("pack", items=manifest.rows, size=sum(f.size for f in manifest.files))
    shards = list(_write_shards(target, manifest, shard_bytes, row_group_bytes, report))
    report.finish()
    packed = dataclasses.replace(manifest, shards=shards)
    target.write(catalog.manifest_path(manifest.name, manifest.version), packed.to_json())
    return packed


def schema_for(manifest: Manifest) -> pa.Schema:
    """The shards' Arrow schema: the list's columns, then ``index`` and (image datasets) ``path``."""
    fields = [
        pa.field(name, pa.binary() if manifest.kind == "image" and position == 0 else pa.string())
        for position, name in enumerate(manifest.columns)
    ]
    fields.append(pa.field("index", pa.int64()))
    if manifest.kind == "image":
        fields.append(pa.field("path", pa.string()))
    return pa.schema(fields, metadata={FORMAT_KEY: FORMAT_VALUE, b"datamount.dataset": manifest.ref.encode()})


def _write_shards(
    store: Store, manifest: Manifest, shard_bytes: int, row_group_bytes: int, report: Progress
) -> Iterator[ShardEntry]:
    schema = schema_for(manifest)
    groups = _row_groups(store, manifest, schema, row_group_bytes)
    folder = catalog.dataset_folder(manifest.name)
    yield from write_shards(store, folder, manifest.version, groups, schema, shard_bytes, report)


def write_shards(
    store: Store,
    folder: str,
    version: int,
    groups: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    shard_bytes: int,
    report: Progress,
) -> Iterator[ShardEntry]:
    """Write ``groups`` (one row group each) into shards of about ``shard_bytes`` under ``folder/packs/version``.

    Each shard is written to a local file, hashed, sent to the store, and yielded as its manifest entry.
    """
    number = 0
    with tempfile.TemporaryDirectory(prefix="datamount-pack-") as scratch:
        writer: ShardWriter | None = None
        for group in groups:
            if writer is None:
                writer = ShardWriter(os.path.join(scratch, f"shard-{number:05d}.parquet"), schema)
            writer.write(group)
            report.advance(items=group.num_rows, size=group.nbytes)
            if writer.size >= shard_bytes:
                yield writer.commit(store, folder, f"packs/{version}/shard-{number:05d}.parquet")
                writer, number = None, number + 1
        if writer is not None:
            yield writer.commit(store, folder, f"packs/{version}/shard-{number:05d}.parquet")


class ShardWriter:
    """One shard being written to a local file: one row group per batch, then hashed and sent to the store by
    :meth:`commit`."""

    def __init__(self, path: str, schema: pa.Schema) -> None:
        self.path = path
        text_columns = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
        binary_columns = {f.name for f in schema if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)}
        self._writer = pq.ParquetWriter(
            path,
            schema,
            # Image bytes are already compressed (JPEG, PNG): compressing them again costs time for nothing.
            compression={f.name: "NONE" if f.name in binary_columns else "SNAPPY" for f in schema},
            use_dictionary=text_columns,
            # Min/max statistics of a binary column would copy whole images into the footer.
            write_statistics=[f.name for f in schema if f.name not in binary_columns],
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

    def commit(self, store: Store, folder: str, relative: str) -> ShardEntry:
        self._writer.close()
        digest, size = sha256_file(self.path), self.size
        store.put_file(self.path, f"{folder}/{relative}")
        os.remove(self.path)
        return ShardEntry(relative, self.rows, size, digest, self.row_groups)


def _row_groups(store: Store, manifest: Manifest, schema: pa.Schema, row_group_bytes: int) -> Iterator[pa.RecordBatch]:
    rows = catalog.read_rows(store, manifest)
    columns: list[list[Any]] = [[] for _ in schema]
    pending = 0
    for index, (row, sample) in enumerate(zip(rows, _samples(store, manifest, rows), strict=True)):
        extra = (index, row[0]) if manifest.kind == "image" else (index,)
        for column, value in zip(columns, (*sample, *extra), strict=True):
            column.append(value)
        pending += sum(len(v) for v in sample)
        if pending >= row_group_bytes:
            yield pa.record_batch(columns, schema=schema)
            columns = [[] for _ in schema]
            pending = 0
    if columns[0]:
        yield pa.record_batch(columns, schema=schema)


def _samples(store: Store, manifest: Manifest, rows: list[tuple[str, ...]]) -> Iterator[tuple[Any, ...]]:
    if manifest.kind != "image":
        yield from rows
        return
    located = catalog.object_locations(manifest, rows)
    blobs = store.read_many((path for path, _ in located), sizes=(size for _, size in located))
    for row, data in zip(rows, blobs, strict=True):
        yield (data, *row[1:])
