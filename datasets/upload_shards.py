"""``upload --pack`` of an image list: the files go straight from the local disk into Parquet shards, a handful of
writes in all instead of one object per file (and no second pass that reads every object back to pack it).

Resumable shard by shard: the shards go into a pack folder named after what decides them (the list, its files'
sizes, the shard sizes), and each shard written leaves a marker beside it (its entry and its files' sizes and
xxh3-64: :mod:`~datamount.datasets.upload_marker`). Run again after a kill, the upload writes only the shards without
a marker. Each run names its shard files after itself, so no writer ever replaces a file another wrote; and just
before the commit the folder is marked taken, so that no later upload writes into a folder whose shards a version
may use (it takes the next folder of that name).
"""

from __future__ import annotations

import array
import dataclasses
import hashlib
import itertools
import operator
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from datamount.datasets import catalog, layout
from datamount.datasets.listfile import ParsedList, SourceFile
from datamount.datasets.manifest import PACKED_DIGEST_FORMAT_VERSION, FileEntry, Kind, Manifest, ShardEntry
from datamount.datasets.pack import cut_shards
from datamount.datasets.progress import Progress
from datamount.datasets.shard_writer import FIRST_ROW_GROUP_BYTES, ShardWriter, check_sizes, list_schema
from datamount.datasets.spool import BLOCK_RECORDS, ExternalSort, FileSpool
from datamount.datasets.upload_marker import Marker, MarkerWriter, read_marker
from datamount.storage import IntegrityError, ObjectNotFoundError, Store
from datamount.storage.checksums import require_unchanged, xxh3
from datamount.storage.files import read_file

#: Threads reading files; each task reads a chunk of a row group's files (a task per file would cost more than
#: reading a small one).
READERS = 8
CHUNK_FILES = 32

Row = tuple[str, ...]
#: A shard's row groups, as ``(start, stop)`` row numbers.
Plan = list[tuple[int, int]]
#: The rows of one row group with their files' sizes, in order: ``(shard number, start, stop, [(row, size)])``.
Group = tuple[int, int, int, list[tuple[Row, int]]]


def commit_packed(
    store: Store,
    draft: Manifest,
    parsed: ParsedList,
    *,
    shard_bytes: int,
    row_group_bytes: int,
    progress: Progress,
) -> PackedUpload:
    """Write the rows of the image list ``parsed`` into shards (those not written by an earlier run of the same
    upload), then commit ``draft`` with them and the files' entries (``objects`` false).

    Each file is read once: its xxh3-64, the file's entry's content digest (it records no sha256: it names no object;
    see :mod:`~datamount.datasets.manifest`), is computed from the very bytes that go into the shard. Rows are cut into
    row groups and shards as ``pack`` cuts a version (:func:`~datamount.datasets.pack.cut_shards`); the next row
    group's files are read while one is encoded and sent. The rows are read as a stream from the list's copy, a row
    group at a time; each row's file entry is kept on disk, and the files' entries are sorted there by path before
    the commit. A file named by two rows that has other bytes the second time (it changed meanwhile) is an
    :class:`~datamount.storage.IntegrityError`. If anything fails, nothing is committed and the shards written stay
    for the next run (or go with the dataset's unused data when one of its versions is removed).
    """
    check_sizes(shard_bytes, row_group_bytes)
    sizes = _RowSizes(parsed, shard_bytes, row_group_bytes)
    plans = cut_shards(sizes, shard_bytes, row_group_bytes, FIRST_ROW_GROUP_BYTES)
    folder = free_pack_folder(store, draft.name, sizes.digest.hexdigest()[:16])
    progress.start("pack", items=parsed.row_count, size=sizes.total)
    written = _written_shards(store, draft.name, folder, plans)
    read = parsed.external_sort()  # (path, 1 if read by this run else 0, xxh3-64, size): one per row
    shards = _ShardsOfRows(store, draft.name, folder, parsed, row_group_bytes, progress)
    resumed = _Resumed(store, draft.name, folder, plans, written, read, progress)
    entries = {**written, **shards.write(resumed.pending(_groups(parsed, plans)), plans, read)}
    files = parsed.spool()
    try:
        sent_files = _spool_files(parsed, read, files)
    except IntegrityError:  # a file changed between two rows' reads: this run's shards disagree on it
        dataset = layout.dataset_folder(draft.name)
        ours = [number for number in entries if number not in written]
        store.remove_many(
            [f"{dataset}/{entries[number]['path']}" for number in ours]
            + [f"{dataset}/{layout.upload_shard_marker(folder, number)}" for number in ours]
        )
        raise
    packed = dataclasses.replace(
        draft,
        files=files,
        shards=[ShardEntry(**entries[number]) for number in range(len(plans))],
        objects=False,
        format_version=max(draft.format_version, PACKED_DIGEST_FORMAT_VERSION),
    )
    progress.finish()
    dataset = layout.dataset_folder(draft.name)
    store.write(f"{dataset}/{layout.taken_marker(folder)}", b"")
    manifest = catalog.commit(store, packed)
    store.remove_many(f"{dataset}/{layout.upload_shard_marker(folder, number)}" for number in range(len(plans)))
    sent = sum(packed.shards[number].size for number in range(len(plans)) if number not in written)
    return PackedUpload(manifest, sent_files, sent, len(files) - sent_files)


