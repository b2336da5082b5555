"""DataLoader(use_multiprocess=True): real worker processes, real shared memory, real failures."""

from __future__ import annotations

import functools
import gc
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from datamount.readers import DataLoader, NotPicklableError, WorkerDiedError

SHM = Path("/dev/shm")
PREFIX = f"datamount-{os.getpid()}-"  # segments are named after the process that creates them

pytestmark = pytest.mark.skipif(not SHM.is_dir(), reason="needs POSIX shared memory in /dev/shm (Linux)")


def _our_segments() -> set[str]:
    return {path.name for path in SHM.iterdir() if path.name.startswith(PREFIX)}


def _process_gone(pid: int) -> bool:
    """True once ``pid`` has exited and been reaped (a zombie still has its /proc entry)."""
    return not Path(f"/proc/{pid}").exists()


@pytest.fixture(autouse=True)
def nothing_left_behind() -> Iterator[None]:
    """Every test must end with no segment of ours in /dev/shm, no worker process and no prefetch thread."""
    before = _our_segments()
    yield
    gc.collect()
    assert _our_segments() - before == set()
    assert multiprocessing.active_children() == []
    assert [thread for thread in threading.enumerate() if thread.name.startswith("datamount-dataloader")] == []


# --------------------------------------------------------------------------------------- module-level readers
# Module-level so that spawn workers can unpickle them.


def numbered_samples(count: int) -> Iterator[tuple[np.ndarray, int, bytes, str]]:
    for index in range(count):
        yield np.full((2, 3), index, dtype=np.float32), index, b"\x00raw%d\x00" % index, f"label {index}"


def numbered_sample_lists() -> Iterator[list[tuple[np.ndarray, int, bytes, str]]]:
    samples = list(numbered_samples(10))
    for start in range(0, 10, 4):
        yield samples[start : start + 4]


def pid_batches() -> Iterator[tuple[list[int]]]:
    while True:
        yield ([os.getpid()],)


def failing_in_worker() -> Iterator[tuple[int]]:
    yield (1,)
    raise LookupError("row 3 of train.list is missing")


def exiting_worker(exit: Any, code: int) -> Iterator[tuple[list[int]]]:
    yield ([os.getpid()],)
    exit(code)


class GeneratorHolder:
    """A reader object that carries a generator object, which cannot be pickled."""

    def __init__(self) -> None:
        self.pending = (index for index in range(3))

    def __call__(self) -> Iterator[tuple[int]]:
        yield from ((index,) for index in self.pending)


#: A spawned worker imports numpy, pyarrow and datamount afresh: an epoch takes 3 s or more.
SPAWN = pytest.param("spawn", marks=pytest.mark.slow)


def _mp_loader(capacity: int = 2, **options: Any) -> DataLoader:
    options.setdefault("mp_context", "fork")
    return DataLoader.from_generator(capacity=capacity, use_multiprocess=True, **options)


# ------------------------------------------------------------------------------------------------- data path


SOURCES = [
    pytest.param(
        lambda loader: loader.set_sample_generator(
            functools.partial(numbered_samples, 10), batch_size=4, drop_last=False
        ),
        id="sample",
    ),
    pytest.param(lambda loader: loader.set_sample_list_generator(numbered_sample_lists), id="sample-list"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("set_source", SOURCES)
def test_worker_batches_equal_thread_batches(set_source: Any) -> None:
    in_thread = list(set_source(DataLoader.from_generator(capacity=2)))
    in_worker = list(set_source(_mp_loader()))
    assert len(in_worker) == len(in_thread) == 3
    for got, expected in zip(in_worker, in_thread, strict=True):
        images, labels, raw, text = got
        assert images.dtype == np.float32 and labels.dtype == np.int64
        np.testing.assert_array_equal(images, expected[0])
        np.testing.assert_array_equal(labels, expected[1])
        assert raw == expected[2] and type(raw) is list and raw[0].endswith(b"\x00")
        assert text == expected[3]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", ["fork", SPAWN])
def test_both_start_methods_run_epochs_and_reepochs(method: str) -> None:
    loader = _mp_loader(mp_context=method).set_sample_generator(functools.partial(numbered_samples, 6), batch_size=3)
    epochs = [[labels.tolist() for _, labels, _, _ in loader()] for _ in range(2)]
    assert epochs == [[[0, 1, 2], [3, 4, 5]]] * 2


@pytest.mark.timeout(60)
def test_batch_generator_arrays_arrive_as_owned_copies() -> None:
    transposed = np.arange(24, dtype=">i4").reshape(4, 6).T  # not C-contiguous, big-endian
    loader = _mp_loader().set_batch_generator(lambda: iter([(transposed, ["a", None])]))
    [(array, mixed)] = list(loader)
    assert array.dtype == np.dtype(">i4") and array.flags.c_contiguous and array.flags.owndata
    np.testing.assert_array_equal(array, transposed)
    assert mixed == ["a", None]


@st.composite
def batch_columns(draw: st.DrawFn) -> list[Any]:
    dtypes = (
        hnp.scalar_dtypes()
        | hnp.byte_string_dtypes(max_len=4)
        | hnp.unicode_string_dtypes(max_len=4)
        | hnp.array_dtypes(max_size=3)
    )
    dtype = draw(dtypes | dtypes.map(lambda d: d.newbyteorder()))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5))
    columns: list[Any] = [draw(hnp.arrays(dtype, shape))]
    columns.append(draw(st.lists(st.binary(max_size=20), max_size=5)))
    columns.append(draw(st.lists(st.text(max_size=5), max_size=3)))
    return columns


