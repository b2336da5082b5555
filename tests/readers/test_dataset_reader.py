"""``reader(name)``: tuples in list order, from any store, the version fixed, picklable."""

from __future__ import annotations

import multiprocessing
import pickle
import threading
from pathlib import Path

import pytest

from datamount.datasets.upload import upload
from datamount.readers.dataset import reader
from datamount.storage import Store
from tests.generated import MakeImageList


def test_each_call_is_a_fresh_pass(store: Store, make_image_list: MakeImageList) -> None:
    upload(make_image_list(20), "d", store=store)
    samples = reader("d", store)
    first, second = list(samples()), list(samples())
    assert first == second and len(first) == len(samples) == 20
    assert all(isinstance(b, bytes) and b.startswith(b"\xff\xd8\xff") for b, _ in first)


def test_a_pass_abandoned_early_stops_its_reads(local_store: Store, make_image_list: MakeImageList) -> None:
    upload(make_image_list(200), "d", store=local_store)
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
