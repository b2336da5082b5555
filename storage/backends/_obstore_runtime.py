"""obstore's runtime (the Rust threads that make its requests) and this process's life: where it may be used, and an
end that waits for it.

obstore's runtime does not survive ``fork()``: once a process has made a request through it, no obstore client works
in a process forked from it (every call hangs). :func:`usable_here` says whether this process may use one.

A runtime thread hands each answer to the event loop itself, taking the GIL to do it. On Python before 3.14 a thread
that wants the GIL while the interpreter is ending is made to exit, and for a thread Python did not start that
aborts the whole process: SIGABRT (exit code -6, 134 in a shell) after the script's work is done. So every obstore
request is awaited through :func:`answer`, which counts it until its answer has been handed over, and at exit the
interpreter waits until none is outstanding and no runtime thread is still inside Python (at most
:data:`EXIT_WAIT` seconds).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

R = TypeVar("R")

log = logging.getLogger(__name__)

#: Seconds an ending interpreter waits for obstore's outstanding requests to be answered, and after which it says so.
EXIT_WAIT = 30.0
EXIT_NOTICE = 1.0
#: Seconds it then waits, at most, for threads it did not start to leave Python code (an answer's hand-over takes
#: microseconds; a thread of another library may run Python code for as long as it likes).
HANDOVER_WAIT = 1.0

#: The process whose obstore runtime has started (``None``: none has, in this process or the one it was forked from).
_started_in: int | None = None
#: Requests sent through the runtime whose answer has not yet been handed to the event loop.
_outstanding: set[asyncio.Future[Any]] = set()


def usable_here() -> bool:
    """Whether this process can use obstore: it has not been forked from a process whose obstore runtime had
    started (that runtime's threads are gone in the child, and every request would wait for them forever)."""
    return _started_in in (None, os.getpid())


async def answer(request: Awaitable[R]) -> R:
    """Await one obstore request. It is counted until answered, and runs to its answer even if the caller is
    cancelled (a runtime thread still takes the GIL to hand over a cancelled request's end); the failure of a request
    whose caller was cancelled (a pass closed with reads in flight) is nobody's to raise, and is not logged."""
    global _started_in
    _started_in = os.getpid()
    future = asyncio.ensure_future(request)
    _outstanding.add(future)
    future.add_done_callback(_outstanding.discard)
    future.add_done_callback(_taken)
    return await asyncio.shield(future)


def _taken(future: asyncio.Future[Any]) -> None:
    """Take ``future``'s failure, if any, so that asyncio does not log it as never retrieved: a caller still waiting
    gets it through the shield all the same."""
    if not future.cancelled():
        future.exception()


async def each(stream: AsyncIterator[R]) -> AsyncIterator[R]:
    """The items of an obstore stream (a listing's pages), each awaited through :func:`answer`."""
    while True:
        try:
            item = await answer(anext(stream))
        except StopAsyncIteration:
            return
        yield item


def _runtime_threads_in_python() -> int:
    """How many threads Python did not start are running Python code now (an obstore thread handing over an answer,
    or asking a credential provider for keys)."""
    started_by_python = {
        thread.ident for thread in threading.enumerate() if not isinstance(thread, threading._DummyThread)
    }
    return sum(ident not in started_by_python for ident in sys._current_frames())


def _wait_for_the_runtime() -> None:
    """At exit: until every obstore request of this process has been answered (saying so when that takes more than
    :data:`EXIT_NOTICE` seconds; a Ctrl-C stops the wait), then until the runtime's threads have handed over the last
    answers (a moment; at most :data:`HANDOVER_WAIT` seconds, in case a thread of another library runs Python code)."""
    if _started_in != os.getpid():
        return
    started = time.monotonic()
    told = False
    try:
        while _outstanding:
            waited = time.monotonic() - started
            if waited > EXIT_WAIT:
                log.warning("%d S3 requests unanswered after %g s; exiting without them", len(_outstanding), waited)
                return
            if not told and waited > EXIT_NOTICE:
                log.warning(
                    "waiting for %d S3 requests in flight to end before exiting (at most %g s; Ctrl-C stops waiting)",
                    len(_outstanding),
                    EXIT_WAIT,
                )
                told = True
            time.sleep(0.001)  # lets a runtime thread take the GIL and hand over an answer
        handed_over = time.monotonic() + HANDOVER_WAIT
        while _runtime_threads_in_python() and time.monotonic() < handed_over:
            time.sleep(0.001)
    except KeyboardInterrupt:
        return


atexit.register(_wait_for_the_runtime)
os.register_at_fork(after_in_child=_outstanding.clear)  # the parent's requests are not this process's to wait for
