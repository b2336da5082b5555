"""``upload --pack`` of an image list: the files go straight from the local disk into Parquet shards, a handful of
writes in all instead of one object per file (and no second pass that reads every object back to pack it).

Resumable shard by shard: the shards go into a pack folder named after what decides them (the list, its files'
sizes, the shard sizes), and each shard written leaves a marker beside it (its entry and its files' sizes and
sha256). Run again after a kill, the upload writes only the shards without a marker. Each run names its shard files
after itself, so no writer ever replaces a file another wrote; and just before the commit the folder is marked
taken, so that no later upload writes into a folder whose shards a version may use (it takes the next folder of
that name).
"""

from __future__ import annotations

import array
import dataclasses
import hashlib
import itertools
import json
import os
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from datamount.datasets import catalog, layout
from datamount.datasets.listfile import ParsedList, SourceFile
from datamount.datasets.manifest import FileEntry, Kind, Manifest, ShardEntry
from datamount.datasets.pack import cut_shards
from datamount.datasets.progress import Progress
from datamount.datasets.shard_writer import FIRST_ROW_GROUP_BYTES, ShardWriter, check_sizes, list_schema
from datamount.storage import Store
from datamount.storage.checksums import require_unchanged
from datamount.storage.files import read_file

#: Threads reading files; each task reads a chunk of a row group's files (a task per file would cost more than
#: reading a small one).
READERS = 8
CHUNK_FILES = 32

