"""One DataLoader epoch prefetched by a worker process that hands batches over through shared memory.

Protocol, over two one-way pipes that carry only small messages:

- worker -> parent (``messages``): :class:`RingRequest` once, with the first batch's size; then for each batch
  an optional :class:`GrowRequest` and a :class:`BatchReady` naming the slot and the column specs; finally
  :data:`END_OF_EPOCH` or a :class:`~datamount.readers._remote.CarriedException`.
- parent -> worker (``slots``): a :class:`~datamount.readers._shm.Slot` for each segment that is free to
  write, or :class:`Stop`.

The parent answers the ring request by checking ``/dev/shm`` and creating ``capacity`` segments, so at most
``capacity`` batches wait in shared memory. It copies each batch out, then gives the slot back. The parent
owns every segment, so a worker killed at any moment leaks nothing; the worker only attaches.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import warnings
import weakref
from collections import deque
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

from datamount.readers._collate import Column
from datamount.readers._prefetch import (
    END_OF_EPOCH,
    POLL_SECONDS,
    BatchSource,
    EndOfEpoch,
    Epoch,
    Formatter,
    ThreadEpoch,
)
from datamount.readers._shm import AttachedSegments, SegmentRing, Slot, Spec, plan_batch, write_batch
from datamount.readers.errors import SharedMemoryError, WorkerDiedError
from datamount.readers.workers import CarriedException, advance_epochs, close_iterator, exit_description

PROCESS_NAME = "datamount-dataloader-worker"
# How long a stopped worker gets to leave on its own (running the reader's ``finally`` blocks) before SIGTERM.
_GRACE_SECONDS = 2.0
# How often a waiting parent re-checks the worker while no message arrives (its exit also wakes the wait).
_STATUS_SECONDS = 1.0


@dataclass(frozen=True)
class RingRequest:
    """Worker -> parent: the first batch needs ``nbytes``; create the ring."""

    nbytes: int


@dataclass(frozen=True)
class GrowRequest:
    """Worker -> parent: the next batch needs ``nbytes`` but slot ``index`` is smaller."""

    index: int
    nbytes: int


@dataclass(frozen=True)
class BatchReady:
    """Worker -> parent: slot ``index`` holds a batch laid out as ``specs``."""

    index: int
    specs: tuple[Spec, ...]


@dataclass(frozen=True)
class Stop:
    """Parent -> worker: stop producing and exit."""


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
        while True:
            message = worker.receive()
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
            elif isinstance(message, EndOfEpoch):
                raise StopIteration
            elif isinstance(message, CarriedException):
                message.reraise()
            else:
                raise RuntimeError(f"unexpected message from the DataLoader worker: {message!r}")

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
    """The parent's side of one worker: its process, both pipe ends and the ring. Holds no epoch reference."""

    def __init__(self, process: BaseProcess, messages: Connection, slots: Connection, ring: SegmentRing) -> None:
        self.process = process
        self.messages = messages
        self.slots = slots
        self.ring = ring

    @classmethod
    def start(cls, source: BatchSource, capacity: int, context: BaseContext) -> _WorkerHandle:
        # Started here, before the worker exists, so that fork and spawn workers share this tracker and the
        # worker's registrations of segment names merge with ours instead of living in a tracker of its own.
        resource_tracker.ensure_running()
        messages, worker_messages = context.Pipe(duplex=False)
        worker_slots, slots = context.Pipe(duplex=False)
        process = context.Process(  # type: ignore[attr-defined]
            target=worker_main, args=(source, worker_messages, worker_slots), name=PROCESS_NAME, daemon=True
        )
        try:
            process.start()
        except BaseException:
            messages.close()
            slots.close()
            raise
        finally:
            # The worker holds the only other ends now, so its death reads as EOF here.
            worker_messages.close()
            worker_slots.close()
        return cls(process, messages, slots, SegmentRing(capacity))

    def receive(self) -> Any:
        """The next message; a worker that exits without its end marker raises :class:`WorkerDiedError`."""
        # poll() first: when a message is waiting, as it is in the steady state, no selector is built.
        while not self.messages.poll():
            ready = wait([self.messages, self.process.sentinel], timeout=_STATUS_SECONDS)
            exited = self.process.sentinel in ready or not self.process.is_alive()
            if exited and not self.messages.poll():  # its last message may land after the wait returned
                raise self._died()
        try:
            return self.messages.recv()
        except (EOFError, OSError):
            raise self._died() from None

    def allocate(self, nbytes: int) -> None:
        for slot in self.ring.allocate(nbytes):
            self._give(slot)

    def grow(self, request: GrowRequest) -> None:
        self._give(self.ring.grow(request.index, request.nbytes))

    def take(self, ready: BatchReady) -> list[Column]:
        columns = self.ring.read(ready.index, ready.specs)
        self._give(self.ring.slot(ready.index))
        return columns

    def _give(self, message: Slot | Stop) -> None:
        # A worker that is gone cannot take it; receive() reports the death with its exit status.
        with suppress(BrokenPipeError, ConnectionResetError):
            self.slots.send(message)

    def _died(self) -> WorkerDiedError:
        self.process.join(timeout=_GRACE_SECONDS)  # the pipe's EOF can come a moment before the exit status
        return WorkerDiedError(
            f"the DataLoader worker process (pid {self.process.pid}) {exit_description(self.process)} "
            "before the end of the epoch"
        )

    def shutdown(self) -> None:
        """Stop the worker (asking first, then SIGTERM, then SIGKILL), join it, and release the ring."""
        try:
            self._give(Stop())
            self._wait_for_exit()
            if self.process.is_alive():
                self.process.terminate()
                self.process.join(timeout=_GRACE_SECONDS)
            if self.process.is_alive():
                self.process.kill()
            self.process.join()
            self.process.close()
        finally:
            self.messages.close()
            self.slots.close()
            self.ring.release()

    def _wait_for_exit(self) -> None:
        """Wait up to the grace period, reading and dropping messages so the worker never blocks on a send."""
        watched: list[Any] = [self.messages, self.process.sentinel]
        deadline = time.monotonic() + _GRACE_SECONDS
        while self.process.is_alive() and (remaining := deadline - time.monotonic()) > 0:
            if self.messages in wait(watched, timeout=min(remaining, POLL_SECONDS)):
                try:
                    self.messages.recv_bytes()
                except (EOFError, OSError):
                    watched = [self.process.sentinel]


