"""The decorators that read in background threads or processes: buffered, xmap_readers, multiprocess_reader.

Besides Paddle's semantics, each test here checks what Paddle gets wrong: errors in a worker must reach the
consumer (not hang it), any sample value is data, and nothing keeps running once the consumer stops.
"""

from __future__ import annotations

import functools
import gc
import itertools
import multiprocessing
import operator
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from datamount.readers import (
    NotPicklableError,
    WorkerDiedError,
    batch,
    buffered,
    cache,
    chain,
    compose,
    firstn,
    map_readers,
    multiprocess_reader,
    shuffle,
    xmap_readers,
)
from datamount.readers.decorators import Reader
from datamount.readers.workers import RemoteTraceback

pytestmark = pytest.mark.timeout(30)

FALSY_SAMPLES = [0, "", (), None, b"", False, [], 0.0]
START_METHODS = ["fork", "spawn"]


class ReaderFailure(Exception):
    pass


def fail_after(count: int) -> Iterator[int]:
    yield from range(count)
    raise ReaderFailure(f"failed after {count} samples")


def slow_count(delay: float) -> Iterator[int]:
    for number in itertools.count():
        time.sleep(delay)
        yield number


class TrackedReader:
    """A reader that counts the samples read from it and whether its generator was closed."""

    def __init__(self, samples: range | list[object], delay: float = 0.0) -> None:
        self.samples, self.delay = samples, delay
        self.read = 0
        self.closed = threading.Event()

    def __call__(self) -> Iterator[object]:
        try:
            for sample in self.samples:
                time.sleep(self.delay)
                self.read += 1
                yield sample
        finally:
            self.closed.set()


def held_after(count: int, gate: threading.Event) -> Iterator[int]:
    """Yields ``0 .. count - 1`` at once, then the next numbers only once ``gate`` is set."""
    yield from range(count)
    gate.wait()
    yield from itertools.count(count)


def builtin_failing_reader() -> Reader[float]:
    """Yields 1/3, 1/2, 1/1, then raises ZeroDivisionError (builtins only: spawn workers load it fast)."""
    return map_readers(operator.truediv, functools.partial(itertools.repeat, 1), functools.partial(range, 3, -1, -1))


def builtin_endless_reader(delay: float = 0.01) -> Reader[None]:
    """Yields None every ``delay`` seconds, forever."""
    return map_readers(time.sleep, functools.partial(itertools.repeat, delay))


class Running:
    """What runs now that did not run when the test started: threads, and processes started by multiprocessing."""

    def __init__(self) -> None:
        self.threads_before = set(threading.enumerate())
        self.pids_before = {child.pid for child in multiprocessing.active_children()}

    def threads(self) -> list[threading.Thread]:
        return [thread for thread in threading.enumerate() if thread not in self.threads_before]

    def processes(self) -> list[multiprocessing.process.BaseProcess]:
        return [child for child in multiprocessing.active_children() if child.pid not in self.pids_before]


@pytest.fixture(autouse=True)
def running() -> Iterator[Running]:
    """Every test also checks, at its end, that it left no thread or process behind."""
    snapshot = Running()
    yield snapshot
    gc.collect()
    assert snapshot.threads() == []
    assert snapshot.processes() == []


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def assert_carried(excinfo: pytest.ExceptionInfo[BaseException], *fragments: str) -> None:
    cause = excinfo.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    for fragment in fragments:
        assert fragment in cause.text


# -------------------------------------------------------------------------------------------------- buffered


@pytest.mark.parametrize("size", [-1, 0, 1, 2, 5, 10, 20], ids=str)
def test_buffered_keeps_order(size: int) -> None:
    assert list(buffered(functools.partial(range, 10), size)()) == list(range(10))


def test_buffered_reads_ahead_up_to_size() -> None:
    upstream = TrackedReader(range(100))
    samples = buffered(upstream, 3)()
    assert next(samples) == 0
    assert wait_until(lambda: upstream.read >= 4)
    time.sleep(0.2)
    # 3 samples queued, plus the one the thread holds while it waits for room.
    assert upstream.read <= 5
    samples.close()


def test_buffered_with_size_zero_reads_everything_ahead() -> None:
    upstream = TrackedReader(range(100))
    samples = buffered(upstream, 0)()
    next(samples)
    assert wait_until(lambda: upstream.read == 100)
    assert list(samples) == list(range(1, 100))


