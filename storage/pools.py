"""Thread pools owned by generators: joined when the generator ends, never joined where joining can deadlock."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor


@contextlib.contextmanager
def generator_pool(workers: int, name: str) -> Iterator[ThreadPoolExecutor]:
    """A thread pool for the body of a generator, its threads named ``name``.

    When the generator ends, fails or is closed, the pool's queued work is cancelled and its threads are joined,
    except where a join would deadlock: CPython 3.11/3.12's ``Thread.join`` takes threading's shutdown lock, and the
    garbage collector may finalize an abandoned generator in a thread that holds that lock (a thread starting up).
    There the threads are left to finish their current task and exit on their own.
    """
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
    try:
        yield pool
    finally:
        pool.shutdown(wait=_joining_is_safe(), cancel_futures=True)


def _joining_is_safe() -> bool:
    """Whether this thread may join threads: it does not hold threading's shutdown lock (Pythons before 3.13)."""
    lock = getattr(threading, "_shutdown_locks_lock", None)
    if lock is None:
        return True
    if not lock.acquire(blocking=False):
        return False  # held here (a finalizer run by the collector) or, for an instant, by a thread starting up
    lock.release()
    return True
