"""HDFS specifics on a real HDFS 2.7.3: worker processes, forked or spawned, with a store their parent opened."""

from __future__ import annotations

import multiprocessing
import pickle

import pytest

from datamount.storage import Store, StoreIOError

pytestmark = pytest.mark.hdfs


def _read_in_child(store: Store, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    try:
        queue.put(store.read("inherited"))
    except StoreIOError as exc:
        queue.put(str(exc))


def test_a_forked_child_is_told_to_spawn_instead_of_hanging(hdfs_store: Store) -> None:
    hdfs_store.write("inherited", b"from the parent")
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_read_in_child, args=(hdfs_store, queue))
    child.start()
    message = queue.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0
    assert "forked" in message and "'spawn'" in message and hdfs_store.url in message
    assert hdfs_store.read("inherited") == b"from the parent"


def test_a_spawned_child_reads_through_a_store_its_parent_opened(hdfs_store: Store) -> None:
    hdfs_store.write("inherited", b"from the parent")
    assert pickle.loads(pickle.dumps(hdfs_store)).read("inherited") == b"from the parent"
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_read_in_child, args=(hdfs_store, queue))
    child.start()
    assert queue.get(timeout=60) == b"from the parent"
    child.join(timeout=60)
    assert child.exitcode == 0