def test_buffered_hides_upstream_latency() -> None:
    gate = threading.Event()
    upstream = TrackedReader(held_after(9, gate))  # type: ignore[arg-type]
    samples = buffered(upstream, 10)()
    assert next(samples) == 0
    assert wait_until(lambda: upstream.read == 9)  # read ahead while the consumer was not asking
    # The upstream yields nothing more until the gate opens: the next 8 samples are the ones read ahead.
    assert [next(samples) for _ in range(8)] == list(range(1, 9))
    gate.set()
    samples.close()


def test_buffered_passes_bare_numpy_samples() -> None:
    arrays = [np.arange(3), np.zeros(0), np.array(5), np.ones((2, 2))]
    output = list(buffered(lambda: arrays, 2)())
    assert len(output) == len(arrays)
    for got, expected in zip(output, arrays, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_buffered_takes_falsy_samples_for_data() -> None:
    assert list(buffered(lambda: FALSY_SAMPLES, 2)()) == FALSY_SAMPLES


def test_buffered_reraises_reader_errors_with_the_worker_traceback() -> None:
    seen = []
    with pytest.raises(ReaderFailure, match="failed after 3 samples") as excinfo:
        seen.extend(buffered(functools.partial(fail_after, 3), 2)())
    assert seen == [0, 1, 2]
    assert_carried(excinfo, "fail_after", "buffered() thread")


def test_buffered_joins_its_thread_and_closes_upstream_on_break(running: Running) -> None:
    upstream = TrackedReader(itertools.count(), delay=0.001)  # type: ignore[arg-type]
    for sample in buffered(upstream, 4)():
        assert running.threads()
        if sample == 3:
            break
    assert running.threads() == []
    assert upstream.closed.is_set()


def test_buffered_joins_its_thread_when_the_generator_is_collected(running: Running) -> None:
    samples = buffered(functools.partial(slow_count, 0.001), 4)()
    next(samples)
    del samples
    gc.collect()
    assert running.threads() == []


def test_buffered_starts_no_thread_before_the_first_sample_is_asked_for(running: Running) -> None:
    samples = buffered(functools.partial(range, 10), 4)()
    assert running.threads() == []
    del samples


def test_buffered_under_firstn_stops_its_thread(running: Running) -> None:
    assert list(firstn(buffered(functools.partial(slow_count, 0.001), 4), 5)()) == [0, 1, 2, 3, 4]
    assert running.threads() == []


# ---------------------------------------------------------------------------------------------- xmap_readers


@pytest.mark.parametrize("order", [True, False], ids=["ordered", "unordered"])
def test_xmap_maps_every_sample_for_any_thread_and_buffer_count(order: bool) -> None:
    for threads, size in itertools.product((1, 2, 4, 8), (1, 2, 4, 8)):
        reader = xmap_readers(operator.neg, functools.partial(range, 10), threads, size, order)
        for _ in range(2):
            result = list(reader())
            assert (result if order else sorted(result, reverse=True)) == [-i for i in range(10)]


class FirstFinishesLast:
    """A mapper of samples ``0 .. 7``: the first four meet at a barrier, which only four mappers running at once
    pass; then sample 0 waits until the seven others are mapped. ``finished`` lists the samples as mapped."""

    def __init__(self) -> None:
        self.four_at_once = threading.Barrier(4, timeout=10)
        self.others_mapped = threading.Event()
        self.finished: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, sample: int) -> int:
        if sample < 4:
            self.four_at_once.wait()  # BrokenBarrierError, raised in the consumer, unless four mappers run at once
        if sample == 0:
            self.others_mapped.wait(10)
        with self.lock:
            self.finished.append(sample)
            if len(self.finished) == 7:
                self.others_mapped.set()
        return sample


def test_xmap_runs_mappers_concurrently_and_order_restores_input_order() -> None:
    late_first = FirstFinishesLast()
    unordered = list(xmap_readers(late_first, functools.partial(range, 8), 4, 8)())
    assert late_first.finished[-1] == 0
    assert sorted(unordered) == list(range(8))
    assert unordered != list(range(8))
    late_first = FirstFinishesLast()
    assert list(xmap_readers(late_first, functools.partial(range, 8), 4, 8, order=True)()) == list(range(8))
    assert late_first.finished[-1] == 0


