"""A process that read through ``datamount://`` exits only once no read of it is under way.

pyarrow's datasets read a Python filesystem from threads of their own, which may still be at work (a read that was
not needed in the end, the release of the bytes it returned) when the script's last line has run. If the interpreter
is finalised meanwhile, such a thread cannot take the GIL again and the process aborts at exit ("terminate called
without an active exception", apache/arrow#34314, #45214), after all its output. So every call into the filesystem
is counted, and at exit the interpreter waits (at most :data:`LIMIT` seconds) until none is under way and the last
one ended :data:`QUIET` seconds ago: those threads then finish while Python can still serve them.
"""

from __future__ import annotations

import atexit
import functools
import threading
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

#: Seconds without a call into the filesystem after which no thread of a reader is taken to be at work.
QUIET = 0.2
#: The longest the interpreter waits at exit.
LIMIT = 5.0

_lock = threading.Lock()
_under_way = 0
_last_ended = 0.0
_registered = False

P = ParamSpec("P")
R = TypeVar("R")


def counted(method: Callable[P, R]) -> Callable[P, R]:
    """``method``, with each of its calls counted as a read under way until it returns."""

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        global _under_way, _last_ended, _registered
        with _lock:
            if not _registered:
                atexit.register(wait_until_quiet)
                _registered = True
            _under_way += 1
        try:
            return method(*args, **kwargs)
        finally:
            with _lock:
                _under_way -= 1
                _last_ended = time.monotonic()

    return call


def wait_until_quiet(quiet: float = QUIET, limit: float = LIMIT) -> None:
    """Wait until no counted call is under way and the last ended ``quiet`` seconds ago, for ``limit`` at most."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        with _lock:
            idle = _under_way == 0 and time.monotonic() - _last_ended >= quiet
        if idle:
            return
        time.sleep(0.01)
