"""``upload --pack`` of an image list: the files go straight from the local disk into Parquet shards, a handful of
writes in all instead of one object per file (and no second pass that reads every object back to pack it)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from concurrent.futures import Future, ThreadPoolExecutor

from datamount.datasets import catalog
from datamount.datasets.listfile import ParsedList
from datamount.datasets.manifest import FileEntry, Kind, Manifest
from datamount.datasets.pack import cut_shards
from datamount.datasets.progress import Progress
from datamount.datasets.shard_writer import ShardWriter, check_sizes, list_schema
from datamount.storage import Store
from datamount.storage.checksums import require_unchanged

#: Threads reading files; each task reads a chunk of a row group's files (a task per file would cost more than
#: reading a small one).
READERS = 8
CHUNK_FILES = 32


def commit_packed(
    store: Store,
    draft: Manifest,
    parsed: ParsedList,
    *,
    shard_bytes: int,
    row_group_bytes: int,
    progress: Progress,
) -> Manifest:
    """Write the rows of the image list ``parsed`` into shards of a pack folder of their own, then commit ``draft``
    with them and the files' entries (``objects`` false); return the committed manifest.

    Each file is read once: its sha256 is computed from the very bytes that go into the shard. Rows are cut into
    row groups and shards as ``pack`` cuts a version (:func:`~datamount.datasets.pack.cut_shards`); the next row
    group's files are read while one is encoded and sent. A file named by two rows that has other bytes the second
    time (it changed meanwhile) is an :class:`~datamount.storage.IntegrityError`. If anything fails, the commit
    included, the shards written are removed.
    """
    name = draft.name
    check_sizes(shard_bytes, row_group_bytes)
    rows = [(os.path.normpath(row[0]), *row[1:]) for row in parsed.rows]
    sizes = [parsed.files[row[0]].size + sum(len(value) for value in row[1:]) for row in rows]
    shards = cut_shards(sizes, shard_bytes, row_group_bytes)
    groups = [group for shard in shards for group in shard]
    shard_ends = {shard[-1][1] for shard in shards}
    writer = ShardWriter(
        store,
        name,
        list_schema(name, Kind.IMAGE, parsed.columns()),
        shard_bytes=1 << 62,  # the cut says where each shard ends
        row_group_bytes=row_group_bytes,
        progress=progress,
    )
    progress.start("pack", items=len(rows), size=sum(sizes))
    entries: dict[str, FileEntry] = {}

    def read(group: tuple[int, int]) -> list[Future[list[tuple[bytes, str]]]]:
        paths = [row[0] for row in rows[group[0] : group[1]]]
        return [
            pool.submit(_read_hashed, [parsed.files[path].local_path for path in paths[at : at + CHUNK_FILES]])
            for at in range(0, len(paths), CHUNK_FILES)
        ]

    ahead: list[Future[list[tuple[bytes, str]]]] = []
    with ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="datamount-read") as pool:
        try:
            ahead = read(groups[0]) if groups else []
            for position, (start, stop) in enumerate(groups):
                current, ahead = ahead, read(groups[position + 1]) if position + 1 < len(groups) else []
                read_back = [item for future in current for item in future.result()]
                group_rows = rows[start:stop]
                for row, (data, sha256) in zip(group_rows, read_back, strict=True):
                    _record(entries, FileEntry(row[0], len(data), sha256), parsed.files[row[0]].local_path)
                labels = [list(column) for column in zip(*(row[1:] for row in group_rows), strict=True)]
                writer.add_group([[data for data, _ in read_back], *labels, [row[0] for row in group_rows]])
                if stop in shard_ends:
                    writer.end_shard()
            files = sorted(entries.values(), key=lambda entry: entry.path)
            packed = dataclasses.replace(draft, files=files, shards=writer.close(), objects=False)
            progress.finish()
            return catalog.commit(store, packed)
        except BaseException:  # never committed: the shards would only take space
            for future in ahead:
                future.cancel()
            writer.abort()
            raise


def _read_hashed(paths: list[str]) -> list[tuple[bytes, str]]:
    found = []
    for path in paths:
        with open(path, "rb", buffering=0) as source:
            data = source.readall()
        found.append((data, hashlib.sha256(data).hexdigest()))
    return found


def _record(entries: dict[str, FileEntry], entry: FileEntry, local: str) -> None:
    """Keep ``entry``; a file already read with other bytes changed in between."""
    known = entries.setdefault(entry.path, entry)
    if known.sha256 != entry.sha256:
        require_unchanged(local, entry.sha256, known.sha256)