@pytest.mark.slow
@pytest.mark.timeout(120)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(columns=batch_columns())
def test_any_array_round_trips_byte_exact_through_shared_memory(columns: list[Any]) -> None:
    loader = _mp_loader(capacity=1).set_batch_generator(lambda: iter([columns, columns]))
    for array, raw, text in loader:
        assert array.dtype == columns[0].dtype
        assert array.shape == columns[0].shape
        assert array.tobytes() == columns[0].tobytes()
        assert raw == columns[1]
        assert text == columns[2]


@pytest.mark.timeout(60)
def test_segments_are_a_ring_of_capacity_reused_across_batches() -> None:
    def batches() -> Iterator[tuple[np.ndarray]]:
        for index in range(12):
            yield (np.full(100_000, index, dtype=np.int64),)

    seen: set[str] = set()
    before = _our_segments()
    for (column,) in _mp_loader(capacity=3).set_batch_generator(batches):
        assert column[0] == column[-1]
        seen |= _our_segments() - before
    assert len(seen) == 3


@pytest.mark.timeout(60)
def test_growing_batches_get_larger_segments() -> None:
    sizes = [10, 5_000, 200_000, 50, 1_000_000, 3]

    def batches() -> Iterator[tuple[np.ndarray]]:
        for size in sizes:
            yield (np.arange(size, dtype=np.float64),)

    got = [column for (column,) in _mp_loader(capacity=2).set_batch_generator(batches)]
    assert [len(column) for column in got] == sizes
    for column in got:
        np.testing.assert_array_equal(column, np.arange(len(column), dtype=np.float64))


def paddle_guide_creators() -> dict[str, Any]:
    """The three reader creators of Paddle's DataLoader guide, closures included, with BATCH_SIZE=16."""
    batch_num, batch_size = 10, 16

    def images_and_labels(image_shape: list[int], label_shape: list[int]) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(0)
        return rng.random(image_shape).astype("float32"), rng.integers(0, 10, label_shape).astype("int64")

    def sample_generator_creator() -> Any:
        def __reader__() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for _ in range(batch_num * batch_size):
                yield images_and_labels([784], [1])

        return __reader__

    def sample_list_generator_creator() -> Any:
        def __reader__() -> Iterator[list[list[np.ndarray]]]:
            for _ in range(batch_num):
                yield [list(images_and_labels([784], [1])) for _ in range(batch_size)]

        return __reader__

    def batch_generator_creator() -> Any:
        def __reader__() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for _ in range(batch_num):
                yield images_and_labels([batch_size, 784], [batch_size, 1])

        return __reader__

    return {
        "sample": lambda loader: loader.set_sample_generator(sample_generator_creator(), batch_size=16),
        "sample-list": lambda loader: loader.set_sample_list_generator(sample_list_generator_creator()),
        "batch": lambda loader: loader.set_batch_generator(batch_generator_creator()),
    }


