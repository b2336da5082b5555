"""``pack``: a dataset version as Parquet shards, for fast sequential and sharded reads.

Each shard holds whole rows in ``.list`` order: the list's columns (an image file's bytes in a binary column, labels
and text as strings), then ``index`` (the row's number in the version) and, for image datasets, ``path`` (the file's
path in the original list). Shards are plain Parquet: pyarrow, DuckDB, Spark, Ray or pandas read them.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Generator, Iterable, Iterator
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
    ``objects`` (image datasets from before format 7) each row's object path and size in the store, or, with
    ``indexed``, none: the rows' objects are read from the version's row index as the unit is written;
    ``compression`` the codec of its columns but the binary ones; ``files_size`` the bytes of its rows' files.
    """

    folder: str
    number: int
    row_groups: tuple[tuple[int, int], ...]
    list_range: tuple[int, int]
    objects: list[ObjectLocation] = field(default_factory=list)
    compression: str = COMPRESSION
    indexed: bool = False
    files_size: int = 0

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
    with ``compression``. A text version's list is read as a stream (the plan holds row groups, not rows)."""
    folder = layout.version_pack_folder(manifest.version, shard_bytes, row_group_bytes, first_group_bytes, compression)
    if manifest.kind is not Kind.IMAGE or _indexed(manifest):
        return _plan_streamed(store, manifest, folder, shard_bytes, row_group_bytes, first_group_bytes, compression)
    raw = store.read(layout.list_path(manifest))
    rows, starts = parse_lines(raw)
    starts.append(len(raw))
    objects = object_locations(manifest, rows) if manifest.kind is Kind.IMAGE else []
    if objects:
        sizes = [o.size + sum(len(value) for value in row[1:]) for row, o in zip(rows, objects, strict=True)]
    else:
        sizes = [sum(len(value) for value in row) for row in rows]
    return [
        PackUnit(
            folder,
            number,
            tuple(groups),
            (starts[groups[0][0]], starts[groups[-1][1]]),
            objects[groups[0][0] : groups[-1][1]],
            compression,
            files_size=sum(o.size for o in objects[groups[0][0] : groups[-1][1]]),
        )
        for number, groups in enumerate(cut_shards(sizes, shard_bytes, row_group_bytes, first_group_bytes))
    ]


def _indexed(manifest: Manifest) -> bool:
    """Whether each row's object of an image version is in its row index (format 7)."""
    return manifest.objects and manifest.row_parts is not None and len(manifest.row_parts) == manifest.rows


def cut_shards(
    sizes: Iterable[int],
    shard_bytes: int,
    row_group_bytes: int,
    first_group_bytes: int = FIRST_ROW_GROUP_BYTES,
    *,
    on_group: Callable[[int], object] | None = None,
) -> list[list[tuple[int, int]]]:
    """Rows of ``sizes`` bytes each, cut into row groups of at least ``row_group_bytes`` (each shard's first of at
    least ``first_group_bytes``, when that is less; the last may hold less) and those into shards of at least
    ``shard_bytes``: each shard's row groups as ``(start, stop)`` row numbers. ``sizes`` is read once, as a stream
    (the plan holds row groups, not rows); ``on_group(stop)`` is called as each group closes, right after its last
    row's size was taken."""
    first_group_bytes = min(first_group_bytes, row_group_bytes)
    plans: list[list[tuple[int, int]]] = [[]]
    group_start = group_bytes = shard_data = 0

    def close_group(stop: int) -> None:
        nonlocal group_start, group_bytes, shard_data
        if shard_data >= shard_bytes:
            plans.append([])
            shard_data = 0
        plans[-1].append((group_start, stop))
        if on_group is not None:
            on_group(stop)
        shard_data += group_bytes
        group_start, group_bytes = stop, 0

    rows = 0
    for rows, size in enumerate(sizes, start=1):
        group_bytes += size
        opens_a_shard = not plans[-1] or shard_data >= shard_bytes
        if group_bytes >= (first_group_bytes if opens_a_shard else row_group_bytes):
            close_group(rows)
    if group_start < rows:  # the last rows, however few
        close_group(rows)
    return [plan for plan in plans if plan]