Row = tuple[str, ...]
#: A shard's row groups, as ``(start, stop)`` row numbers.
Plan = list[tuple[int, int]]


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

    Each file is read once: its sha256 is computed from the very bytes that go into the shard. Rows are cut into
    row groups and shards as ``pack`` cuts a version (:func:`~datamount.datasets.pack.cut_shards`); the next row
    group's files are read while one is encoded and sent. A file named by two rows that has other bytes the second
    time (it changed meanwhile) is an :class:`~datamount.storage.IntegrityError`. If anything fails, nothing is
    committed and the shards written stay for the next run (or go with the dataset's unused data when one of its
    versions is removed).
    """
    check_sizes(shard_bytes, row_group_bytes)
    rows: list[Row] = [(os.path.normpath(row[0]), *row[1:]) for row in parsed.rows]
    sizes = [parsed.files[row[0]].size + sum(len(value) for value in row[1:]) for row in rows]
    plans = cut_shards(sizes, shard_bytes, row_group_bytes, FIRST_ROW_GROUP_BYTES)
    folder = _free_folder(store, draft.name, draft.list_sha256, sizes, shard_bytes, row_group_bytes)
    progress.start("pack", items=len(rows), size=sum(sizes))
    written = _written_shards(store, draft.name, folder, plans)
    entries: dict[str, FileEntry] = {}
    for number, marker in sorted(written.items()):
        start, stop = plans[number][0][0], plans[number][-1][1]
        _record_files(entries, rows[start:stop], marker["files"], parsed)
        progress.advance(items=stop - start, size=sum(sizes[start:stop]))
    resumed = len(entries)
    pending = [number for number in range(len(plans)) if number not in written]
    shards = _ShardsOfRows(store, draft.name, folder, parsed, rows, row_group_bytes, progress)
    written.update(shards.write({number: plans[number] for number in pending}, entries))
    packed = dataclasses.replace(
        draft,
        files=sorted(entries.values(), key=lambda entry: entry.path),
        shards=[ShardEntry(**written[number]["entry"]) for number in range(len(plans))],
        objects=False,
    )
    progress.finish()
    dataset = layout.dataset_folder(draft.name)
    store.write(f"{dataset}/{layout.taken_marker(folder)}", b"")
    manifest = catalog.commit(store, packed)
    store.remove_many(f"{dataset}/{layout.shard_marker(folder, number)}" for number in range(len(plans)))
    sent = sum(packed.shards[number].size for number in pending)
    return PackedUpload(manifest, len(entries) - resumed, sent, resumed)


@dataclasses.dataclass(frozen=True)
class PackedUpload:
    """What :func:`commit_packed` did: the committed manifest, the files it read and the bytes of the shards it
    sent, and the files found in the shards of an earlier run."""

    manifest: Manifest
    sent_files: int
    sent_bytes: int
    resumed_files: int


def _free_folder(
    store: Store, name: str, list_sha256: str, sizes: list[int], shard_bytes: int, row_group_bytes: int
) -> str:
    """The pack folder of this upload: the first folder named after its list, sizes and shard sizes that no version
    may use yet."""
    digest = hashlib.sha256(list_sha256.encode())
    cut = [shard_bytes, row_group_bytes, *([FIRST_ROW_GROUP_BYTES] if row_group_bytes > FIRST_ROW_GROUP_BYTES else [])]
    digest.update(array.array("q", [*cut, *sizes]).tobytes())
    dataset = layout.dataset_folder(name)
    for attempt in itertools.count(1):
        folder = layout.upload_pack_folder(digest.hexdigest()[:16], attempt)
        if not store.exists(f"{dataset}/{layout.taken_marker(folder)}"):
            return folder
    raise AssertionError("unreachable")


def _written_shards(store: Store, name: str, folder: str, plans: list[Plan]) -> dict[int, dict[str, Any]]:
    """The markers of the shards an earlier run wrote into ``folder``, by shard number: those whose shard is there,
    of the size the marker says, and whose rows are the plan's. Any other marker is ignored (its shard is written
    again)."""
    dataset = layout.dataset_folder(name)
    stored = store.list(f"{dataset}/{folder}")
    written = {}
    for number, plan in enumerate(plans):
        marker_path = f"{dataset}/{layout.shard_marker(folder, number)}"
        if marker_path not in stored:
            continue
        try:
            marker = json.loads(store.read(marker_path))
            entry = ShardEntry(**marker["entry"])
            run = entry.path.removeprefix(f"{folder}/shard-{number:05d}-").removesuffix(".parquet")
            files = marker["files"]
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
        fits = bool(run) and "/" not in run and entry.path == layout.shard_key(folder, number, run)
        rows = plan[-1][1] - plan[0][0]
        if fits and stored.get(f"{dataset}/{entry.path}") == entry.size and entry.rows == rows == len(files):
            written[number] = marker
    return written


def _record_files(entries: dict[str, FileEntry], rows: list[Row], files: list[Any], parsed: ParsedList) -> None:
    """Keep the entries of ``rows``' files (``files``: each one's size and sha256, as read)."""
    for row, (size, sha256) in zip(rows, files, strict=True):
        _record(entries, FileEntry(row[0], int(size), str(sha256)), parsed.files[row[0]].local_path)


class _ShardsOfRows:
    """Writes shards of ``rows`` into ``folder``, each one's marker after it; the files of the next row group are
    read while one is encoded and sent."""

    def __init__(
        self,
        store: Store,
        name: str,
        folder: str,
        parsed: ParsedList,
        rows: list[Row],
        row_group_bytes: int,
        progress: Progress,
    ) -> None:
        self.store, self.name, self.folder, self.parsed, self.rows = store, name, folder, parsed, rows
        self.row_group_bytes, self.progress = row_group_bytes, progress
        self.schema: pa.Schema = list_schema(name, Kind.IMAGE, parsed.columns())
        self.run = uuid.uuid4().hex[:8]

    def write(self, plans: dict[int, Plan], entries: dict[str, FileEntry]) -> dict[int, dict[str, Any]]:
        """Write the shards of ``plans`` (by number), recording their files into ``entries``; their markers."""
        groups = [(number, group) for number, plan in plans.items() for group in plan]
        written: dict[int, dict[str, Any]] = {}
        writer: ShardWriter | None = None
        files: list[tuple[int, str]] = []
        ahead: list[Future[list[tuple[bytes, str]]]] = []
        with ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="datamount-read") as pool:
            try:
                ahead = self._read(pool, groups[0][1]) if groups else []
                for position, (number, (start, stop)) in enumerate(groups):
                    current = ahead
                    ahead = self._read(pool, groups[position + 1][1]) if position + 1 < len(groups) else []
                    read_back = [item for future in current for item in future.result()]
                    group_rows = self.rows[start:stop]
                    group_files = [(len(data), sha256) for data, sha256 in read_back]
                    _record_files(entries, group_rows, group_files, self.parsed)
                    files.extend(group_files)
                    if writer is None:
                        writer = self._writer(number, start)
                    labels = [list(column) for column in zip(*(row[1:] for row in group_rows), strict=True)]
                    writer.add_group([[data for data, _ in read_back], *labels, [row[0] for row in group_rows]])
                    if stop == plans[number][-1][1]:  # the shard's last row group
                        written[number] = self._finish(number, writer, files)
                        writer, files = None, []
            except BaseException:  # the shards finished stay, with their markers, for the next run
                for future in ahead:
                    future.cancel()
                if writer is not None:
                    writer.discard()
                raise
        return written

    def _read(self, pool: ThreadPoolExecutor, group: tuple[int, int]) -> list[Future[list[tuple[bytes, str]]]]:
        files = [self.parsed.files[row[0]] for row in self.rows[group[0] : group[1]]]
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

    def _finish(self, number: int, writer: ShardWriter, files: list[tuple[int, str]]) -> dict[str, Any]:
        """Close shard ``number`` and leave its marker; the marker."""
        (entry,) = writer.close()
        marker = {"entry": dataclasses.asdict(entry), "files": files}
        marker_path = f"{layout.dataset_folder(self.name)}/{layout.shard_marker(self.folder, number)}"
        self.store.write(marker_path, json.dumps(marker).encode())
        return marker


def _read_hashed(files: list[SourceFile]) -> list[tuple[bytes, str]]:
    found = []
    for file in files:
        data = read_file(file.local_path, file.size)
        found.append((data, hashlib.sha256(data).hexdigest()))
    return found


def _record(entries: dict[str, FileEntry], entry: FileEntry, local: str) -> None:
    """Keep ``entry``; a file already read with other bytes changed in between."""
    known = entries.setdefault(entry.path, entry)
    if known.sha256 != entry.sha256:
        require_unchanged(local, entry.sha256, known.sha256)
