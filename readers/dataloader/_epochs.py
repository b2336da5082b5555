"""One epoch of a DataLoader: prefetched by a thread into a queue, or by a worker process through shared memory.

An epoch is an iterator that owns a :class:`~datamount.readers.workers.Crew` of one thread or one process.
Whatever ends it (the last batch, an error, ``close()``, ``break`` dropping the last reference, interpreter
exit), one ``weakref.finalize`` shuts the crew down and, for a process, releases the shared memory. The worker
never holds a reference to the epoch object, so dropping it is enough to trigger the cleanup.
"""

from __future__ import annotations

import queue
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import suppress
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from typing import Any

from datamount.readers.dataloader._collate import Column
from datamount.readers.dataloader._shm import SegmentRing, Slot
from datamount.readers.dataloader._worker import WORKER_LABEL, BatchReady, GrowRequest, RingRequest, Stop, WorkerRing
from datamount.readers.errors import SharedMemoryError
from datamount.readers.workers import Crew, PipeInbox, QueueInbox, QueueSender, advance_epochs, serve

THREAD_NAME = "datamount-dataloader-prefetch"
PROCESS_NAME = "datamount-dataloader-worker"
_EPOCH_ENDS = "the end of the epoch"

BatchSource = Callable[[], Iterator[list[Column]]]
Formatter = Callable[[list[Column]], Any]


class Epoch:
    """Iterator over the batches of one epoch; subclasses provide ``_next_columns`` and ``_finalizer``."""

    _finalizer: weakref.finalize[Any, Any]

    def __init__(self, format_batch: Formatter) -> None:
        self._format = format_batch
        self._finished = False

    def __iter__(self) -> Epoch:
        return self

    def __next__(self) -> Any:
        if self._finished:
            raise StopIteration
        try:
            return self._format(self._next_columns())
        except BaseException:
            self.close()
            raise

    def _next_columns(self) -> list[Column]:
        raise NotImplementedError

    def close(self) -> None:
        """Stop prefetching and release the thread or process (and shared memory); idempotent."""
        self._finished = True
        self._finalizer()


class ThreadEpoch(Epoch):
    """One epoch prefetched by a thread into a queue of ``capacity`` batches."""

    def __init__(self, source: BatchSource, capacity: int, format_batch: Formatter) -> None:
        super().__init__(format_batch)
        channel: queue.Queue[Any] = queue.Queue(maxsize=capacity)
        crew = Crew(QueueInbox(channel, _EPOCH_ENDS), threading.Event())
        self._finalizer = weakref.finalize(self, crew.shutdown)
        emit = QueueSender(channel, crew.stop)
        crew.start_producer(source, emit, name=THREAD_NAME, label="the DataLoader prefetch thread")
        self._batches: Iterator[list[Column]] = crew.items()

    def _next_columns(self) -> list[Column]:
        return next(self._batches)


class ProcessEpoch(Epoch):
    """One epoch produced by a worker process through a ring of shared-memory segments."""

    def __init__(
        self,
        source: BatchSource,
        capacity: int,
        context: BaseContext,
        format_batch: Formatter,
        *,
        fallback_to_thread: bool,
    ) -> None:
        super().__init__(format_batch)
        self._source = source
        self._capacity = capacity
        self._fallback_to_thread = fallback_to_thread
        self._fallback: ThreadEpoch | None = None
        self._worker = _WorkerHandle.start(source, capacity, context)
        self._finalizer = weakref.finalize(self, self._worker.shutdown)
        advance_epochs(source)  # the worker has its copy; the next epoch's copy must start one epoch further

    def _next_columns(self) -> list[Column]:
        if self._fallback is not None:
            return self._fallback._next_columns()
        worker = self._worker
        for message in worker.messages:
            if isinstance(message, BatchReady):
                return worker.take(message)
            if isinstance(message, GrowRequest):
                worker.grow(message)
            elif isinstance(message, RingRequest):
                try:
                    worker.allocate(message.nbytes)
                except SharedMemoryError as exc:
                    if not self._fallback_to_thread:
                        raise
                    return self._fall_back(exc)
            else:
                raise RuntimeError(f"unexpected message from the DataLoader worker: {message!r}")
        raise StopIteration

    def _fall_back(self, error: SharedMemoryError) -> list[Column]:
        self._finalizer()
        advance_epochs(self._source, by=-1)  # this epoch runs here after all, on this process's reader
        warnings.warn(
            f"{error} Prefetching this epoch in a thread instead (fallback_to_thread=True).",
            RuntimeWarning,
            stacklevel=4,
        )
        self._fallback = ThreadEpoch(self._source, self._capacity, self._format)
        return self._fallback._next_columns()

    def close(self) -> None:
        super().close()
        if self._fallback is not None:
            self._fallback.close()


class _WorkerHandle:
    """The parent's side of one worker: its crew, the slot pipe and the ring. Holds no epoch reference."""

    def __init__(self, crew: Crew, slots: Connection, ring: SegmentRing) -> None:
        self.crew = crew
        self.slots = slots
        self.ring = ring
        self.messages: Iterator[Any] = crew.items()

    @classmethod
    def start(cls, source: BatchSource, capacity: int, context: BaseContext) -> _WorkerHandle:
        # Started here, before the worker exists, so that fork and spawn workers share this tracker and the
        # worker's registrations of segment names merge with ours instead of living in a tracker of its own.
        resource_tracker.ensure_running()
        messages, worker_messages = context.Pipe(duplex=False)
        worker_slots, slots = context.Pipe(duplex=False)
        crew = Crew(PipeInbox(_EPOCH_ENDS), _StopMessage(slots))
        ring = WorkerRing(worker_messages, worker_slots)
        try:
            crew.start_process(
                context,
                serve,
                (source, ring, WORKER_LABEL),
                name=PROCESS_NAME,
                label=WORKER_LABEL,
                reply=messages,
                hand_over=ring.ends,
            )
        except BaseException:
            slots.close()
            raise
        return cls(crew, slots, SegmentRing(capacity))

    def allocate(self, nbytes: int) -> None:
        for slot in self.ring.allocate(nbytes):
            _give(self.slots, slot)

    def grow(self, request: GrowRequest) -> None:
        _give(self.slots, self.ring.grow(request.index, request.nbytes))

    def take(self, ready: BatchReady) -> list[Column]:
        columns = self.ring.read(ready.index, ready.specs)
        _give(self.slots, self.ring.slot(ready.index))
        return columns

    def shutdown(self) -> None:
        """Stop the worker and join it (see :meth:`Crew.shutdown`), then release the ring."""
        try:
            self.crew.shutdown()
        finally:
            self.slots.close()
            self.ring.release()


class _StopMessage:
    """The stop signal of a DataLoader worker: a :class:`Stop` on its slot pipe."""

    def __init__(self, slots: Connection) -> None:
        self.slots = slots
        self._sent = False

    def is_set(self) -> bool:
        return self._sent

    def set(self) -> None:
        self._sent = True
        _give(self.slots, Stop())


def _give(slots: Connection, message: Slot | Stop) -> None:
    # A worker that is gone cannot take it; the inbox reports the death with its exit status.
    with suppress(BrokenPipeError, ConnectionResetError):
        slots.send(message)
