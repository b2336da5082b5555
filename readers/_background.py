"""Threads and processes behind ``buffered``, ``xmap_readers`` and ``multiprocess_reader``.

Every stage follows the same rules. Queues are bounded. Every blocking call in a worker wakes at least
every ``POLL_SECONDS`` to look at a stop event. A worker's exception travels to the consumer as a
:class:`~datamount.readers._remote.CarriedException` and is raised there. The consumer's ``finally`` sets the
stop event and joins every thread (or joins, then terminates, every process), so the end of the stream, an
error, a ``break``, ``close()`` and garbage collection of the generator all leave nothing running. Threads and
processes start on the first ``next()``: a generator that is never started owns nothing.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Generic, TypeVar, cast

from datamount.readers._processes import (
    POLL_SECONDS,
    advance_epochs,
    close_iterator,
    exit_description,
    put_until_stopped,
)
from datamount.readers._remote import CarriedException
from datamount.readers.errors import WorkerDiedError

T = TypeVar("T")
U = TypeVar("U")

Reader = Callable[[], Iterable[T]]
"""A zero-argument callable returning a fresh iterable of samples (one epoch) on each call."""

# How long worker processes get to stop by themselves (running their readers' ``finally``) before terminate().
_GRACE_SECONDS = 2.0


@dataclass(frozen=True)
class _EndOfStream:
    """Marks the end of a stream; compared with ``is``, never ``==`` (a sample may be a numpy array)."""

    def __reduce__(self) -> str:
        # Pickled by reference, so the one instance is still the one instance in a worker process.
        return "END_OF_STREAM"


END_OF_STREAM = _EndOfStream()


def _run_reader(reader: Reader[Any], emit: Callable[[object], bool], stop: Any, where: str) -> None:
    """Feed one epoch of ``reader`` to ``emit``, then the end marker or the carried error.

    ``emit`` returns False when the consumer has gone away; ``stop`` is a thread or process event.
    """
    try:
        iterator = iter(reader())
        try:
            for sample in iterator:
                if stop.is_set() or not emit(sample):
                    return
        finally:
            close_iterator(iterator)
    except BaseException as exc:
        emit(CarriedException.capture(exc, where))
        return
    emit(END_OF_STREAM)


# ------------------------------------------------------------------------------------------------- threads


def _get(channel: queue.Queue[Any], stop: threading.Event) -> Any:
    """Take an item, waiting while ``channel`` is empty; ``END_OF_STREAM`` once ``stop`` is set."""
    while not stop.is_set():
        try:
            return channel.get(timeout=POLL_SECONDS)
        except queue.Empty:
            pass
    return END_OF_STREAM


def _acquire(window: threading.Semaphore, stop: threading.Event) -> bool:
    """Acquire a slot of ``window``; False once ``stop`` is set."""
    while not stop.is_set():
        if window.acquire(timeout=POLL_SECONDS):
            return True
    return False


class _ThreadGroup:
    """The threads of one epoch of a background stage and the stop event they share."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, target: Callable[..., None], args: tuple[Any, ...], name: str) -> None:
        # daemon only so that a reader stuck in I/O cannot block interpreter exit; close() always joins.
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def receive(self, channel: queue.Queue[Any]) -> Any:
        """Next item for the consumer; threads that vanish without an end marker are an error, not a hang."""
        while True:
            try:
                return channel.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if channel.empty() and not any(thread.is_alive() for thread in self.threads):
                    msg = "background reader threads ended without finishing the stream"
                    raise RuntimeError(msg) from None

    def close(self) -> None:
        """Stop and join every thread; each sees ``stop`` within ``POLL_SECONDS`` after its current sample."""
        self.stop.set()
        for thread in self.threads:
            thread.join()


