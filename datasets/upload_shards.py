"""``upload --pack`` of an image list: the files go straight from the local disk into Parquet shards, a handful of
writes in all instead of one object per file (and no second pass that reads every object back to pack it)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from datamount.datasets.listfile import ParsedList
from datamount.datasets.manifest import FileEntry, Kind, ShardEntry
from datamount.datasets.pack import cut_shards
from datamount.datasets.progress import Progress
from datamount.datasets.shard_writer import ShardWriter, check_sizes, list_schema
from datamount.storage import Store
from datamount.storage.checksums import read_checked

#: Files read at once (the reads of the next row group run while this one is encoded and sent).
READERS = 8


def write_shards(
    store: Store,
    name: str,
    parsed: ParsedList,
    entries: Sequence[FileEntry],
    *,
    shard_bytes: int,
    row_group_bytes: int,
    progress: Progress,
) -> list[ShardEntry]:
    """Write the rows of the image list ``parsed`` into shards of a pack folder of their own; return the shards.

    Each file's bytes are taken in one read and checked there against the sha256 in ``entries`` (from the hash
    phase): a file that changed since is an :class:`~datamount.storage.IntegrityError` naming it. Rows are cut into
    row groups and shards as ``pack`` cuts a version (:func:`~datamount.datasets.pack.cut_shards`); the next row
    group's files are read while one is encoded and sent. If anything fails, the shards written are removed.
    """
    check_sizes(shard_bytes, row_group_bytes)
    by_path = {entry.path: entry for entry in entries}
    rows = [(os.path.normpath(row[0]), *row[1:]) for row in parsed.rows]
    files = [by_path[row[0]] for row in rows]
    sizes = [entry.size + sum(len(value) for value in row[1:]) for row, entry in zip(rows, files, strict=True)]
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

    def read(group: tuple[int, int]) -> list[Future[bytes]]:
        return [
            pool.submit(read_checked, parsed.files[row[0]].local_path, entry.sha256)
            for row, entry in zip(rows[group[0] : group[1]], files[group[0] : group[1]], strict=True)
        ]

    ahead: list[Future[bytes]] = []
    with ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="datamount-read") as pool:
        try:
            ahead = read(groups[0]) if groups else []
            for position, (start, stop) in enumerate(groups):
                current, ahead = ahead, read(groups[position + 1]) if position + 1 < len(groups) else []
                data = [future.result() for future in current]
                labels = [list(column) for column in zip(*(row[1:] for row in rows[start:stop]), strict=True)]
                writer.add_group([data, *labels, [row[0] for row in rows[start:stop]]])
                if stop in shard_ends:
                    writer.end_shard()
            written = writer.close()
        except BaseException:
            for future in ahead:
                future.cancel()
            writer.abort()
            raise
    progress.finish()
    return written
