"""Asking whether a file is in the page cache, on this machine's kernel and disk."""

from __future__ import annotations

import os
import time
from pathlib import Path

from datamount.storage import page_cache


def written_and_evicted(path: Path, size: int) -> int:
    """``path`` written, synced and dropped from the page cache; an open descriptor of it."""
    path.write_bytes(os.urandom(size))
    descriptor = os.open(path, os.O_RDONLY)
    os.fsync(descriptor)
    os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
    return descriptor


def test_a_file_read_is_cached_and_one_dropped_is_not(tmp_path: Path) -> None:
    descriptor = written_and_evicted(tmp_path / "file", 20_000)
    try:
        assert not page_cache.first_page_cached(descriptor)
        os.pread(descriptor, 20_000, 0)
        assert page_cache.first_page_cached(descriptor)
    finally:
        os.close(descriptor)


def test_asking_reads_nothing(tmp_path: Path) -> None:
    """A file asked about stays out of the cache: a ``RWF_NOWAIT`` read that misses starts reading the file, so the
    next answer would depend on how fast the disk is."""
    descriptors = [written_and_evicted(tmp_path / f"file-{index}", 4_000) for index in range(50)]
    try:
        assert not any(page_cache.first_page_cached(descriptor) for descriptor in descriptors)
        time.sleep(0.3)
        assert not any(page_cache.first_page_cached(descriptor) for descriptor in descriptors)
    finally:
        for descriptor in descriptors:
            os.close(descriptor)


def test_a_file_in_the_cache_is_answered_so_by_either_way_of_asking(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x" * 10_000)
    descriptor = os.open(tmp_path / "file", os.O_RDONLY)
    try:
        os.pread(descriptor, 10_000, 0)
        assert page_cache.first_page_cached(descriptor)
        assert page_cache._read_would_not_wait(descriptor)
    finally:
        os.close(descriptor)