@dataclass(frozen=True, eq=False)
class BufferedReader(Generic[T]):
    """Reader returned by :func:`datamount.readers.buffered`."""

    reader: Reader[T]
    size: int

    def __call__(self) -> Iterator[T]:
        group = _ThreadGroup()
        channel: queue.Queue[Any] = queue.Queue(maxsize=max(self.size, 0))
        try:
            group.start(
                _run_reader,
                (
                    self.reader,
                    lambda item: put_until_stopped(channel, item, group.stop),
                    group.stop,
                    "buffered() thread",
                ),
                "datamount-buffered",
            )
            while (item := group.receive(channel)) is not END_OF_STREAM:
                if type(item) is CarriedException:
                    item.reraise()
                yield item
        finally:
            group.close()


def _feed_tasks(
    reader: Reader[Any],
    tasks: queue.Queue[Any],
    results: queue.Queue[Any],
    window: threading.Semaphore | None,
    stop: threading.Event,
    workers: int,
) -> None:
    """Thread body: number the samples of ``reader`` into ``tasks``, then give each worker an end marker.

    A failure of ``reader`` becomes the result numbered after the last sample, so that with ``order=True`` it
    is raised where the stream broke off.
    """
    fed = 0
    try:
        iterator = iter(reader())
        try:
            for task in enumerate(iterator):
                if (window is not None and not _acquire(window, stop)) or not put_until_stopped(tasks, task, stop):
                    return
                fed += 1
        finally:
            close_iterator(iterator)
    except BaseException as exc:
        put_until_stopped(results, (fed, CarriedException.capture(exc, "xmap_readers() reader thread")), stop)
        return
    for _ in range(workers):
        put_until_stopped(tasks, END_OF_STREAM, stop)


def _map_tasks(
    mapper: Callable[[Any], Any], tasks: queue.Queue[Any], results: queue.Queue[Any], stop: threading.Event
) -> None:
    """Thread body: map numbered samples from ``tasks`` into ``results`` until an end marker or an error."""
    while (task := _get(tasks, stop)) is not END_OF_STREAM:
        index, sample = task
        try:
            result = mapper(sample)
        except BaseException as exc:
            where = f"xmap_readers() mapper thread {threading.current_thread().name}"
            put_until_stopped(results, (index, CarriedException.capture(exc, where)), stop)
            return
        if not put_until_stopped(results, (index, result), stop):
            return
    put_until_stopped(results, END_OF_STREAM, stop)


@dataclass(frozen=True, eq=False)
class XmapReader(Generic[T, U]):
    """Reader returned by :func:`datamount.readers.xmap_readers`."""

    mapper: Callable[[T], U]
    reader: Reader[T]
    process_num: int
    buffer_size: int
    order: bool

    def __call__(self) -> Iterator[U]:
        group = _ThreadGroup()
        tasks: queue.Queue[Any] = queue.Queue(self.buffer_size)
        results: queue.Queue[Any] = queue.Queue(self.buffer_size)
        # Bounds the samples read but not yet yielded, so a slow sample cannot make the reorder buffer grow.
        window = threading.Semaphore(2 * self.buffer_size + self.process_num) if self.order else None
        try:
            group.start(
                _feed_tasks,
                (self.reader, tasks, results, window, group.stop, self.process_num),
                "datamount-xmap-reader",
            )
            for number in range(self.process_num):
                group.start(_map_tasks, (self.mapper, tasks, results, group.stop), f"datamount-xmap-{number}")
            numbered = self._numbered_results(group, results)
            if window is None:
                for _, result in numbered:
                    if type(result) is CarriedException:
                        result.reraise()
                    yield result
            else:
                yield from _in_input_order(numbered, window)
        finally:
            group.close()

    def _numbered_results(self, group: _ThreadGroup, results: queue.Queue[Any]) -> Iterator[tuple[int, Any]]:
        """``(input number, result or carried error)`` pairs until every mapper thread has ended."""
        running = self.process_num
        while running:
            item = group.receive(results)
            if item is END_OF_STREAM:
                running -= 1
            else:
                yield item


