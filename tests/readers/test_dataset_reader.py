"""``reader(name)``: tuples in list order, from any store, the version fixed, picklable."""

from __future__ import annotations

import multiprocessing
import pickle
import threading
from pathlib import Path

import pytest

from datamount.datasets import catalog
from datamount.datasets.upload import upload
from datamount.readers.dataset import reader
from datamount.storage import Store
from tests.generated import MakeImageList, PackedImages, SharedDatasets

#: A pass over it keeps reading threads busy: several shards of several row groups, many objects.
FINALIZED = PackedImages("finalized", count=120, size=2_000, shard_bytes=60_000, row_group_bytes=12_000)


def test_each_call_is_a_fresh_pass(store: Store, make_image_list: MakeImageList) -> None:
    upload(make_image_list(20), "d", store=store)
    samples = reader("d", store)
    first, second = list(samples()), list(samples())
    assert first == second and len(first) == len(samples) == 20
    assert all(isinstance(b, bytes) and b.startswith(b"\xff\xd8\xff") for b, _ in first)


@pytest.mark.parametrize("packed", [False, True], ids=["unpacked", "packed"])
def test_a_pass_abandoned_early_stops_its_reads(
    local_store: Store, make_image_list: MakeImageList, packed: bool
) -> None:
    # Packed: several shards of several row groups, so that shards are opened and row groups decoded ahead when it is
    # closed.
    sizes = {"shard_bytes": 12_000, "row_group_bytes": 2_400} if packed else {}
    upload(make_image_list(200, size=300), "d", store=local_store, packed=packed, **sizes)
    if packed:
        shards = catalog.resolve(local_store, "d").shards
        assert len(shards) > 2 and len(shards[0].row_groups) > 2
    before = set(threading.enumerate())
    iterator = reader("d", local_store, max_requests=4)()
    next(iterator)
    iterator.close()
    assert [t for t in threading.enumerate() if t not in before and t.name.startswith("datamount")] == []


def test_the_default_store_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text_list: Path
) -> None:
    upload(text_list, "pairs", store=str(tmp_path / "cluster"))
    monkeypatch.setenv("DATAMOUNT_STORE", str(tmp_path / "cluster"))
    assert next(iter(reader("pairs")())) == ("bonjour", "hello")


def _count_in_child(samples: object, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    queue.put(sum(1 for _ in samples()))  # type: ignore[operator]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_reader_crosses_into_worker_processes(
    local_store: Store, make_image_list: MakeImageList, method: str
) -> None:
    upload(make_image_list(10), "d", store=local_store)
    samples = reader("d", local_store)
    assert list(pickle.loads(pickle.dumps(samples))()) == list(samples())
    context = multiprocessing.get_context(method)
    queue = context.Queue()
    child = context.Process(target=_count_in_child, args=(samples, queue))
    child.start()
    assert queue.get(timeout=60) == 10
    child.join(timeout=30)
    assert child.exitcode == 0


@pytest.mark.timeout(30)
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "unpacked"])
def test_a_pass_finalized_where_threads_cannot_be_joined_does_not_hang(
    local_shared_store: Store, shared_datasets: SharedDatasets, packed: bool
) -> None:
    """The garbage collector may finalize an abandoned pass in a thread that holds threading's shutdown lock (one
    starting up); joining the pass's threads there would deadlock the interpreter (Python 3.11 and 3.12)."""
    lock = getattr(threading, "_shutdown_locks_lock", None)
    if lock is None:
        pytest.skip("this Python's Thread.join takes no shutdown lock")
    dataset = shared_datasets.packed(local_shared_store, FINALIZED)
    iterator = reader(dataset.name, local_shared_store, use_shards=packed, max_requests=4)()
    next(iterator)
    closed = threading.Event()

    def close_holding_the_lock() -> None:
        with lock:
            iterator.close()
        closed.set()

    threading.Thread(target=close_holding_the_lock, daemon=True).start()
    assert closed.wait(10), "closing the pass joined threads under threading's shutdown lock: a deadlock"
