"""One epoch of a DataLoader, and the prefetch thread that feeds it by default.

An epoch is an iterator that owns its thread (here) or worker process (:mod:`datamount.readers._worker`).
Whatever ends it (the last batch, an error, ``close()``, ``break`` dropping the last reference, interpreter
exit), one ``weakref.finalize`` stops and joins what it owns. The thread and the process never hold a
reference to the epoch object, so dropping it is enough to trigger the cleanup.
"""

from __future__ import annotations

import queue
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from datamount.readers._collate import Column
from datamount.readers.workers import POLL_SECONDS, close_iterator, put_until_stopped

THREAD_NAME = "datamount-dataloader-prefetch"
# A reader stuck inside one item (a hung network read) cannot be interrupted; close() waits this long for it.
_THREAD_JOIN_SECONDS = 30.0

BatchSource = Callable[[], Iterator[list[Column]]]
Formatter = Callable[[list[Column]], Any]


@dataclass(frozen=True)
class EndOfEpoch:
    """Sent after the last batch; recognised with ``isinstance`` (a worker's copy is another object)."""


END_OF_EPOCH = EndOfEpoch()


@dataclass(frozen=True, eq=False)
class ThreadFailure:
    """The reader raised in the prefetch thread; the consumer raises it again, traceback intact."""

    exception: BaseException


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
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=capacity)
        stop = threading.Event()
        # daemon only so that a reader stuck in I/O cannot block interpreter exit; close() always joins.
        args = (source, self._queue, stop)
        self._thread = threading.Thread(target=_produce, args=args, name=THREAD_NAME, daemon=True)
        self._thread.start()
        self._finalizer = weakref.finalize(self, _stop_thread, self._thread, self._queue, stop)

    def _next_columns(self) -> list[Column]:
        item = self._receive()
        if item is END_OF_EPOCH:
            raise StopIteration
        if type(item) is ThreadFailure:
            raise item.exception
        return item

    def _receive(self) -> Any:
        while True:
            try:
                return self._queue.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise RuntimeError("the DataLoader prefetch thread ended before the epoch did") from None


def _produce(source: BatchSource, channel: queue.Queue[Any], stop: threading.Event) -> None:
    """Thread body: put every batch of ``source`` into ``channel``, then the end marker or the failure."""
    try:
        iterator = iter(source())
        try:
            for columns in iterator:
                if not put_until_stopped(channel, columns, stop):
                    return
        finally:
            close_iterator(iterator)
    except BaseException as exc:
        put_until_stopped(channel, ThreadFailure(exc), stop)
        return
    put_until_stopped(channel, END_OF_EPOCH, stop)


def _drain(channel: queue.Queue[Any]) -> None:
    while True:
        try:
            channel.get_nowait()
        except queue.Empty:
            return


def _stop_thread(thread: threading.Thread, channel: queue.Queue[Any], stop: threading.Event) -> None:
    stop.set()
    _drain(channel)  # the prefetched batches can be large; free them now
    if thread is threading.current_thread():
        return  # garbage collection ran inside the reader; the thread ends by itself once it sees ``stop``
    thread.join(timeout=_THREAD_JOIN_SECONDS)
    if thread.is_alive():
        warnings.warn(
            f"the DataLoader prefetch thread is still inside the reader {_THREAD_JOIN_SECONDS:.0f} s after "
            "close(); it will stop after the reader's current item",
            RuntimeWarning,
            stacklevel=2,
        )
    _drain(channel)
