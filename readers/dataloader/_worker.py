"""The DataLoader's worker process: its side of the shared-memory protocol, and the messages of that protocol.

Protocol, over two one-way pipes that carry only small messages:

- worker -> parent (``messages``): :class:`RingRequest` once, with the first batch's size; then for each batch
  an optional :class:`GrowRequest` and a :class:`BatchReady` naming the slot and the column specs; finally
  :data:`~datamount.readers.workers.END_OF_STREAM` or a :class:`~datamount.readers.workers.CarriedException`.
- parent -> worker (``slots``): a :class:`~datamount.readers.dataloader._shm.Slot` for each segment that is free to
  write, or :class:`Stop`.

The parent answers the ring request by checking ``/dev/shm`` and creating ``capacity`` segments, so at most
``capacity`` batches wait in shared memory. It copies each batch out, then gives the slot back. The parent
owns every segment, so a worker killed at any moment leaks nothing; the worker only attaches.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from datamount.readers.dataloader._collate import Column
from datamount.readers.dataloader._shm import AttachedSegments, Slot, Spec, plan_batch, write_batch
from datamount.readers.workers import END_OF_STREAM, POLL_SECONDS, CarriedException

WORKER_LABEL = "the DataLoader worker process"


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


class _Stopped(Exception):
    """The parent asked the worker to stop, or is gone."""


class WorkerRing:
    """The worker's side of the ring, and its ``emit``: writes each batch into a free slot and announces it.

    Made in the parent and sent to the worker with the pipe ends; everything else is set up in the worker.
    """

    def __init__(self, messages: Connection, slots: Connection) -> None:
        self._messages = messages
        self._slots = slots
        self.ends: tuple[Connection, ...] = (messages, slots)
        self._segments = AttachedSegments()
        self._free: deque[Slot] = deque()
        self._requested = False
        self._parent_sentinel: int | None = None
        self._watched: list[Any] | None = None

    def __call__(self, item: object) -> bool:
        try:
            if item is END_OF_STREAM or type(item) is CarriedException:
                self._send(item)
            else:
                self._send_batch(item)  # type: ignore[arg-type]
        except _Stopped:
            return False
        return True

    def close(self) -> None:
        self._segments.close()
        self._messages.close()
        self._slots.close()

    def _send(self, message: object) -> None:
        try:
            self._messages.send(message)
        except OSError:
            raise _Stopped from None  # the parent has closed its end

    def _send_batch(self, columns: list[Column]) -> None:
        plan = plan_batch(columns)
        slot = self._acquire(plan.nbytes)
        write_batch(self._segments.buffer(slot), plan)
        self._send(BatchReady(slot.index, plan.specs))

    def _acquire(self, nbytes: int) -> Slot:
        if not self._requested:
            self._send(RingRequest(nbytes))
            self._requested = True
        while self._slots.poll():
            self._free.append(self._receive())
        slot = self._free.popleft() if self._free else self._receive()
        if slot.size < nbytes:
            self._send(GrowRequest(slot.index, nbytes))
            slot = self._receive_slot(slot.index)
        return slot

    def _receive_slot(self, index: int) -> Slot:
        while (slot := self._receive()).index != index:
            self._free.append(slot)
        return slot

    def _receive(self) -> Slot:
        """The next slot from the parent; raises :class:`_Stopped` on a stop request or the parent's death."""
        if self._watched is None:
            parent = multiprocessing.parent_process()
            self._parent_sentinel = None if parent is None else parent.sentinel
            self._watched = [self._slots] if parent is None else [self._slots, parent.sentinel]
        while not self._slots.poll():
            if self._parent_sentinel in wait(self._watched, timeout=POLL_SECONDS):
                raise _Stopped  # the parent exited
        try:
            message = self._slots.recv()
        except (EOFError, OSError):
            raise _Stopped from None
        if isinstance(message, Stop):
            raise _Stopped
        return message