def write_unit(
    store: Store, manifest: Manifest, unit: PackUnit, report: Progress | None = None, *, sha256: str | None = None
) -> ShardEntry:
    """Write the shard ``unit`` plans to the store; return its manifest entry. With ``sha256`` (a shard made again),
    a shard whose bytes do not have it is not stored: an :class:`~datamount.storage.IntegrityError`."""
    changed = ManifestError(
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
    rows = _rows_in_range(store, layout.list_path(manifest), *unit.list_range)
    with contextlib.closing(_samples(store, manifest, unit, rows)) as samples:
        for start, stop in unit.row_groups:  # the list read a row group at a time
            group = list(itertools.islice(samples, stop - start))
            if len(group) != stop - start:
                raise changed
            columns = [list(column) for column in zip(*(sample for _, sample in group), strict=True)]
            if manifest.kind is Kind.IMAGE:
                columns.append([row[0] for row, _ in group])
            writer.add_group(columns)
        if next(samples, None) is not None:
            raise changed
    [entry] = writer.close()
    return entry


def _samples(
    store: Store, manifest: Manifest, unit: PackUnit, rows: Iterator[tuple[str, ...]]
) -> Generator[tuple[tuple[str, ...], tuple[object, ...]], None, None]:
    """Each row of ``unit`` with its sample (an image's file read from its object and checked)."""
    if unit.indexed:
        assert manifest.row_parts is not None
        objects: Iterable[ObjectLocation] = (
            ObjectLocation(layout.object_path(manifest.name, file.sha256), file.size, file.sha256, file.xxh3)
            for file in manifest.row_parts.files(unit.start, unit.stop)
        )
    elif unit.objects:
        objects = unit.objects
    else:
        yield from ((row, row) for row in rows)
        return
    for_paths, for_sizes, for_rows = itertools.tee(objects, 3)
    blobs = store.read_many((o.path for o in for_paths), sizes=(o.size for o in for_sizes))
    located = enumerate(for_rows, start=unit.start)
    for (index, location, data), row in zip(objects_read(store, manifest, located, blobs), rows, strict=False):
        yield row, (check_object(store, manifest, index, location, data), *row[1:])
    for row in rows:  # more rows than objects: the list changed
        yield row, row


#: Bytes of a version's list read at once when it is read as a stream.
LIST_BLOCK_BYTES = 8 << 20


def _lines_in_range(store: Store, path: str, start: int, end: int) -> Iterator[bytes]:
    """The lines of bytes ``start`` to ``end`` of the list at ``path``, each with its line break, read a block at a
    time."""
    tail = b""
    for at in range(start, end, LIST_BLOCK_BYTES):
        lines = (tail + store.read_range(path, at, min(at + LIST_BLOCK_BYTES, end))).split(b"\n")
        tail = lines.pop()
        for line in lines:
            yield line + b"\n"
    if tail:
        yield tail


def _rows_in_range(store: Store, path: str, start: int, end: int) -> Iterator[tuple[str, ...]]:
    """The rows of bytes ``start`` to ``end`` of a normalised list, as :func:`~.rows.list_rows` reads them."""
    for line in _lines_in_range(store, path, start, end):
        text = line.decode("utf-8").removesuffix("\n")
        if text:
            yield tuple(text.split("\t"))


def _plan_streamed(
    store: Store,
    manifest: Manifest,
    folder: str,
    shard_bytes: int,
    row_group_bytes: int,
    first_group_bytes: int,
    compression: str,
) -> list[PackUnit]:
    """The plan of a text version, or of an image version with a row index, its list (and row index) read once as
    a stream: a text row's size is its characters but TABs, an image row's its file's size and its labels'
    characters; where each row group ends in the list, and the bytes of its files, are noted as the group closes."""
    path = layout.list_path(manifest)
    indexed = manifest.kind is Kind.IMAGE
    position = files = 0
    ends = {0: (0, 0)}  # row number -> where its line starts, and the files' bytes before it

    def sizes() -> Iterator[int]:
        nonlocal position, files
        index = manifest.row_parts.files(0, manifest.rows) if indexed and manifest.row_parts is not None else None
        for line in _lines_in_range(store, path, 0, manifest.list_size):
            position += len(line)
            text = line.decode("utf-8").removesuffix("\n")
            if not text:
                continue
            characters = len(text) - text.count("\t")
            if index is None:
                yield characters
                continue
            file = next(index)
            files += file.size
            yield file.size + characters - len(text.split("\t", 1)[0])

    plans = cut_shards(
        sizes(),
        shard_bytes,
        row_group_bytes,
        first_group_bytes,
        on_group=lambda stop: ends.update({stop: (position, files)}),
    )
    return [
        PackUnit(
            folder,
            number,
            tuple(groups),
            (ends[groups[0][0]][0], ends[groups[-1][1]][0]),
            [],
            compression,
            indexed=indexed,
            files_size=ends[groups[-1][1]][1] - ends[groups[0][0]][1],
        )
        for number, groups in enumerate(plans)
    ]
