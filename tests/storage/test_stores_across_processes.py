"""Stores survive fork and spawn: a store opened (and used) in this process works in its worker processes."""

from __future__ import annotations

import multiprocessing
from typing import Any

import fsspec
import pytest

from datamount.storage import Store, StoreIOError


def read_in_child(store: Store, path: str, answers: Any) -> None:
    try:
        answers.put(("read", store.read(path), sorted(store.list("shared"))))
    except Exception as exc:
        answers.put(("raised", type(exc).__name__, str(exc)))


def in_a_worker(store: Store, method: str, path: str) -> tuple[Any, ...]:
    context = multiprocessing.get_context(method)
    answers = context.Queue()
    worker = context.Process(target=read_in_child, args=(store, path, answers))
    worker.start()
    try:
        return answers.get(timeout=120)
    finally:
        worker.join(timeout=30)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_store_used_here_works_in_forked_and_spawned_workers(store: Store, method: str) -> None:
    if not store.shareable and method == "spawn":
        pytest.skip(f"{store.url} lives in this process's memory: a spawned process has its own")
    store.write("shared/a.bin", b"payload")
    assert store.read("shared/a.bin") == b"payload"  # the parent's client is in use before the worker starts
    answer = in_a_worker(store, method, "shared/a.bin")
    if store.protocol == "hdfs" and method == "fork":
        assert answer[0] == "raised" and answer[1] == StoreIOError.__name__ and "'spawn'" in answer[2]
        return
    assert answer == ("read", b"payload", ["shared/a.bin"])
    assert store.read("shared/a.bin") == b"payload"  # and the parent's client still works


@pytest.mark.timeout(25)  # a hang guard: a request on a connection the child broke waits out the 30 s read timeout
def test_a_forked_worker_leaves_the_parents_connections_alone(store: Store) -> None:
    if store.protocol == "hdfs":
        pytest.skip("an HDFS store refuses to work in a forked child")
    paths = [f"shared/{index}.bin" for index in range(16)]
    for path in paths:
        store.write(path, path.encode())
    assert list(store.read_many(paths)) == [path.encode() for path in paths]  # the parent's pool is full
    for _ in range(3):
        assert in_a_worker(store, "fork", paths[0])[0] == "read"
        assert list(store.read_many(paths)) == [path.encode() for path in paths]


@pytest.mark.hdfs
@pytest.mark.timeout(60)  # a hang guard: a child that drops an inherited hdfs-native client never starts its work
def test_a_forked_child_never_drops_a_client_its_parent_cached(hdfs_server: Any, local_store: Store) -> None:
    fsspec.core.url_to_fs(hdfs_server.url)[0].ls("/")  # only fsspec's instance cache keeps this client
    local_store.write("shared/a.bin", b"payload")
    # fsspec empties its cache in a forked child: the client would be dropped there, and hdfs-native hangs then.
    assert in_a_worker(local_store, "fork", "shared/a.bin") == ("read", b"payload", ["shared/a.bin"])
