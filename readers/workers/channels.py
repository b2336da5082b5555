"""How items travel from workers to their consumer: the worker's side (a put or a send that gives up once the
consumer asks it to stop) and the consumer's (an :class:`Inbox`, the one wait that never hangs on a dead worker).

Three transports, each a sender and an inbox: a ``queue.Queue`` between threads; one pipe per worker process; and
one ``multiprocessing.Queue`` shared by worker processes, whose items are pickled in the worker and tagged with its
number. Every blocking call wakes at least every :data:`POLL_SECONDS`.
"""

from __future__ import annotations

import functools
import os
import pickle
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.reduction import ForkingPickler
from typing import Any, Protocol, cast

from datamount.readers.workers.carried import END_OF_STREAM, CarriedException
from datamount.readers.workers.handles import WorkerHandle, worker_died


def _memoryview_as_bytes(view: memoryview) -> tuple[type[bytes], tuple[bytes]]:
    return bytes, (view.tobytes(),)


# A zero-copy reader's values are memoryviews into its row groups; sent to another process, they arrive as bytes.
ForkingPickler.register(memoryview, _memoryview_as_bytes)

#: How often a blocked put or get wakes up to check whether it should stop, or whether its workers are alive.
POLL_SECONDS = 0.1


class StopFlag(Protocol):
    """A ``threading.Event``, a ``multiprocessing`` event, or anything else that tells a worker to stop."""

    def is_set(self) -> bool: ...


class Sender(Protocol):
    """A worker process's ``emit``: what it holds of the transport is released by ``close()`` when the worker ends.

    ``ends`` are the pipe ends it owns: the parent closes its copies once the worker has started, so that the
    worker's death reads as the end of the pipe.
    """

    @property
    def ends(self) -> tuple[Connection, ...]: ...

    def __call__(self, item: object) -> bool: ...

    def close(self) -> None: ...


class StopSignal(StopFlag, Protocol):
    """The consumer's side of a :class:`StopFlag`: ``set()`` tells the workers to stop."""

    def set(self) -> None: ...


def put_until_stopped(channel: Any, item: object, stop: StopFlag) -> bool:
    """Put ``item``, waiting while ``channel`` is full; False once ``stop`` is set (the consumer is gone)."""
    while not stop.is_set():
        try:
            channel.put(item, timeout=POLL_SECONDS)
            return True
        except queue.Full:
            pass
    return False


def acquire_until_stopped(semaphore: threading.Semaphore, stop: StopFlag) -> bool:
    """Acquire ``semaphore``, waiting while it is taken; False once ``stop`` is set."""
    while not stop.is_set():
        if semaphore.acquire(timeout=POLL_SECONDS):
            return True
    return False


def get_until_stopped(channel: queue.Queue[Any], stop: StopFlag) -> Any:
    """Take an item, waiting while ``channel`` is empty; :data:`END_OF_STREAM` once ``stop`` is set."""
    while not stop.is_set():
        try:
            return channel.get(timeout=POLL_SECONDS)
        except queue.Empty:
            pass
    return END_OF_STREAM


# ----------------------------------------------------------------------------------------- the workers' side


class QueueSender:
    """Emit into a ``queue.Queue`` read by the consumer thread (a worker thread's ``emit``)."""

    def __init__(self, channel: queue.Queue[Any], stop: StopFlag) -> None:
        self.channel = channel
        self.stop = stop

    def __call__(self, item: object) -> bool:
        return put_until_stopped(self.channel, item, self.stop)


class PipeSender:
    """Emit down the write end of a pipe (a worker process's ``emit``); pickling errors propagate."""

    def __init__(self, conn: Connection, stop: StopFlag) -> None:
        self.conn = conn
        self.stop = stop
        self.ends: tuple[Connection, ...] = (conn,)

    def __call__(self, item: object) -> bool:
        if self.stop.is_set():
            return False
        try:
            self.conn.send(item)
        except (BrokenPipeError, ConnectionResetError):
            return False  # the consumer has closed its end
        return True

    def close(self) -> None:
        self.conn.close()