def test_xmap_in_order_waits_without_spinning(running: Running) -> None:
    release = threading.Event()

    def held_first(sample: int) -> int:
        if sample == 0:
            release.wait(10)
        return sample

    upstream = TrackedReader(range(40))
    samples = xmap_readers(held_first, upstream, 4, 4, order=True)()
    results: list[int] = []
    consumer = threading.Thread(target=results.extend, args=(samples,))
    consumer.start()
    assert wait_until(lambda: upstream.read >= 2 * 4 + 4)  # a full window: every thread now waits for sample 0
    # The CPU clocks of the consumer and of every thread xmap_readers started, over a stretch of that wait.
    clocks = [time.pthread_getcpuclockid(thread.ident) for thread in running.threads() if thread.ident]
    busy = -sum(map(time.clock_gettime, clocks))
    time.sleep(0.5)
    busy += sum(map(time.clock_gettime, clocks))
    assert results == []
    release.set()
    consumer.join(10)
    assert results == list(range(40))
    # A spinning wait (Paddle's ``while order != expected: pass``) keeps a thread on a CPU the whole 0.5 s.
    assert busy < 0.25


def test_xmap_in_order_bounds_the_samples_read_ahead_of_a_slow_one() -> None:
    release = threading.Event()

    def held_first(sample: int) -> int:
        if sample == 0:
            release.wait(5)
        return sample

    upstream = TrackedReader(range(100))
    samples = xmap_readers(held_first, upstream, 3, 2, order=True)()
    results: list[int] = []
    consumer = threading.Thread(target=results.extend, args=(samples,))
    consumer.start()
    window = 2 * 2 + 3
    assert wait_until(lambda: upstream.read >= window)
    time.sleep(0.3)
    assert upstream.read <= window + 1  # the window, plus one sample waiting for a free slot
    release.set()
    consumer.join()
    assert results == list(range(100))


def test_xmap_takes_falsy_samples_for_data() -> None:
    reader = xmap_readers(lambda sample: sample, lambda: FALSY_SAMPLES, 3, 2, order=True)
    assert list(reader()) == FALSY_SAMPLES


def test_xmap_reraises_mapper_errors() -> None:
    def explode(sample: int) -> int:
        if sample == 5:
            raise ReaderFailure(f"mapper failed on {sample}")
        return sample

    with pytest.raises(ReaderFailure, match="mapper failed on 5") as excinfo:
        list(xmap_readers(explode, functools.partial(range, 100), 4, 2)())
    assert_carried(excinfo, "explode", "xmap_readers() mapper thread")


def test_xmap_in_order_raises_a_mapper_error_after_the_samples_before_it() -> None:
    def explode_early(sample: int) -> int:
        if sample == 5:
            raise ReaderFailure("mapper failed on 5")
        time.sleep(0.05 if sample < 5 else 0)
        return sample

    seen = []
    with pytest.raises(ReaderFailure, match="mapper failed on 5"):
        seen.extend(xmap_readers(explode_early, functools.partial(range, 100), 4, 4, order=True)())
    assert seen == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("order", [True, False], ids=["ordered", "unordered"])
def test_xmap_reraises_reader_errors(order: bool) -> None:
    seen = []
    with pytest.raises(ReaderFailure, match="failed after 7 samples") as excinfo:
        seen.extend(xmap_readers(operator.neg, functools.partial(fail_after, 7), 2, 2, order)())
    if order:
        assert seen == [-i for i in range(7)]
    assert_carried(excinfo, "fail_after", "xmap_readers() reader thread")


@pytest.mark.parametrize("order", [True, False], ids=["ordered", "unordered"])
def test_xmap_joins_every_thread_on_break(order: bool, running: Running) -> None:
    upstream = TrackedReader(itertools.count(), delay=0.001)  # type: ignore[arg-type]
    for sample in xmap_readers(operator.neg, upstream, 4, 3, order)():
        if sample <= -3:
            break
    assert running.threads() == []
    assert upstream.closed.is_set()


@pytest.mark.parametrize(
    ("threads", "size", "error"), [(0, 1, ValueError), (1, 0, ValueError), (2, "4", TypeError)], ids=str
)
def test_xmap_rejects_bad_counts(threads: object, size: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="xmap_readers"):
        xmap_readers(operator.neg, functools.partial(range, 3), threads, size)


