"""SIGTERM stops a writer as Ctrl-C does: what it was writing is removed on the way out, then the process ends as one
killed by SIGTERM.

By default SIGTERM ends a Python process on the spot: no ``finally`` runs, so a half-written folder or a staged
shard stays. While :func:`sigterm_unwinds` is active, SIGTERM raises :class:`Terminated` where the main thread is
(a wait on a lock, a read or a sleep included: Python runs its handler when the call returns with ``EINTR``), so
every ``finally`` and ``except BaseException`` on the way out runs; once out, the signal is sent again with its
default action, and the process ends as it would have (status -15, 143 in a shell). A second SIGTERM during that
cleanup ends the process at once.

It is taken only where SIGTERM is nobody's yet: in the main thread, while its handler is the default one. A program
that handles SIGTERM itself (a server, a training loop saving a checkpoint) keeps its own handler, and so does
anything inside an outer :func:`sigterm_unwinds`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class Terminated(BaseException):
    """SIGTERM arrived while :func:`sigterm_unwinds` was active. A ``BaseException``, as ``KeyboardInterrupt`` is: no
    ``except Exception`` takes it for a failure to handle and carry on."""


def _raise_terminated(number: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM, during the cleanup, ends the process at once
    raise Terminated(f"stopped by {signal.Signals(number).name}")


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Within this block, SIGTERM unwinds the main thread (:class:`Terminated`) so that what is written can be
    removed; leaving the block with it ends the process by SIGTERM. Does nothing outside the main thread, or where
    SIGTERM already has a handler other than the default."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    except Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        raise  # reached only where the signal is blocked
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