@dataclasses.dataclass(frozen=True)
class PackedUpload:
    """What :func:`commit_packed` did: the committed manifest, the files it read and the bytes of the shards it
    sent, and the files found in the shards of an earlier run."""

    manifest: Manifest
    sent_files: int
    sent_bytes: int
    resumed_files: int


class _RowSizes:
    """Each row's bytes (its file's and its labels' characters), read as a stream; what a pass over them added up:
    their total, and the digest of the cut they make (:func:`free_pack_folder`)."""

    def __init__(self, parsed: ParsedList, shard_bytes: int, row_group_bytes: int) -> None:
        self.parsed = parsed
        self.total = 0
        self.digest = hashlib.sha256(parsed.list_sha256.encode())
        cut = [shard_bytes, row_group_bytes]
        if row_group_bytes > FIRST_ROW_GROUP_BYTES:
            cut.append(FIRST_ROW_GROUP_BYTES)
        self.digest.update(array.array("q", cut).tobytes())

    def __iter__(self) -> Iterator[int]:
        rows = zip(self.parsed.rows(), self.parsed.row_sizes(), strict=True)
        sizes = (size + sum(len(value) for value in row[1:]) for row, size in rows)
        while block := array.array("q", itertools.islice(sizes, BLOCK_RECORDS)):
            self.digest.update(block.tobytes())
            self.total += sum(block)
            yield from block


def _groups(parsed: ParsedList, plans: list[Plan]) -> Iterator[Group]:
    """The row groups of ``plans``, each with its rows, read as a stream from the list's copy."""
    rows = zip(parsed.rows(), parsed.row_sizes(), strict=True)
    for number, plan in enumerate(plans):
        for start, stop in plan:
            yield number, start, stop, list(itertools.islice(rows, stop - start))


def free_pack_folder(store: Store, name: str, cut: str) -> str:
    """The pack folder of this upload: the first folder named after its list, sizes and shard sizes (``cut``) that no
    version may use yet."""
    dataset = layout.dataset_folder(name)
    for attempt in itertools.count(1):
        folder = layout.upload_pack_folder(cut, attempt)
        if not store.exists(f"{dataset}/{layout.taken_marker(folder)}"):
            return folder
    raise AssertionError("unreachable")


def _written_shards(store: Store, name: str, folder: str, plans: list[Plan]) -> dict[int, dict[str, Any]]:
    """The entries of the shards an earlier run wrote into ``folder``, by shard number: those whose marker is
    there, whose shard is there of the size the marker says, and whose rows are the plan's. Any other marker is
    ignored (its shard is written again)."""
    dataset = layout.dataset_folder(name)
    stored = store.list(f"{dataset}/{folder}")
    written = {}
    for number, plan in enumerate(plans):
        marker = _marker(store, name, folder, number, stored)
        if marker is None:
            continue
        entry = ShardEntry(**marker.entry)
        rows = plan[-1][1] - plan[0][0]
        if stored.get(f"{dataset}/{entry.path}") == entry.size and entry.rows == rows == marker.rows:
            written[number] = marker.entry
    return written


def _marker(
    store: Store, name: str, folder: str, number: int, stored: Mapping[str, int] | None = None
) -> Marker | None:
    """The marker of shard ``number`` (``stored``: the folder's listing, when known), or None where there is none
    or it is not one this upload wrote."""
    marker_path = f"{layout.dataset_folder(name)}/{layout.upload_shard_marker(folder, number)}"
    if stored is not None and marker_path not in stored:
        return None
    marker = read_marker(store, marker_path, None if stored is None else stored[marker_path])
    if marker is None:
        return None
    try:
        entry = ShardEntry(**marker.entry)
    except TypeError:
        return None
    run = entry.path.removeprefix(f"{folder}/shard-{number:05d}-").removesuffix(".parquet")
    fits = bool(run) and "/" not in run and entry.path == layout.shard_key(folder, number, run)
    return marker if fits else None


class _Resumed:
    """Passes on the row groups of shards still to write; records the files of those an earlier run wrote (their
    marker's, read one shard at a time)."""

    def __init__(
        self,
        store: Store,
        name: str,
        folder: str,
        plans: list[Plan],
        written: Mapping[int, Any],
        read: ExternalSort,
        progress: Progress,
    ) -> None:
        self.store, self.name, self.folder, self.plans = store, name, folder, plans
        self.written, self.read, self.progress = written, read, progress

    def pending(self, groups: Iterator[Group]) -> Iterator[Group]:
        marker: Marker | None = None
        for group in groups:
            number, start, stop, rows = group
            if number not in self.written:
                yield group
                continue
            first = self.plans[number][0][0]
            if start == first or marker is None:
                marker = _marker(self.store, self.name, self.folder, number)
                if marker is None:
                    raise ObjectNotFoundError(f"the marker of shard {number} in {self.folder} is gone; upload again")
            files = marker.files(self.store, start - first, stop - first)
            for (row, _), (size, digest) in zip(rows, files, strict=True):
                self.read.add((row[0], 0, digest, size))
            self.progress.advance(items=stop - start, size=sum(size for _, size in rows))


