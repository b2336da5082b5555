"""The xxh3-64 checks of a packed shard: one per row group, over the bytes of its column chunks, and one over its
footer (the footer, its length and the closing magic).

:func:`shard_checks` computes them once a shard is written; its manifest entry records them
(:attr:`~datamount.datasets.manifest.ShardEntry.xxh3`), and a reader checks a row group's bytes (and the footer's,
before it trusts its offsets) against them before it decodes them, with page checksums then off: one pass of xxh3
over the bytes (about 10 GB/s) rather than Arrow's CRC-32 of every page (about 2 GB/s). A shard whose entry has
none (packed before they were recorded) is checked by its pages' CRCs as Arrow decodes it.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

#: A Parquet file ends with its footer's length (4 bytes, little-endian) and the magic ``PAR1``.
_TAIL = 8


def group_range(footer: pq.FileMetaData, group: int) -> tuple[int, int]:
    """The byte range of row group ``group``'s column chunks."""
    meta = footer.row_group(group)
    starts, ends = [], []
    for column in range(meta.num_columns):
        chunk = meta.column(column)
        first = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        starts.append(first)
        ends.append(first + chunk.total_compressed_size)
    return min(starts), max(ends)


def chunk_ranges(footer: pq.FileMetaData, group: int, columns: Sequence[str]) -> list[tuple[int, int]]:
    """The byte ranges of the column chunks of row group ``group`` that hold ``columns`` (top-level names; a
    nested column's chunks are its leaves', whose paths continue its name with a dot, as pyarrow finds them), in file
    order, chunks that touch joined into one range."""
    meta = footer.row_group(group)
    ranges: list[tuple[int, int]] = []
    for column in range(meta.num_columns):
        chunk = meta.column(column)
        path = chunk.path_in_schema
        if not any(path == name or path.startswith(f"{name}.") for name in columns):
            continue
        first = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        ranges.append((first, first + chunk.total_compressed_size))
    joined: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if joined and start <= joined[-1][1]:
            joined[-1] = (joined[-1][0], max(end, joined[-1][1]))
        else:
            joined.append((start, end))
    return joined


def footer_start(size: int, tail: bytes | memoryview) -> int:
    """Where the footer of a Parquet file of ``size`` bytes starts, from its last eight bytes ``tail``."""
    return size - _TAIL - int.from_bytes(bytes(tail[-_TAIL:-4]), "little")


def digest(data: Any) -> str:
    """The xxh3-64 of ``data`` (any buffer), as 16 hex digits."""
    return xxhash.xxh3_64_hexdigest(data)


def shard_checks(path: str | os.PathLike[str]) -> list[str]:
    """The xxh3-64 of each row group of the Parquet file at ``path``, then of its footer."""
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        view = memoryview(mapped)
        try:
            footer = pq.read_metadata(pa.py_buffer(view))
            checks = [digest(view[slice(*group_range(footer, group))]) for group in range(footer.num_row_groups)]
            checks.append(digest(view[footer_start(len(view), view) :]))
        finally:
            view.release()
    return checks


def file_bytes(source: pa.NativeFile) -> pa.Buffer:
    """All the bytes of an open shard, without a copy (a memory map or a buffer): read once, by one thread (it moves
    the file's position, which Parquet's positional reads do not use)."""
    source.seek(0)
    return source.read_buffer()


def group_bytes(data: pa.Buffer, footer: pq.FileMetaData, group: int) -> pa.Buffer:
    """The bytes of row group ``group`` in a whole shard's bytes ``data``."""
    start, end = group_range(footer, group)
    return data.slice(start, max(0, min(end, data.size) - start))


def footer_bytes(data: pa.Buffer) -> pa.Buffer:
    """The footer of a whole shard's bytes ``data``, with its length and magic (what :func:`shard_checks` hashes
    last); all of ``data`` when its length is not a length (then no checksum matches)."""
    start = footer_start(data.size, memoryview(data)[-_TAIL:]) if data.size >= _TAIL else 0
    return data.slice(start) if start >= 0 else data