# --------------------------------------------------------------------------------------- multiprocess_reader

MODES = [(method, pipe) for method in START_METHODS for pipe in (True, False)]
MODE_IDS = [f"{method}-{'pipe' if pipe else 'queue'}" for method, pipe in MODES]
#: :data:`MODES` for the tests that take 3 to 4 s with spawned workers (each imports numpy and datamount afresh).
MODES_SLOW_SPAWN = [
    pytest.param(*mode, id=mode_id, marks=[pytest.mark.slow] if mode[0] == "spawn" else [])
    for mode, mode_id in zip(MODES, MODE_IDS, strict=True)
]


@pytest.mark.parametrize(("method", "use_pipe"), MODES_SLOW_SPAWN)
def test_multiprocess_samples_of_any_picklable_type_arrive_intact(method: str, use_pipe: bool) -> None:
    plain = [b"\x00\xff\n", b"", None, 0, "", (), (1, "a", b"b"), {"k": [1.5, None]}, "\u00e9\n\"'"]
    arrays: list[np.ndarray] = [
        np.arange(6, dtype=np.int16).reshape(2, 3),
        np.array([], dtype=np.float32),
        np.array(["x", "yz"]),
    ]
    reader = multiprocess_reader(
        [functools.partial(list, plain), functools.partial(list, arrays)], use_pipe, mp_context=method
    )
    output = list(reader())
    assert [sample for sample in output if not isinstance(sample, np.ndarray)] == plain
    got: list[np.ndarray] = [sample for sample in output if isinstance(sample, np.ndarray)]
    assert [(array.dtype, array.shape) for array in got] == [(array.dtype, array.shape) for array in arrays]
    for received, sent in zip(got, arrays, strict=True):
        np.testing.assert_array_equal(received, sent)


@pytest.mark.parametrize("use_pipe", [True, False], ids=["pipe", "queue"])
def test_multiprocess_merges_all_readers(use_pipe: bool) -> None:
    readers = [functools.partial(range, start, 3000, 3) for start in range(3)]
    assert sorted(multiprocess_reader(readers, use_pipe, 100)()) == list(range(3000))


@pytest.mark.parametrize(("method", "use_pipe"), MODES, ids=MODE_IDS)
def test_multiprocess_reraises_worker_errors_with_their_traceback(method: str, use_pipe: bool) -> None:
    reader = multiprocess_reader([builtin_failing_reader()], use_pipe, mp_context=method)
    seen = []
    with pytest.raises(ZeroDivisionError) as excinfo:
        seen.extend(reader())
    assert seen == [1 / 3, 1 / 2, 1.0]
    assert_carried(excinfo, "ZeroDivisionError", "multiprocess_reader() worker 0")


@pytest.mark.parametrize(("method", "use_pipe"), MODES_SLOW_SPAWN)
def test_multiprocess_reports_a_killed_worker_within_seconds(method: str, use_pipe: bool, running: Running) -> None:
    reader = multiprocess_reader([builtin_endless_reader(), builtin_endless_reader()], use_pipe, mp_context=method)
    samples = reader()
    assert [next(samples) for _ in range(5)] == [None] * 5
    victim = running.processes()[0]
    os.kill(victim.pid, signal.SIGKILL)  # type: ignore[arg-type]
    after_the_kill = 0
    with pytest.raises(WorkerDiedError, match=rf"pid {victim.pid}\) was killed by signal SIGKILL"):
        for _ in samples:
            after_the_kill += 1
    # The other worker keeps sending, one sample per 0.01 s of its sleep at most: the death is reported before that
    # worker has slept 3 s, whatever the machine's speed.
    assert after_the_kill < 3.0 / 0.01


@pytest.mark.parametrize("use_pipe", [True, False], ids=["pipe", "queue"])
def test_multiprocess_reports_a_worker_that_exits_early(use_pipe: bool) -> None:
    reader = multiprocess_reader([map_readers(os._exit, functools.partial(list, [3]))], use_pipe)
    with pytest.raises(WorkerDiedError, match="exited with code 3"):
        list(reader())


@pytest.mark.parametrize(("method", "use_pipe"), MODES, ids=MODE_IDS)
def test_multiprocess_stops_its_workers_on_break(method: str, use_pipe: bool, running: Running) -> None:
    endless = functools.partial(itertools.count)
    for sample in multiprocess_reader([endless, endless], use_pipe, 10, mp_context=method)():
        if sample > 50:
            break
    assert running.processes() == []