def _spool_files(parsed: ParsedList, read: ExternalSort, files: FileSpool) -> int:
    """The files' entries of ``read`` (one per row), one per path in path order, into ``files``; how many were read
    by this run (not only found in an earlier run's shards). A file that had other bytes when another row read it
    is an :class:`~datamount.storage.IntegrityError`."""
    sent = 0
    for path, same in itertools.groupby(read.sorted(), key=operator.itemgetter(0)):
        records = iter(same)  # an earlier run's first: what it read is what the version holds
        _, fresh, digest, size = next(records)
        for _, _, other, _ in records:
            require_unchanged(parsed.local_path(path), other, digest, checksum="xxh3-64")
        files.append(FileEntry(path, size, "", digest))
        sent += fresh
    return sent


class _ShardsOfRows:
    """Writes shards into ``folder``, each one's marker after it; the files of the next row group are read while
    one is encoded and sent."""

    def __init__(
        self,
        store: Store,
        name: str,
        folder: str,
        parsed: ParsedList,
        row_group_bytes: int,
        progress: Progress,
    ) -> None:
        self.store, self.name, self.folder, self.parsed = store, name, folder, parsed
        self.row_group_bytes, self.progress = row_group_bytes, progress
        self.schema: pa.Schema = list_schema(name, Kind.IMAGE, parsed.columns())
        self.run = uuid.uuid4().hex[:8]

    def write(self, groups: Iterator[Group], plans: list[Plan], read: ExternalSort) -> dict[int, dict[str, Any]]:
        """Write the row groups of ``groups`` (their shards' plans in ``plans``), recording their files into
        ``read``; the entries of the shards written."""
        written: dict[int, dict[str, Any]] = {}
        writer: ShardWriter | None = None
        marker = MarkerWriter()
        ahead: list[Future[list[tuple[bytes, str]]]] = []
        with ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="datamount-read") as pool:
            try:
                following = next(groups, None)
                ahead = self._read(pool, following[3]) if following else []
                while following is not None:
                    (number, start, stop, rows), current = following, ahead
                    following = next(groups, None)
                    ahead = self._read(pool, following[3]) if following else []
                    read_back = [item for future in current for item in future.result()]
                    group_files = [(len(data), digest) for data, digest in read_back]
                    for (row, _), (size, digest) in zip(rows, group_files, strict=True):
                        read.add((row[0], 1, digest, size))
                    marker.add(group_files)
                    if writer is None:
                        writer = self._writer(number, start)
                    labels = [list(column) for column in zip(*(row[1:] for row, _ in rows), strict=True)]
                    writer.add_group([[data for data, _ in read_back], *labels, [row[0] for row, _ in rows]])
                    if stop == plans[number][-1][1]:  # the shard's last row group
                        written[number] = self._finish(number, writer, marker)
                        writer, marker = None, MarkerWriter()
            except BaseException:  # the shards finished stay, with their markers, for the next run
                for future in ahead:
                    future.cancel()
                if writer is not None:
                    writer.discard()
                raise
            finally:
                marker.close()
        return written

    def _read(self, pool: ThreadPoolExecutor, rows: list[tuple[Row, int]]) -> list[Future[list[tuple[bytes, str]]]]:
        files = [SourceFile(self.parsed.local_path(row[0]), row[0], size) for row, size in rows]
        return [pool.submit(_read_hashed, files[at : at + CHUNK_FILES]) for at in range(0, len(files), CHUNK_FILES)]

    def _writer(self, number: int, first_row: int) -> ShardWriter:
        return ShardWriter(
            self.store,
            self.name,
            self.schema,
            shard_bytes=1 << 62,  # the plan says where each shard ends
            row_group_bytes=self.row_group_bytes,
            pack_folder=self.folder,
            first_shard=number,
            first_index=first_row,
            run=self.run,
            progress=self.progress,
        )

    def _finish(self, number: int, writer: ShardWriter, marker: MarkerWriter) -> dict[str, Any]:
        """Close shard ``number`` and leave its marker; the shard's entry."""
        (entry,) = writer.close()
        fields = dataclasses.asdict(entry)
        marker.send(
            self.store, f"{layout.dataset_folder(self.name)}/{layout.upload_shard_marker(self.folder, number)}", fields
        )
        return fields


def _read_hashed(files: list[SourceFile]) -> list[tuple[bytes, str]]:
    found = []
    for file in files:
        data = read_file(file.local_path, file.size)
        found.append((data, xxh3(data)))
    return found
