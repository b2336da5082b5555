"""``pack``: a dataset version as Parquet shards, for fast sequential and sharded reads.

Each shard holds whole rows in ``.list`` order: the list's columns (an image file's bytes in a binary column, labels
and text as strings), then ``index`` (the row's number in the version) and, for image datasets, ``path`` (the file's
path in the original list). Shards are plain Parquet: pyarrow, DuckDB, Spark, Ray or pandas read them.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from datamount.datasets import catalog
from datamount.datasets.errors import ManifestError
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

    The version is cut into row groups of at least ``row_group_bytes`` of sample data (file bytes and label
    characters, before compression; the last may hold less) and those into shards of at least ``shard_bytes``.
    Each shard is then written on its own (:func:`plan_pack`, :func:`write_unit`: ``pack_ray`` writes them in
    parallel, byte for byte the same). Shards are written first, then the version's manifest is replaced by one
    that lists them (the samples do not change, so readers that opened the version before keep reading its
    objects). Packing a packed version again is a no-op.
    """
    if shard_bytes < 1 or row_group_bytes < 1:
        raise ValueError("shard and row-group sizes must be positive")
    target = open_store(store)
    manifest = catalog.resolve(target, ref, public_fallback=False)
    if manifest.shards:
        return manifest
    report = progress or Silent()
    units = plan_pack(target, manifest, shard_bytes, row_group_bytes)
    report.start("pack", items=manifest.rows, size=sum(f.size for f in manifest.files))
    shards = [write_unit(target, manifest, unit, report) for unit in units]
    report.finish()
    return commit_pack(target, manifest, shards)


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


@dataclass(frozen=True)
class PackUnit:
    """One shard of a pack, planned before any is written so that each can be written on its own (in any process).

    ``row_groups`` are ``(start, stop)`` row numbers in the version; ``list_range`` the bytes of the version's list
    that hold those rows (a unit reads only its own lines); ``objects`` (image datasets) each row's object path and
    size in the store.
    """

    path: str
    row_groups: tuple[tuple[int, int], ...]
    list_range: tuple[int, int]
    objects: list[tuple[str, int]] = field(default_factory=list)

    @property
    def start(self) -> int:
        return self.row_groups[0][0]

    @property
    def stop(self) -> int:
        return self.row_groups[-1][1]


def plan_pack(store: Store, manifest: Manifest, shard_bytes: int, row_group_bytes: int) -> list[PackUnit]:
    """Cut ``manifest``'s version into shards of row groups, from its list alone (no file is read)."""
    raw = store.read(catalog.list_path(manifest.name, manifest.version))
    rows, starts = _parse_list(raw)
    starts.append(len(raw))
    objects = catalog.object_locations(manifest, rows) if manifest.kind == "image" else []
    if objects:
        sizes = [size + sum(len(value) for value in row[1:]) for row, (_, size) in zip(rows, objects, strict=True)]
    else:
        sizes = [sum(len(value) for value in row) for row in rows]
    plans: list[list[tuple[int, int]]] = [[]]
    group_start = group_bytes = shard_data = 0
    for index, size in enumerate(sizes):
        group_bytes += size
        if group_bytes < row_group_bytes and index + 1 < len(sizes):
            continue
        if shard_data >= shard_bytes:
            plans.append([])
            shard_data = 0
        plans[-1].append((group_start, index + 1))
        shard_data += group_bytes
        group_start, group_bytes = index + 1, 0
    return [
        PackUnit(
            f"packs/{manifest.version}/shard-{number:05d}.parquet",
            tuple(groups),
            (starts[groups[0][0]], starts[groups[-1][1]]),
            objects[groups[0][0] : groups[-1][1]],
        )
        for number, groups in enumerate(plans)
        if groups
    ]


def write_unit(store: Store, manifest: Manifest, unit: PackUnit, report: Progress | None = None) -> ShardEntry:
    """Write the shard ``unit`` plans to the store (through a local file); return its manifest entry."""
    schema = schema_for(manifest)
    report = report or Silent()
    list_path = catalog.list_path(manifest.name, manifest.version)
    rows, _ = _parse_list(store.read_range(list_path, *unit.list_range))
    if len(rows) != unit.stop - unit.start:
        raise ManifestError(f"{store.url_for(list_path)} changed while {manifest.ref} was being packed")
    with tempfile.TemporaryDirectory(prefix="datamount-pack-") as scratch:
        writer = ShardWriter(os.path.join(scratch, posixpath.basename(unit.path)), schema)
        for group in _row_groups(store, manifest, unit, rows, schema):
            writer.write(group)
            report.advance(items=group.num_rows, size=group.nbytes)
        return writer.commit(store, catalog.dataset_folder(manifest.name), unit.path)


def _parse_list(raw: bytes) -> tuple[list[tuple[str, ...]], list[int]]:
    """The rows of (part of) a normalised list, as :func:`catalog.read_rows` reads them, and where each row's line
    starts in ``raw``."""
    rows, starts, position = [], [], 0
    for line in raw.split(b"\n"):
        if line:
            rows.append(tuple(line.decode("utf-8").split("\t")))
            starts.append(position)
        position += len(line) + 1
    return rows, starts


def commit_pack(store: Store, manifest: Manifest, shards: list[ShardEntry]) -> Manifest:
    """Replace ``manifest`` by one that lists ``shards`` (all written): the version is packed from now on."""
    packed = dataclasses.replace(manifest, shards=shards)
    store.write(catalog.manifest_path(manifest.name, manifest.version), packed.to_json())
    return packed


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


def _row_groups(
    store: Store, manifest: Manifest, unit: PackUnit, rows: list[tuple[str, ...]], schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    samples = _samples(store, unit, rows)
    for start, stop in unit.row_groups:
        columns: list[list[Any]] = [[] for _ in schema]
        for index in range(start, stop):
            row = rows[index - unit.start]
            extra = (index, row[0]) if manifest.kind == "image" else (index,)
            for column, value in zip(columns, (*next(samples), *extra), strict=True):
                column.append(value)
        yield pa.record_batch(columns, schema=schema)


def _samples(store: Store, unit: PackUnit, rows: list[tuple[str, ...]]) -> Iterator[tuple[Any, ...]]:
    if not unit.objects:
        yield from rows
        return
    blobs = store.read_many((path for path, _ in unit.objects), sizes=(size for _, size in unit.objects))
    for row, data in zip(rows, blobs, strict=True):
        yield (data, *row[1:])
