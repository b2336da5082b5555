"""Thread pools owned by generators (``storage/pools.py``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from datamount.storage.pools import generator_pool


def test_a_started_pool_has_all_its_threads_before_any_task() -> None:
    with generator_pool(5, "datamount-test-started", started=True) as pool:
        names = [t.name for t in threading.enumerate() if t.name.startswith("datamount-test-started")]
        assert len(names) == 5
        assert pool.submit(lambda: threading.current_thread().name).result() in names
    assert not [t for t in threading.enumerate() if t.name.startswith("datamount-test-started")]


def test_a_pool_whose_threads_cannot_all_start_raises_and_leaves_none_waiting() -> None:
    """Each thread's stack is 256 MiB and the address space has room for two: the third cannot start. The two
    started, waiting for the others, end with the pool."""
    script = textwrap.dedent(
        """
        import resource, threading
        from datamount.storage.pools import generator_pool
        threading.stack_size(256 << 20)
        size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size + (600 << 20), resource.RLIM_INFINITY))
        try:
            with generator_pool(8, "datamount-test", started=True):
                raise SystemExit("every thread started")
        except RuntimeError as exc:
            print(exc)
        print(len(threading.enumerate()))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["can't start new thread", "1"]


def test_a_generator_finalized_in_one_of_its_own_threads_ends_without_joining_it() -> None:
    """The collector may finalize an abandoned generator in any thread, one of its own pool's included: its pool is
    then shut down without joining that thread (``cannot join current thread`` before)."""

    def body() -> Iterator[ThreadPoolExecutor]:
        with generator_pool(2, "datamount-test-own") as pool:
            yield pool

    abandoned = body()
    pool = next(abandoned)
    holder = [abandoned]
    del abandoned
    pool.submit(lambda: holder.pop().close()).result(timeout=30)  # the last reference dropped in a pool thread
    assert not holder