def mark_when_closed(path: str) -> Iterator[int]:
    try:
        yield from itertools.count()
    finally:
        Path(path).write_text("closed")


@pytest.mark.parametrize("use_pipe", [True, False], ids=["pipe", "queue"])
def test_multiprocess_lets_readers_clean_up_when_stopped(use_pipe: bool, tmp_path: Path, running: Running) -> None:
    marker = tmp_path / "marker"
    samples = multiprocess_reader([functools.partial(mark_when_closed, str(marker))], use_pipe, 5)()
    next(samples)
    del samples
    gc.collect()
    assert running.processes() == []
    assert marker.read_text() == "closed"


@pytest.mark.parametrize("use_pipe", [True, False], ids=["pipe", "queue"])
def test_multiprocess_reports_unpicklable_samples(use_pipe: bool) -> None:
    reader = multiprocess_reader([lambda: [1, threading.Lock()]], use_pipe, mp_context="fork")
    seen = []
    with pytest.raises(TypeError, match="pickle"):
        seen.extend(reader())
    assert seen == [1]


def test_multiprocess_refuses_closures_for_spawn_but_runs_them_with_fork() -> None:
    with pytest.raises(NotPicklableError, match="mp_context='fork'"):
        multiprocess_reader([lambda: [1]], mp_context="spawn")
    assert list(multiprocess_reader([lambda: [1]], mp_context="fork")()) == [1]


@pytest.mark.parametrize(
    ("readers", "options"),
    [
        (functools.partial(range, 3), {}),
        ([], {}),
        ([functools.partial(range, 3)], {"queue_size": 0}),
        ([functools.partial(range, 3)], {"mp_context": "telepathy"}),
    ],
    ids=["not-a-list", "empty", "queue-size", "start-method"],
)
def test_multiprocess_rejects_bad_arguments(readers: object, options: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"multiprocess_reader|mp_context"):
        multiprocess_reader(readers, **options)


# ------------------------------------------------------------------------------------- pickling and spawning

SOURCE = functools.partial(range, 12)
DECORATED = {
    "batch": batch(SOURCE, 5),
    "shuffle": shuffle(SOURCE, 4, seed=2),
    "compose": compose(SOURCE, map_readers(str, SOURCE)),
    "chain": chain(SOURCE, SOURCE),
    "map_readers": map_readers(operator.add, SOURCE, SOURCE),
    "firstn": firstn(SOURCE, 3),
    "cache": cache(SOURCE),
    "buffered": buffered(SOURCE, 2),
    "xmap_readers": xmap_readers(str, SOURCE, 2, 3, True),
}


@pytest.mark.parametrize("reader", DECORATED.values(), ids=DECORATED.keys())
def test_decorated_readers_survive_a_pickle_round_trip(reader) -> None:
    copy = pickle.loads(pickle.dumps(reader))
    assert list(copy()) == list(reader())


def test_decorated_readers_run_in_a_spawned_process() -> None:
    # One process for all of them: a spawn start costs a few hundred milliseconds.
    everything = chain(*DECORATED.values())
    expected = list(pickle.loads(pickle.dumps(everything))())
    assert len(expected) > len(DECORATED)
    assert list(multiprocess_reader([everything], mp_context="spawn")()) == expected


def test_multiprocess_reader_itself_pickles() -> None:
    reader = multiprocess_reader([SOURCE, SOURCE], use_pipe=False, mp_context="spawn")
    assert sorted(pickle.loads(pickle.dumps(reader))()) == sorted(list(range(12)) * 2)


def count_to_50() -> Iterator[int]:
    return iter(range(50))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_shuffle_inside_worker_processes_moves_on_each_epoch(method: str) -> None:
    in_workers = shuffle(count_to_50, 10, seed=5)
    here = shuffle(count_to_50, 10, seed=5)
    merged = multiprocess_reader([in_workers], mp_context=method)
    epochs = [list(merged()) for _ in range(3)]
    assert epochs == [list(here()) for _ in range(3)]
    assert len({tuple(epoch) for epoch in epochs}) == 3
    assert in_workers.epoch == 3  # type: ignore[attr-defined]
