"""The background stages ``buffered``, ``xmap_readers`` and ``multiprocess_reader``, built on the worker toolkit.

Each call of a stage is one epoch with its own :class:`~datamount.readers.workers.Crew`: workers start on the first
``next()`` (a generator that is never started owns nothing), what they send is read through the crew's inbox (a
worker's error is raised here with its traceback, a dead worker is a ``WorkerDiedError``), and the generator's
``finally`` shuts the crew down, so the end of the stream, an error, a ``break``, ``close()`` and garbage collection
of the generator all leave nothing running.
"""

from __future__ import annotations

import functools
import multiprocessing
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import Any, Generic, TypeVar

from datamount.datasets.reader_creator import ReaderCreator
from datamount.readers.workers.carried import END_OF_STREAM, CarriedException
from datamount.readers.workers.chains import Reader, advance_epochs, check_reader, split_among_workers
from datamount.readers.workers.channels import (
    Inbox,
    PipeInbox,
    ProcessQueueInbox,
    QueueInbox,
    QueueSender,
    acquire_until_stopped,
    get_until_stopped,
    put_until_stopped,
)
from datamount.readers.workers.crew import Crew
from datamount.readers.workers.produce import produce
from datamount.readers.workers.start import effective_start_method, require_picklable, start_method_of
from datamount.storage import arguments

T = TypeVar("T")
U = TypeVar("U")

_READER_FINISHED = "its reader finished"
_BUFFERED = "buffered() thread"


@dataclass(frozen=True, eq=False)
class BufferedReader(ReaderCreator, Generic[T]):
    """Reader returned by :func:`datamount.readers.buffered`."""

    MADE_BY = "buffered(...)"

    reader: Reader[T]
    size: int

    def __call__(self) -> Iterator[T]:
        channel: queue.Queue[Any] = queue.Queue(maxsize=max(self.size, 0))
        crew = Crew(QueueInbox(channel, _READER_FINISHED), threading.Event())
        emit = QueueSender(channel, crew.stop)
        start = functools.partial(crew.start_producer, self.reader, emit, name="datamount-buffered", label=_BUFFERED)
        return crew.items(start)  # the thread starts on the first next()


def buffered(reader: Reader[T], size: int) -> Reader[T]:
    """Read ``reader`` ahead in a background thread, holding up to ``size`` samples.

    Parameters
    ----------
    reader : Reader
        The reader to read ahead.
    size : int
        Maximum samples held; ``size <= 0`` holds any number.

    Returns
    -------
    Reader
        A reader of the same samples in the same order. An exception in the thread is raised in the consumer;
        the thread is joined when the iteration ends, fails or is abandoned (it stops after its current
        sample).
    """
    check_reader(reader, "buffered(): reader")
    return BufferedReader(reader, arguments.whole_number(size, "buffered(): size"))


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
        if item is END_OF_STREAM or type(item) is CarriedException:
            return self._end(item)
        if self.window is not None and not acquire_until_stopped(self.window, self.stop):
            return False
        fed = self.fed
        if not put_until_stopped(self.tasks, (fed, item), self.stop):
            return False
        self.fed = fed + 1
        return True

    def _end(self, item: object) -> bool:
        if item is END_OF_STREAM:
            return all(put_until_stopped(self.tasks, item, self.stop) for _ in range(self.mappers))
        return put_until_stopped(self.results, (self.fed, item), self.stop)


def _map_tasks(
    mapper: Callable[[Any], Any], tasks: queue.Queue[Any], results: queue.Queue[Any], stop: threading.Event, label: str
) -> None:
    """Thread body: map numbered samples from ``tasks`` into ``results`` until an end marker or an error."""
    while (task := get_until_stopped(tasks, stop)) is not END_OF_STREAM:
        index, sample = task
        try:
            result = mapper(sample)
        except BaseException as exc:
            put_until_stopped(results, (index, CarriedException.capture(exc, label)), stop)
            return
        if not put_until_stopped(results, (index, result), stop):
            return
    put_until_stopped(results, END_OF_STREAM, stop)


@dataclass(frozen=True, eq=False)
class XmapReader(ReaderCreator, Generic[T, U]):
    """Reader returned by :func:`datamount.readers.xmap_readers`."""

    MADE_BY = "xmap_readers(...)"

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
            label = "xmap_readers() reader thread"
            # The reader thread sends its end to the mappers, not to the inbox: only the mappers are watched.
            crew.start_thread(
                produce, (self.reader, feed, label), name="datamount-xmap-reader", label=label, sends=False
            )
            for number in range(self.process_num):
                name = f"datamount-xmap-{number}"
                label = f"xmap_readers() mapper thread {name}"
                crew.start_thread(_map_tasks, (self.mapper, tasks, results, crew.stop, label), name=name, label=label)
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


