"""``pack``: a dataset version as Parquet shards, for fast sequential and sharded reads.

Each shard holds whole rows in ``.list`` order: the list's columns (an image file's bytes in a binary column, labels
and text as strings), then ``index`` (the row's number in the version) and, for image datasets, ``path`` (the file's
path in the original list). Shards are plain Parquet: pyarrow, DuckDB, Spark, Ray or pandas read them.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from datamount.datasets import catalog, layout, locks
from datamount.datasets.errors import ManifestError
from datamount.datasets.manifest import Kind, Manifest, ShardEntry
from datamount.datasets.names import parse_ref
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.rows import ObjectLocation, check_object, object_locations, objects_read, parse_lines
from datamount.datasets.shard_writer import (
    COMPRESSION,
    DEFAULT_ROW_GROUP_BYTES,
    DEFAULT_SHARD_BYTES,
    FIRST_ROW_GROUP_BYTES,
    ShardWriter,
    check_sizes,
    list_schema,
)
from datamount.storage import DatamountError, Store, open_store


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
    characters, before compression; each shard's first of at least ``FIRST_ROW_GROUP_BYTES`` when that is less,
    so that a remote pass's first sample comes soon; the last may hold less) and those into shards of at least
    ``shard_bytes``.
    Each shard is then written on its own (:func:`plan_pack`, :func:`write_unit`: ``pack_ray`` writes them in
    parallel, byte for byte the same). Shards are written first, then recorded as the version's
    (:func:`~datamount.datasets.catalog.add_shards`; the samples do not change, so readers that opened the version
    before keep reading its objects). Packing a packed version again is a no-op; of two packs that race, the first
    to record its shards wins and the other returns those.
    """
    check_sizes(shard_bytes, row_group_bytes)
    target = open_store(store)
    with locks.writing(target, parse_ref(ref).name, purpose="pack"):
        manifest = catalog.resolve(target, ref, public_fallback=False)
        if manifest.shards:
            return manifest
        report = progress or Silent()
        units = plan_pack(target, manifest, shard_bytes, row_group_bytes)
        report.start("pack", items=manifest.rows, size=manifest.files_size)

        def write() -> list[ShardEntry]:
            shards = [write_unit(target, manifest, unit, report) for unit in units]
            report.finish()
            return shards

        return written_and_recorded(target, manifest, units, write)


def written_and_recorded(
    store: Store, manifest: Manifest, units: list[PackUnit], write: Callable[[], list[ShardEntry]]
) -> Manifest:
    """Write the shards of ``units`` (``write``) and record them as ``manifest``'s version's; return the version
    with them.

    A pack that fails while another pack of the version records its shards (which removes a losing pack's folder,
    perhaps the one this pack was writing) has lost the race: it removes what it wrote and returns the version with
    the recorded shards.
    """
    try:
        shards = write()
    except Exception:
        try:
            recorded = catalog.packed_meanwhile(store, manifest)
        except DatamountError:
            recorded = None
        if recorded is None:
            raise
        catalog.remove_lost_pack(store, recorded, {unit.folder for unit in units})
        return recorded
    return catalog.add_shards(store, manifest, shards)


@dataclass(frozen=True)
class PackUnit:
    """One shard of a pack, planned before any is written so that each can be written on its own (in any process).

    ``folder`` is the pack folder and ``number`` the shard's number in it; ``row_groups`` are ``(start, stop)`` row
    numbers in the version;
    ``list_range`` the bytes of the version's list that hold those rows (a unit reads only its own lines);
    ``objects`` (image datasets) each row's object path and size in the store; ``compression`` the codec of its
    columns but the binary ones.
    """

    folder: str
    number: int
    row_groups: tuple[tuple[int, int], ...]
    list_range: tuple[int, int]
    objects: list[ObjectLocation] = field(default_factory=list)
    compression: str = COMPRESSION

    @property
    def start(self) -> int:
        return self.row_groups[0][0]

    @property
    def stop(self) -> int:
        return self.row_groups[-1][1]