# ------------------------------------------------------------------------------------------------ the worker


class _Stopped(Exception):
    """The parent asked the worker to stop, or is gone."""


def worker_main(source: BatchSource, messages: Connection, slots: Connection) -> None:
    """Process body: write each batch of ``source`` into a free slot and announce it to the parent."""
    # Ctrl-C reaches the whole process group; the parent handles it and stops the worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ring = _WorkerRing(messages, slots)
    try:
        iterator = iter(source())
        try:
            for columns in iterator:
                ring.send_batch(columns)
        finally:
            close_iterator(iterator)
        messages.send(END_OF_EPOCH)
    except _Stopped:
        pass
    except Exception as exc:
        # SystemExit is left alone: the worker exits with its code and the parent reports that.
        with suppress(OSError):
            messages.send(CarriedException.capture(exc, f"DataLoader worker process (pid {os.getpid()})"))
    finally:
        ring.close()
        messages.close()
        slots.close()


class _WorkerRing:
    """The worker's side of the ring: free slots, attached segments, and the requests for more room."""

    def __init__(self, messages: Connection, slots: Connection) -> None:
        self._messages = messages
        self._slots = slots
        self._segments = AttachedSegments()
        self._free: deque[Slot] = deque()
        self._requested = False
        parent = multiprocessing.parent_process()
        self._parent_sentinel = None if parent is None else parent.sentinel
        self._watched: list[Any] = [slots] if parent is None else [slots, parent.sentinel]

    def send_batch(self, columns: list[Column]) -> None:
        plan = plan_batch(columns)
        slot = self._acquire(plan.nbytes)
        write_batch(self._segments.buffer(slot), plan)
        self._messages.send(BatchReady(slot.index, plan.specs))

    def _acquire(self, nbytes: int) -> Slot:
        if not self._requested:
            self._messages.send(RingRequest(nbytes))
            self._requested = True
        while self._slots.poll():
            self._free.append(self._receive())
        slot = self._free.popleft() if self._free else self._receive()
        if slot.size < nbytes:
            self._messages.send(GrowRequest(slot.index, nbytes))
            slot = self._receive_slot(slot.index)
        return slot

    def _receive_slot(self, index: int) -> Slot:
        while (slot := self._receive()).index != index:
            self._free.append(slot)
        return slot

    def _receive(self) -> Slot:
        """The next slot from the parent; raises :class:`_Stopped` on a stop request or the parent's death."""
        while not self._slots.poll():
            if self._parent_sentinel in wait(self._watched, timeout=_STATUS_SECONDS):
                raise _Stopped  # the parent exited
        try:
            message = self._slots.recv()
        except (EOFError, OSError):
            raise _Stopped from None
        if isinstance(message, Stop):
            raise _Stopped
        return message

    def close(self) -> None:
        self._segments.close()
