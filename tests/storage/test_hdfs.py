"""HDFS specifics on a real HDFS 2.7.3: a forked process keeps working with a store its parent opened."""

from __future__ import annotations

import multiprocessing

import pytest

from datamount.storage import Store, open_store

pytestmark = pytest.mark.hdfs


def _read_in_child(store: Store, url: str, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    queue.put((store.read("inherited"), open_store(url).read("inherited")))


def test_a_forked_child_reads_through_a_store_its_parent_opened(hdfs_store: Store) -> None:
    hdfs_store.write("inherited", b"from the parent")
    assert hdfs_store.read("inherited") == b"from the parent"
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_read_in_child, args=(hdfs_store, hdfs_store.url, queue))
    child.start()
    assert queue.get(timeout=60) == (b"from the parent", b"from the parent")
    child.join(timeout=60)
    assert child.exitcode == 0
    assert hdfs_store.read("inherited") == b"from the parent"
