"""The stages behind ``buffered``, ``xmap_readers`` and ``multiprocess_reader``, built on the worker toolkit.

Each call of a stage is one epoch with its own :class:`~datamount.readers.workers.Crew`: workers start on the first
``next()`` (a generator that is never started owns nothing), what they send is read through the crew's inbox (a
worker's error is raised here with its traceback, a dead worker is a ``WorkerDiedError``), and the generator's
``finally`` shuts the crew down, so the end of the stream, an error, a ``break``, ``close()`` and garbage collection
of the generator all leave nothing running.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from datamount.readers.workers import (
    END_OF_STREAM,
    POLL_SECONDS,
    CarriedException,
    Crew,
    PipeInbox,
    PipeSender,
    ProcessQueueInbox,
    ProcessQueueSender,
    QueueInbox,
    QueueSender,
    Reader,
    StopFlag,
    advance_epochs,
    get_until_stopped,
    produce,
    put_until_stopped,
    serve,
)

T = TypeVar("T")
U = TypeVar("U")

_READER_FINISHED = "its reader finished"


@dataclass(frozen=True, eq=False)
class BufferedReader(Generic[T]):
    """Reader returned by :func:`datamount.readers.buffered`."""

    reader: Reader[T]
    size: int

    def __call__(self) -> Iterator[T]:
        channel: queue.Queue[Any] = queue.Queue(maxsize=max(self.size, 0))
        crew = Crew(QueueInbox(channel, _READER_FINISHED), threading.Event())
        try:
            emit = QueueSender(channel, crew.stop)
            crew.start_producer(self.reader, emit, name="datamount-buffered", label="buffered() thread")
            yield from crew.items()
        finally:
            crew.shutdown()


# ------------------------------------------------------------------------------------------------- xmap_readers


class _TaskFeed:
    """``emit`` of the xmap reader thread: numbers samples into ``tasks``, ends every mapper, reports its failure.

    A failure of the reader becomes the result numbered after the last sample, so that with ``order=True`` it is
    raised where the stream broke off.
    """

    def __init__(
        self,
        tasks: queue.Queue[Any],
        results: queue.Queue[Any],
        window: threading.Semaphore | None,
        stop: threading.Event,
        mappers: int,
    ) -> None:
        self.tasks, self.results, self.window, self.stop, self.mappers = tasks, results, window, stop, mappers
        self.fed = 0

    def __call__(self, item: object) -> bool:
        if item is END_OF_STREAM:
            return all(put_until_stopped(self.tasks, item, self.stop) for _ in range(self.mappers))
        if type(item) is CarriedException:
            return put_until_stopped(self.results, (self.fed, item), self.stop)
        if (self.window is not None and not _acquire(self.window, self.stop)) or not put_until_stopped(
            self.tasks, (self.fed, item), self.stop
        ):
            return False
        self.fed += 1
        return True


def _acquire(window: threading.Semaphore, stop: StopFlag) -> bool:
    """Acquire a slot of ``window``; False once ``stop`` is set."""
    while not stop.is_set():
        if window.acquire(timeout=POLL_SECONDS):
            return True
    return False


def _map_tasks(
    mapper: Callable[[Any], Any], tasks: queue.Queue[Any], results: queue.Queue[Any], stop: threading.Event
) -> None:
    """Thread body: map numbered samples from ``tasks`` into ``results`` until an end marker or an error."""
    while (task := get_until_stopped(tasks, stop)) is not END_OF_STREAM:
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
        tasks: queue.Queue[Any] = queue.Queue(self.buffer_size)
        results: queue.Queue[Any] = queue.Queue(self.buffer_size)
        crew = Crew(QueueInbox(results, _READER_FINISHED), threading.Event())
        # Bounds the samples read but not yet yielded, so a slow sample cannot make the reorder buffer grow.
        window = threading.Semaphore(2 * self.buffer_size + self.process_num) if self.order else None
        try:
            feed = _TaskFeed(tasks, results, window, crew.stop, self.process_num)
            args = (self.reader, feed, "xmap_readers() reader thread")
            # The reader thread sends its end to the mappers, not to the inbox: only the mappers are watched.
            crew.start_thread(produce, args, name="datamount-xmap-reader", label=args[2], sends=False)
            for number in range(self.process_num):
                name = f"datamount-xmap-{number}"
                args = (self.mapper, tasks, results, crew.stop)
                crew.start_thread(_map_tasks, args, name=name, label=f"xmap_readers() mapper thread {name}")
            numbered: Iterator[tuple[int, Any]] = crew.items()
            if window is None:
                for _, result in numbered:
                    if type(result) is CarriedException:
                        result.reraise()
                    yield result
            else:
                yield from _in_input_order(numbered, window)
        finally:
            crew.shutdown()


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


# ------------------------------------------------------------------------------------------ multiprocess_reader


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
        channel = None if self.use_pipe else context.Queue(self.queue_size)
        inbox = PipeInbox(_READER_FINISHED) if channel is None else ProcessQueueInbox(channel, _READER_FINISHED)
        crew = Crew(inbox, stop)
        try:
            for index, reader in enumerate(self.readers):
                name, label = f"datamount-multiprocess-reader-{index}", f"multiprocess_reader() worker {index}"
                if channel is None:
                    receiver, conn = context.Pipe(duplex=False)
                    args = (reader, PipeSender(conn, stop), label)
                    crew.start_process(context, serve, args, name=name, label=label, reply=receiver, hand_over=[conn])
                else:
                    args = (reader, ProcessQueueSender(channel, stop, index), label)
                    crew.start_process(context, serve, args, name=name, label=label)
            advance_epochs(self.readers)  # each worker has its copy: keep this process's readers in step
            yield from crew.items()
        finally:
            crew.shutdown()