def _in_input_order(numbered: Iterable[tuple[int, Any]], window: threading.Semaphore) -> Iterator[Any]:
    """Yield results by input number, holding early ones back; waits on the queue, never spins.

    A carried error is raised when its turn comes, after every result before it. Every sample numbered before
    it has been taken by a live thread, so those results do arrive.
    """
    pending: dict[int, Any] = {}
    expected = 0
    for index, result in numbered:
        pending[index] = result
        while expected in pending:
            ready = pending.pop(expected)
            if type(ready) is CarriedException:
                ready.reraise()
            expected += 1
            window.release()
            yield ready


# ----------------------------------------------------------------------------------------------- processes


def _send(conn: Connection, item: object) -> bool:
    """Send ``item`` down the pipe; False if the parent has closed its end. Pickling errors propagate."""
    try:
        conn.send(item)
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


def _put_to_process_queue(channel: Any, item: object, stop: Any, parent: int) -> bool:
    """Put ``item`` on a multiprocessing queue; False once ``stop`` is set or the parent process is gone."""
    while not stop.is_set() and os.getppid() == parent:
        try:
            channel.put(item, timeout=POLL_SECONDS)
            return True
        except queue.Full:
            pass
    return False


def _child_into_pipe(reader: Reader[Any], conn: Connection, stop: Any, index: int) -> None:
    """Process body for ``use_pipe=True``: one pipe per worker, samples pickled by ``Connection.send``."""
    where = f"multiprocess_reader() worker {index} (pid {os.getpid()})"
    try:
        _run_reader(reader, lambda item: _send(conn, item), stop, where)
    finally:
        conn.close()


def _child_into_queue(reader: Reader[Any], channel: Any, stop: Any, index: int) -> None:
    """Process body for ``use_pipe=False``: one shared queue of ``(worker, pickled item)`` pairs.

    Items are pickled here, not in the queue's feeder thread, so that an unpicklable sample is reported to the
    consumer instead of being printed and dropped.
    """
    where = f"multiprocess_reader() worker {index} (pid {os.getpid()})"
    parent = os.getppid()

    def emit(item: object) -> bool:
        payload = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
        return _put_to_process_queue(channel, (index, payload), stop, parent)

    try:
        _run_reader(reader, emit, stop, where)
    finally:
        if stop.is_set() or os.getppid() != parent:
            # Nobody reads the queue any more: exit without waiting to flush it.
            channel.cancel_join_thread()


def _died(process: multiprocessing.process.BaseProcess, index: int) -> WorkerDiedError:
    process.join(timeout=_GRACE_SECONDS)  # the pipe's EOF can come a moment before the exit status
    return WorkerDiedError(
        f"multiprocess_reader(): worker {index} (pid {process.pid}) {exit_description(process)} "
        "before its reader finished"
    )


def _merge_pipes(conns: list[Connection], processes: list[multiprocessing.process.BaseProcess]) -> Iterator[Any]:
    """Samples from the workers' pipes as they come; EOF before the end marker means the worker died."""
    index_of = {conn: index for index, conn in enumerate(conns)}
    while index_of:
        for ready in wait(list(index_of), timeout=POLL_SECONDS):
            conn = cast(Connection, ready)
            index = index_of[conn]
            try:
                item: Any = conn.recv()
            except EOFError:
                raise _died(processes[index], index) from None
            if item is END_OF_STREAM:
                del index_of[conn]
            elif type(item) is CarriedException:
                item.reraise()
            else:
                yield item


def _merge_queue(channel: Any, processes: list[multiprocessing.process.BaseProcess]) -> Iterator[Any]:
    """Samples from the shared queue; checks every ``POLL_SECONDS`` that unfinished workers are alive."""
    running = set(range(len(processes)))
    suspects: set[int] = set()
    next_check = time.monotonic() + POLL_SECONDS
    while running:
        try:
            index, payload = channel.get(timeout=POLL_SECONDS)
        except queue.Empty:
            suspects = _check_exits(processes, running, suspects, idle=True)
            continue
        item = pickle.loads(payload)
        if item is END_OF_STREAM:
            running.discard(index)
            continue
        if type(item) is CarriedException:
            item.reraise()
        yield item
        if time.monotonic() >= next_check:
            _check_exits(processes, running, set(), idle=False)
            next_check = time.monotonic() + POLL_SECONDS