def xmap_readers(
    mapper: Callable[[T], U], reader: Reader[T], process_num: int, buffer_size: int, order: bool = False
) -> Reader[U]:
    """Map the samples of ``reader`` with ``mapper`` in ``process_num`` threads.

    Parameters
    ----------
    mapper : callable
        Applied to each sample, in worker threads (so it should release the GIL to gain from them).
    reader : Reader
        The reader to map, read by one more thread.
    process_num : int
        Number of mapper threads (Paddle's name), at least 1.
    buffer_size : int
        Capacity of the input and of the output queue, at least 1.
    order : bool
        Yield results in input order. Results that finish early wait in the consumer (at most
        ``2 * buffer_size + process_num`` samples are in flight); nobody spins while they wait.

    Returns
    -------
    Reader
        A reader of mapped samples. An exception in ``mapper`` or ``reader`` is raised in the consumer; all
        threads are joined when the iteration ends, fails or is abandoned.
    """
    if not callable(mapper):
        raise TypeError(f"xmap_readers(): mapper must be callable, got {type(mapper).__name__}")
    check_reader(reader, "xmap_readers(): reader")
    threads = arguments.whole_number(process_num, "xmap_readers(): process_num", minimum=1)
    capacity = arguments.whole_number(buffer_size, "xmap_readers(): buffer_size", minimum=1)
    return XmapReader(mapper, reader, threads, capacity, bool(order))


# ------------------------------------------------------------------------------------------ multiprocess_reader


@dataclass(frozen=True, eq=False)
class MultiprocessReader(ReaderCreator, Generic[T]):
    """Reader returned by :func:`datamount.readers.multiprocess_reader`."""

    MADE_BY = "multiprocess_reader(...)"

    readers: tuple[Reader[T], ...]
    use_pipe: bool
    queue_size: int
    start_method: str | None

    def __call__(self) -> Iterator[T]:
        context = multiprocessing.get_context(self.start_method)
        inbox: Inbox
        # Made on the first next(), like the workers: a generator that is never started owns no pipe or semaphore.
        if self.use_pipe:
            inbox = PipeInbox(_READER_FINISHED)
        else:
            inbox = ProcessQueueInbox(context.Queue(self.queue_size), _READER_FINISHED)
        crew = Crew(inbox, context.Event())
        try:
            for index, reader in enumerate(self.readers):
                name, label = f"datamount-multiprocess-reader-{index}", f"multiprocess_reader() worker {index}"
                crew.start_server(context, reader, name=name, label=label)
            advance_epochs(self.readers)  # each worker has its copy: keep this process's readers in step
            yield from crew.items()
        finally:
            crew.shutdown()


def multiprocess_reader(
    readers: Sequence[Reader[T]],
    use_pipe: bool = True,
    queue_size: int = 1000,
    *,
    mp_context: str | BaseContext | None = None,
) -> Reader[T]:
    """Run each reader in its own process and merge their samples as they arrive.

    Samples cross with pickle, so any picklable sample arrives intact (bytes, numpy arrays, tuples, ``None``).
    The order within one reader is kept; across readers it depends on timing. A dataset reader
    (:func:`~datamount.readers.reader`) that several of the readers contain, e.g. ``[samples] * 4`` or
    ``[map_readers(decode, samples)] * 4``, is split among them: each worker reads its own part of the share,
    together they read it once (see ``docs/sharding.md``).

    Parameters
    ----------
    readers : sequence of Reader
        One worker process each.
    use_pipe : bool
        One pipe per worker (True) or one shared ``multiprocessing.Queue`` (False).
    queue_size : int
        Capacity of the shared queue, at least 1; only used with ``use_pipe=False``.
    mp_context : str or multiprocessing context, optional
        Start method (``"fork"``, ``"spawn"``, ``"forkserver"``) or context; default: multiprocessing's
        default. With anything but ``fork`` the readers are pickled, so they must be module-level functions,
        decorated readers or ``functools.partial`` objects over them; this is checked here.

    Returns
    -------
    Reader
        The merged reader. An exception in a worker is raised in the consumer; a worker that dies raises
        :class:`~datamount.readers.WorkerDiedError` naming its exit code or signal. Workers are daemonic (they
        cannot start processes of their own) and are stopped and joined when the iteration ends, fails or is
        abandoned.

    Raises
    ------
    NotPicklableError
        If a reader cannot be pickled for a start method other than ``fork``.
    """
    if not isinstance(readers, (list, tuple)) or not readers:
        raise ValueError(f"multiprocess_reader(): readers must be a non-empty list or tuple, got {readers!r}")
    for index, reader in enumerate(readers):
        check_reader(reader, f"multiprocess_reader(): reader {index}")
    size = arguments.whole_number(queue_size, "multiprocess_reader(): queue_size", minimum=1)
    start_method = start_method_of(mp_context)
    if (method := effective_start_method(start_method)) != "fork":
        for index, reader in enumerate(readers):
            require_picklable(reader, f"multiprocess_reader(): reader {index} ({reader!r})", method)
    return MultiprocessReader(split_among_workers(readers), bool(use_pipe), size, start_method)