@pytest.mark.timeout(60)
@pytest.mark.parametrize("source", ["sample", "sample-list", "batch"])
@pytest.mark.parametrize("use_multiprocess", [False, True], ids=["thread", "fork-worker"])
def test_paddle_guide_example_runs_unchanged(source: str, use_multiprocess: bool) -> None:
    options = {"mp_context": "fork"} if use_multiprocess else {}
    train_loader = DataLoader.from_generator(capacity=10, use_multiprocess=use_multiprocess, **options)
    paddle_guide_creators()[source](train_loader)
    batches = 0
    for data in train_loader():
        image, label = data
        assert image.shape == (16, 784) and image.dtype == np.float32
        assert label.shape == (16, 1) and label.dtype == np.int64
        batches += 1
    assert batches == 10


# ------------------------------------------------------------------------------------------------- failures


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_worker_error_is_raised_with_its_type_and_worker_traceback(method: str) -> None:
    loader = _mp_loader(mp_context=method).set_sample_generator(failing_in_worker, batch_size=1)
    iterator = iter(loader)
    assert next(iterator)[0].tolist() == [1]
    with pytest.raises(LookupError, match=r"row 3 of train\.list is missing") as caught:
        next(iterator)
    cause = "".join(traceback.format_exception(caught.value))
    assert "DataLoader worker process (pid" in cause
    assert "in failing_in_worker" in cause
    assert next(iterator, None) is None


@pytest.mark.timeout(30)
def test_sigkilled_worker_is_reported_within_seconds() -> None:
    capacity = 2
    iterator = iter(_mp_loader(capacity).set_batch_generator(pid_batches))
    (pids,) = next(iterator)
    pid = int(pids[0])
    os.kill(pid, signal.SIGKILL)
    after_the_kill = 0
    with pytest.raises(WorkerDiedError, match=rf"pid {pid}\) was killed by signal SIGKILL"):
        for _ in range(100):
            next(iterator)
            after_the_kill += 1
    # Only the batches already in shared memory come first; the next wait sees the death (the test's timeout
    # guards against a hang).
    assert after_the_kill <= capacity
    assert _process_gone(pid)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("exit", [os._exit, sys.exit], ids=["os._exit", "sys.exit"])
def test_worker_exit_code_is_reported(exit: Any) -> None:
    iterator = iter(_mp_loader().set_batch_generator(functools.partial(exiting_worker, exit, 3)))
    next(iterator)
    with pytest.raises(WorkerDiedError, match="exited with code 3 before the end of the epoch"):
        next(iterator)


@pytest.mark.timeout(30)
def test_break_releases_segments_and_joins_the_worker() -> None:
    loader = _mp_loader(capacity=4).set_batch_generator(pid_batches)
    pids: list[int] = []
    for (batch_pids,) in loader:
        pids.extend(batch_pids)
        assert len(_our_segments()) >= 4
        break
    assert _process_gone(pids[0])
    assert _our_segments() == set()


@pytest.mark.timeout(30)
def test_error_in_the_loop_body_releases_everything() -> None:
    loader = _mp_loader().set_batch_generator(pid_batches)
    pids: list[int] = []
    with pytest.raises(ZeroDivisionError):
        for (batch_pids,) in loader:
            pids.extend(batch_pids)
            1 / 0  # noqa: B018
    assert _process_gone(pids[0])


@pytest.mark.timeout(30)
def test_close_and_garbage_collection_release_everything() -> None:
    with _mp_loader().set_batch_generator(pid_batches) as loader:
        (first,) = next(iter(loader))
    assert _process_gone(int(first[0]))

    def start_and_drop() -> int:
        loader = _mp_loader().set_batch_generator(pid_batches)
        iterator = iter(loader)
        (pids,) = next(iterator)
        return int(pids[0])

    pid = start_and_drop()
    gc.collect()
    assert _process_gone(pid)


@pytest.mark.parametrize(
    "reader",
    [
        pytest.param(lambda: iter([(1,)]), id="lambda"),
        pytest.param(functools.partial(lambda count: iter([(count,)]), 1), id="partial-of-lambda"),
        pytest.param(GeneratorHolder(), id="holds-a-generator"),
    ],
)
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_unpicklable_reader_is_refused_when_set(reader: Any, method: str) -> None:
    loader = _mp_loader(mp_context=method)
    with pytest.raises(NotPicklableError, match=rf"'{method}' method, and it cannot be.*module-level"):
        loader.set_sample_generator(reader, batch_size=1)