def _check_exits(
    processes: list[multiprocessing.process.BaseProcess], running: set[int], suspects: set[int], *, idle: bool
) -> set[int]:
    """Raise for a worker that exited before its end marker arrived.

    A non-zero exit status is an error at once. A zero status is an error only once the queue has been found
    empty twice in a row, because a worker that finished normally exits right after its end marker, which may
    still be queued behind other samples.
    """
    seen_exited = set()
    for index in running:
        code = processes[index].exitcode
        if code is None:
            continue
        if code != 0 or index in suspects:
            raise _died(processes[index], index)
        if idle:
            seen_exited.add(index)
    return seen_exited


def _drain_pipes(conns: list[Connection]) -> None:
    """Read and drop what workers have sent, so that none stays blocked in ``send`` on a full pipe."""
    for conn in conns:
        try:
            while not conn.closed and conn.poll():
                conn.recv_bytes()
        except (EOFError, OSError):
            conn.close()


def _stop_processes(
    processes: list[multiprocessing.process.BaseProcess], conns: list[Connection], grace: float
) -> None:
    """Give workers ``grace`` seconds to stop on their own, then terminate, then kill; join all of them."""
    deadline = time.monotonic() + grace
    while (alive := [p for p in processes if p.is_alive()]) and time.monotonic() < deadline:
        _drain_pipes(conns)
        wait([p.sentinel for p in alive], timeout=POLL_SECONDS)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=1.0)
        if process.is_alive():
            process.kill()
            process.join()
        process.close()
    for conn in conns:
        conn.close()


@dataclass(frozen=True, eq=False)
class MultiprocessReader(Generic[T]):
    """Reader returned by :func:`datamount.readers.multiprocess_reader`."""

    readers: tuple[Reader[T], ...]
    use_pipe: bool
    queue_size: int
    start_method: str | None

    def __call__(self) -> Iterator[T]:
        context = multiprocessing.get_context(self.start_method)
        stop = context.Event()
        processes: list[multiprocessing.process.BaseProcess] = []
        conns: list[Connection] = []
        channel = None if self.use_pipe else context.Queue(self.queue_size)
        try:
            for index, reader in enumerate(self.readers):
                if channel is None:
                    processes.append(_start_pipe_worker(context, index, reader, stop, conns))
                else:
                    args = (reader, channel, stop, index)
                    processes.append(_start_worker(context, _child_into_queue, args, index))
            advance_epochs(self.readers)  # each worker has its copy: keep this process's readers in step
            if channel is None:
                yield from _merge_pipes(conns, processes)
            else:
                yield from _merge_queue(channel, processes)
        finally:
            stop.set()
            _stop_processes(processes, conns, _GRACE_SECONDS)
            if channel is not None:
                channel.close()
                channel.join_thread()


def _start_worker(
    context: Any, target: Callable[..., None], args: tuple[Any, ...], index: int
) -> multiprocessing.process.BaseProcess:
    # daemonic, as DataLoader workers are: the interpreter's exit terminates them instead of waiting for them.
    name = f"datamount-multiprocess-reader-{index}"
    process: multiprocessing.process.BaseProcess = context.Process(target=target, args=args, name=name, daemon=True)
    process.start()
    return process


def _start_pipe_worker(
    context: Any, index: int, reader: Reader[Any], stop: Any, conns: list[Connection]
) -> multiprocessing.process.BaseProcess:
    receiver, sender = context.Pipe(duplex=False)
    conns.append(receiver)
    try:
        return _start_worker(context, _child_into_pipe, (reader, sender, stop, index), index)
    finally:
        # The worker now holds the only write end, so its death reads as EOF on ours.
        sender.close()