def plan_pack(
    store: Store,
    manifest: Manifest,
    shard_bytes: int,
    row_group_bytes: int,
    first_group_bytes: int = FIRST_ROW_GROUP_BYTES,
    compression: str = COMPRESSION,
) -> list[PackUnit]:
    """Cut ``manifest``'s version into shards of row groups, from its list alone (no file is read), to be written
    with ``compression``."""
    raw = store.read(layout.list_path(manifest))
    rows, starts = parse_lines(raw)
    starts.append(len(raw))
    objects = object_locations(manifest, rows) if manifest.kind is Kind.IMAGE else []
    if objects:
        sizes = [o.size + sum(len(value) for value in row[1:]) for row, o in zip(rows, objects, strict=True)]
    else:
        sizes = [sum(len(value) for value in row) for row in rows]
    folder = layout.version_pack_folder(manifest.version, shard_bytes, row_group_bytes, first_group_bytes, compression)
    return [
        PackUnit(
            folder,
            number,
            tuple(groups),
            (starts[groups[0][0]], starts[groups[-1][1]]),
            objects[groups[0][0] : groups[-1][1]],
            compression,
        )
        for number, groups in enumerate(cut_shards(sizes, shard_bytes, row_group_bytes, first_group_bytes))
    ]


def cut_shards(
    sizes: list[int], shard_bytes: int, row_group_bytes: int, first_group_bytes: int = FIRST_ROW_GROUP_BYTES
) -> list[list[tuple[int, int]]]:
    """Rows of ``sizes`` bytes each, cut into row groups of at least ``row_group_bytes`` (each shard's first of at
    least ``first_group_bytes``, when that is less; the last may hold less) and those into shards of at least
    ``shard_bytes``: each shard's row groups as ``(start, stop)`` row numbers."""
    first_group_bytes = min(first_group_bytes, row_group_bytes)
    plans: list[list[tuple[int, int]]] = [[]]
    group_start = group_bytes = shard_data = 0
    for index, size in enumerate(sizes):
        group_bytes += size
        opens_a_shard = not plans[-1] or shard_data >= shard_bytes
        wanted = first_group_bytes if opens_a_shard else row_group_bytes
        if group_bytes < wanted and index + 1 < len(sizes):
            continue
        if shard_data >= shard_bytes:
            plans.append([])
            shard_data = 0
        plans[-1].append((group_start, index + 1))
        shard_data += group_bytes
        group_start, group_bytes = index + 1, 0
    return [plan for plan in plans if plan]


def write_unit(
    store: Store, manifest: Manifest, unit: PackUnit, report: Progress | None = None, *, sha256: str | None = None
) -> ShardEntry:
    """Write the shard ``unit`` plans to the store; return its manifest entry. With ``sha256`` (a shard made again),
    a shard whose bytes do not have it is not stored: an :class:`~datamount.storage.IntegrityError`."""
    rows, _ = parse_lines(store.read_range(layout.list_path(manifest), *unit.list_range))
    if len(rows) != unit.stop - unit.start:
        raise ManifestError(
            f"{store.url_for(layout.list_path(manifest))} changed while {manifest.ref} was being packed"
        )
    writer = ShardWriter(
        store,
        manifest.name,
        list_schema(manifest.name, manifest.kind, manifest.columns),
        shard_bytes=1 << 62,  # the plan says where the shard ends
        pack_folder=unit.folder,
        first_shard=unit.number,
        first_index=unit.start,
        progress=report,
        compression=unit.compression,
        expected=None if sha256 is None else {layout.shard_key(unit.folder, unit.number): sha256},
    )
    with contextlib.closing(_samples(store, manifest, unit, rows)) as samples:
        for start, stop in unit.row_groups:
            columns = [list(column) for column in zip(*itertools.islice(samples, stop - start), strict=True)]
            if manifest.kind is Kind.IMAGE:
                columns.append([row[0] for row in rows[start - unit.start : stop - unit.start]])
            writer.add_group(columns)
    [entry] = writer.close()
    return entry


def _samples(
    store: Store, manifest: Manifest, unit: PackUnit, rows: list[tuple[str, ...]]
) -> Iterator[tuple[object, ...]]:
    if not unit.objects:
        yield from rows
        return
    blobs = store.read_many((o.path for o in unit.objects), sizes=(o.size for o in unit.objects))
    located = enumerate(unit.objects, start=unit.start)
    for (index, location, data), row in zip(objects_read(store, manifest, located, blobs), rows, strict=True):
        yield (check_object(store, manifest, index, location, data), *row[1:])