class ProcessQueueSender:
    """Emit into a ``multiprocessing.Queue`` shared by several worker processes, as ``(sender, pickled item)``.

    Items are pickled here, not in the queue's feeder thread, so that an unpicklable item is reported to the consumer
    instead of being printed and dropped. It stops when ``stop`` is set or the parent process has gone.
    """

    ends: tuple[Connection, ...] = ()

    def __init__(self, channel: Any, stop: StopFlag, sender: int) -> None:
        self.channel = channel
        self.stop = stop
        self.sender = sender
        self._parent: int | None = None  # the worker's parent process, as the worker first sees it

    def is_set(self) -> bool:
        if self._parent is None:
            self._parent = os.getppid()
        return self.stop.is_set() or os.getppid() != self._parent

    def __call__(self, item: object) -> bool:
        payload = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
        return put_until_stopped(self.channel, (self.sender, payload), self)

    def close(self) -> None:
        if self.is_set():
            # Nobody reads the queue any more: exit without waiting to flush it.
            self.channel.cancel_join_thread()


# ---------------------------------------------------------------------------------------- the consumer's side


class Inbox:
    """What the watched workers send, in arrival order, until each has sent :data:`END_OF_STREAM`.

    The one rule for a worker that is gone: it is an error (:class:`~datamount.readers.errors.WorkerDiedError`
    ending in ``before {task}``) when it ends before its end marker arrives. Its pipe ending says so at once; a
    non-zero exit status says so at the next look at the workers (whenever a wait of :data:`POLL_SECONDS` finds
    nothing, and on a shared process queue every :data:`POLL_SECONDS` while it is busy); an exit without an error
    says so when the inbox has found nothing waiting after seeing the worker ended, since until then its end marker
    could still have been on its way. Subclasses provide the transport.
    """

    def __init__(self, task: str) -> None:
        self.task = task
        self.senders: list[WorkerHandle] = []
        self._running = 0  # senders whose end marker has not arrived
        self._last_sender: int | None = None  # who sent the item taken last, where the transport tells
        self._ended: set[int] = set()
        # End markers that do not say who sent them (several threads sharing one untagged queue).
        self._unnamed_ends = 0
        self._suspects: set[int] = set()

    def watch(self, worker: WorkerHandle, conn: Connection | None = None) -> int:
        """Expect items and an end marker from ``worker``; returns its sender number."""
        self.senders.append(worker)
        self._running += 1
        return len(self.senders) - 1

    def items(
        self, start: Callable[[], object] | None = None, finish: Callable[[], object] | None = None
    ) -> Iterator[Any]:
        """The items, end markers left out; a carried exception is raised when it arrives.

        ``start`` runs on the first ``next()``, ``finish`` when the iteration ends, fails, is closed or collected, so
        that a generator over a crew can be this one generator (each generator around it costs every item a frame).
        """
        try:
            if start is not None:
                start()
            take = self._taker()
            while self._running:
                try:
                    item = take(POLL_SECONDS)
                except queue.Empty:
                    self._check_senders(idle=True)
                    continue
                if item is END_OF_STREAM:
                    self._running -= 1
                    if self._last_sender is None:
                        self._unnamed_ends += 1
                    else:
                        self._ended.add(self._last_sender)
                    continue
                if type(item) is CarriedException:
                    item.reraise()
                yield item
        finally:
            if finish is not None:
                finish()

    def _check_senders(self, *, idle: bool) -> None:
        senders = self.senders
        gone = [index for index, worker in enumerate(senders) if index not in self._ended and not worker.is_alive()]
        if len(gone) <= self._unnamed_ends:  # each may be one whose end marker has arrived
            self._suspects.clear()
            return
        for index in gone:
            if senders[index].failed:
                raise worker_died(senders[index], self.task)
        if idle and (late := self._suspects.intersection(gone)):
            raise worker_died(senders[min(late)], self.task)
        self._suspects = set(gone)

    def open_sender(self, context: BaseContext, stop: StopFlag) -> tuple[Sender, Connection | None]:
        """The ``emit`` of the next worker process to be watched, and the read end of its pipe if it has one."""
        raise TypeError(f"worker processes cannot send to a {type(self).__name__}")

    def _take(self, timeout: float) -> Any:
        """The next item, its sender in ``_last_sender`` (None if the transport cannot tell); raises ``queue.Empty``
        when nothing came within ``timeout``."""
        raise NotImplementedError

    def _taker(self) -> Callable[[float], Any]:
        return self._take

    def waitables(self) -> list[Any]:
        """What ``multiprocessing.connection.wait`` can watch for items while the workers are stopping."""
        return []

    def drain(self) -> None:
        """Drop what has been sent, without blocking, so that no worker stays blocked sending it."""

    def close(self) -> None:
        """Release the transport; the workers have been joined."""