@pytest.mark.timeout(30)
def test_fork_takes_closures() -> None:
    rows = [(1,), (2,)]
    loader = _mp_loader(mp_context="fork").set_sample_generator(lambda: iter(rows), batch_size=2)
    [[labels]] = list(loader)
    assert labels.tolist() == [1, 2]


# ------------------------------------------------------------------------------------------ small /dev/shm

SMALL_SHM_SCRIPT = textwrap.dedent(
    """
    import json, warnings
    import numpy as np
    from datamount.readers import DataLoader, SharedMemoryError

    def batches(sizes):
        return lambda: ((np.ones(size, dtype=np.uint8),) for size in sizes)

    def run(capacity, sizes, **options):
        options.update(capacity=capacity, use_multiprocess=True, mp_context="fork")
        loader = DataLoader.from_generator(**options).set_batch_generator(batches(sizes))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                got = [len(column) for (column,) in loader]
            except SharedMemoryError as exc:
                return {"error": str(exc)}
        return {"sizes": got, "warnings": [str(w.message) for w in caught]}

    print(json.dumps({
        "too_small": run(4, [512 * 1024] * 3),
        "fallback": run(4, [512 * 1024] * 3, fallback_to_thread=True),
        "fits": run(2, [300 * 1024] * 5),
        "grows_beyond": run(2, [100 * 1024, 1000 * 1024]),
    }))
    """
)


@pytest.fixture(scope="module")
def small_shm_namespace() -> list[str]:
    """A command prefix running a program with its own 1 MiB tmpfs on /dev/shm (needs root and unshare)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare(1) to give a process its own small /dev/shm")
    prefix = [
        unshare,
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        'mount -t tmpfs -o size=1m tmpfs /dev/shm && exec "$@"',
        "sh",
    ]
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private tmpfs on /dev/shm here: {probe.stderr.strip()}")
    return prefix


@pytest.mark.timeout(120)
def test_too_small_dev_shm_is_detected_before_transfer(small_shm_namespace: list[str]) -> None:
    result = subprocess.run(
        [*small_shm_namespace, sys.executable, "-c", SMALL_SHM_SCRIPT],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    message = outcome["too_small"]["error"]
    for part in ("capacity=4", "batches of 0.5 MiB", "2.0 MiB in all", "/dev/shm has only", "--shm-size"):
        assert part in message
    assert "fallback_to_thread=True" in message
    assert outcome["fallback"]["sizes"] == [512 * 1024] * 3
    assert "Prefetching this epoch in a thread instead" in outcome["fallback"]["warnings"][0]
    assert outcome["fits"] == {"sizes": [300 * 1024] * 5, "warnings": []}
    assert "more shared memory for a batch of 1.0 MiB" in outcome["grows_beyond"]["error"]
    assert "resource_tracker" not in result.stderr


@pytest.mark.timeout(60)
def test_shuffle_epoch_set_in_the_parent_reaches_each_worker() -> None:
    decorators = pytest.importorskip("datamount.readers.decorators")
    shuffled = decorators.shuffle(lambda: ((index,) for index in range(64)), 16, seed=7)
    loader = _mp_loader().set_sample_generator(shuffled, batch_size=64)
    orders = []
    for epoch in (0, 1, 0):
        shuffled.epoch = epoch
        [[labels]] = list(loader)
        orders.append(labels.tolist())
    assert sorted(orders[0]) == list(range(64))
    assert orders[0] != orders[1]
    assert orders[0] == orders[2]


def _numbered() -> Iterator[tuple[int]]:
    return ((index,) for index in range(64))


@pytest.mark.timeout(90)
@pytest.mark.parametrize("method", ["fork", SPAWN])
def test_each_worker_epoch_continues_the_shuffle_like_the_thread_mode(method: str) -> None:
    decorators = pytest.importorskip("datamount.readers.decorators")
    orders = {}
    for use_multiprocess in (False, True):
        shuffled = decorators.shuffle(_numbered, 16, seed=11)
        options = {"mp_context": method} if use_multiprocess else {}
        loader = DataLoader.from_generator(capacity=2, use_multiprocess=use_multiprocess, **options)
        loader.set_sample_generator(shuffled, batch_size=64)
        orders[use_multiprocess] = [next(iter(loader))[0].tolist() for _ in range(3)]
        loader.close()
        assert shuffled.epoch == 3
    assert orders[True] == orders[False]
    assert len({tuple(order) for order in orders[True]}) == 3
