"""Thread pools owned by generators: joined when the generator ends, never joined where joining can deadlock."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor


@contextlib.contextmanager
def generator_pool(workers: int, name: str, *, started: bool = False) -> Iterator[ThreadPoolExecutor]:
    """A thread pool for the body of a generator, its threads named ``name``; with ``started``, all of them started
    before it is handed out (by default each starts with the first task it is needed for).

    ``started`` is for a pool whose later tasks are submitted on a latency-critical path while its first ones run:
    ``Thread.start`` waits until the new thread holds the GIL, which a busy thread lets go only every switch interval
    (5 ms), so starting threads there costs up to that much each; here, before any task, they start in ~0.1 ms each.

    When the generator ends, fails or is closed, the pool's queued work is cancelled and its threads are joined,
    except where a join would deadlock: CPython 3.11/3.12's ``Thread.join`` takes threading's shutdown lock, and the
    garbage collector may finalize an abandoned generator in a thread that holds that lock (a thread starting up).
    There the threads are left to finish their current task and exit on their own.
    """
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
    try:
        if started:
            _start_all(pool, workers)
        yield pool
    finally:
        # Not joined from one of its own threads either: the collector may finalize the generator in one of them.
        own_thread = threading.current_thread().name.startswith(f"{name}_")
        pool.shutdown(wait=_joining_is_safe() and not own_thread, cancel_futures=True)


def _start_all(pool: ThreadPoolExecutor, workers: int) -> None:
    """Start every thread of ``pool`` (``workers`` of them): one task each that waits for all the others to be taken,
    so that none is taken by a thread already started."""
    all_taken = threading.Barrier(workers + 1)
    try:
        for _ in range(workers):
            pool.submit(all_taken.wait)
        all_taken.wait()
    except BaseException:  # a thread that could not start, an interrupt: the tasks taken end rather than wait on
        all_taken.abort()
        raise


def _joining_is_safe() -> bool:
    """Whether this thread may join threads: it does not hold threading's shutdown lock (Pythons before 3.13)."""
    lock = getattr(threading, "_shutdown_locks_lock", None)
    if lock is None:
        return True
    if not lock.acquire(blocking=False):
        return False  # held here (a finalizer run by the collector) or, for an instant, by a thread starting up
    lock.release()
    return True