class QueueInbox(Inbox):
    """A ``queue.Queue`` that worker threads put into."""

    def __init__(self, channel: queue.Queue[Any], task: str) -> None:
        super().__init__(task)
        self.channel = channel

    def watch(self, worker: WorkerHandle, conn: Connection | None = None) -> int:
        sender = super().watch(worker)
        self._last_sender = 0 if len(self.senders) == 1 else None  # an untagged item names its sender if alone
        return sender

    def _taker(self) -> Callable[[float], Any]:
        # The queue's own get, with no frame of ours around it: this is the path of every item.
        return functools.partial(self.channel.get, True)

    def drain(self) -> None:
        while True:
            try:
                self.channel.get_nowait()
            except queue.Empty:
                return

    def close(self) -> None:
        self.drain()  # the items can be large batches; free them now


class ProcessQueueInbox(Inbox):
    """A ``multiprocessing.Queue`` that :class:`ProcessQueueSender` workers put into."""

    def __init__(self, channel: Any, task: str) -> None:
        super().__init__(task)
        self.channel = channel
        self._check_at = time.monotonic() + POLL_SECONDS

    def open_sender(self, context: BaseContext, stop: StopFlag) -> tuple[Sender, Connection | None]:
        return ProcessQueueSender(self.channel, stop, len(self.senders)), None

    def _take(self, timeout: float) -> Any:
        # The other workers may keep the queue busy: look at the exit statuses while it is, too.
        if time.monotonic() >= self._check_at:
            self._check_senders(idle=False)
            self._check_at = time.monotonic() + POLL_SECONDS
        sender, payload = self.channel.get(timeout=timeout)
        self._last_sender = sender
        return pickle.loads(payload)

    def close(self) -> None:
        self.channel.close()
        self.channel.join_thread()


class PipeInbox(Inbox):
    """One pipe per worker process; a pipe that ends before its end marker means the worker died."""

    def __init__(self, task: str) -> None:
        super().__init__(task)
        self._conns: list[Connection] = []
        self._open: dict[Connection, int] = {}  # pipes not yet at their end marker, and their senders
        self._ready: deque[Connection] = deque()

    def watch(self, worker: WorkerHandle, conn: Connection | None = None) -> int:
        if conn is None:
            raise TypeError("a PipeInbox watches a worker together with the read end of its pipe")
        sender = super().watch(worker)
        self._conns.append(conn)
        self._open[conn] = sender
        return sender

    def open_sender(self, context: BaseContext, stop: StopFlag) -> tuple[Sender, Connection | None]:
        receiver, conn = context.Pipe(duplex=False)
        return PipeSender(conn, stop), receiver

    def _take(self, timeout: float) -> Any:
        if not self._ready:
            # One look at every pipe gives an item from each that has one; in the steady state all have, and the
            # workers' exits need watching only when none has.
            self._ready.extend(cast("list[Connection]", wait(list(self._open), timeout=0)))
            if not self._ready:
                sentinels = [self.senders[sender].sentinel for sender in self._open.values()]
                ready = wait([*self._open, *sentinels], timeout=timeout)
                self._ready.extend(conn for conn in ready if isinstance(conn, Connection))
                if not self._ready:
                    raise queue.Empty  # the wait timed out, or a worker ended: _check_senders looks at it
        conn = self._ready.popleft()
        sender = self._open[conn]
        try:
            item = conn.recv()
        except (EOFError, OSError):
            raise worker_died(self.senders[sender], self.task) from None
        if item is END_OF_STREAM:
            del self._open[conn]
        self._last_sender = sender
        return item

    def waitables(self) -> list[Any]:
        return [conn for conn in self._conns if not conn.closed]

    def drain(self) -> None:
        for conn in self._conns:
            try:
                while not conn.closed and conn.poll():
                    conn.recv_bytes()
            except (EOFError, OSError):
                conn.close()

    def close(self) -> None:
        for conn in self._conns:
            conn.close()
