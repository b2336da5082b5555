"""A process that used an S3 store through obstore ends with its own exit code, never killed by obstore's threads.

obstore answers each request from one of its runtime's threads, which takes the GIL to hand the answer to the
event loop. On Python before 3.14, a thread that wants the GIL while the interpreter is ending is made to exit
(``pthread_exit``), and the unwind through obstore's frames aborts the process: exit code -6 (SIGABRT) after the
script's work is done. These tests hold obstore's thread (or an answer) at the point where the race opens, so it
is lost every time rather than one run in five on a busy machine.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from datamount.storage import Store
from tests.servers.fault_proxy import Fault, FaultProxy, FaultProxyFactory
from tests.servers.moto import S3Server

pytestmark = pytest.mark.s3

#: Slows obstore's runtime thread down right after it has woken the event loop with an answer: the answer is used
#: and the script ends while that thread still has to take the GIL back to return.
_LINGER_AFTER_WAKING_THE_LOOP = """
import threading, time
from asyncio import selector_events

wake = selector_events.BaseSelectorEventLoop._write_to_self

def wake_then_linger(loop):
    wake(loop)
    if threading.get_ident() not in {thread.ident for thread in threading.enumerate()}:
        time.sleep(0.3)

selector_events.BaseSelectorEventLoop._write_to_self = wake_then_linger
"""

_READ_ONE = """
import sys
from datamount.storage import open_store
store = open_store(sys.argv[1], endpoint_url=sys.argv[2])
print(store.read("blobs/00").decode())
"""

#: Ctrl-C as in a terminal: a process started with SIGINT ignored (as a shell starts a background job, which pytest
#: may be) passes that on to its children, whose Python then never turns SIGINT into a KeyboardInterrupt.
_CTRL_C_AS_IN_A_TERMINAL = """
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
"""

#: Reads the first of several objects and ends while the others are still on their way.
_READ_THE_FIRST_OF_MANY = """
import sys
from datamount.storage import open_store
store = open_store(sys.argv[1], endpoint_url=sys.argv[2])
reads = store.read_many([f"blobs/{i:02d}" for i in range(8)], max_requests=8)
print(bytes(next(reads)).decode(), flush=True)
"""

#: A slow teardown (as of a large framework's modules): the interpreter is still ending when late answers come.
_SLOW_TEARDOWN = """
import time

class SlowTeardown:
    def __del__(self):
        time.sleep(1.0)

teardown = SlowTeardown()
"""


def _run(script: str, store: Store, endpoint_url: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script, store.url, endpoint_url], env=dict(os.environ), capture_output=True, text=True
    )
    return done, time.monotonic() - started


def _all_but_the_first_blob(proxy: FaultProxy, fault: Fault) -> FaultProxy:
    """``proxy``, with ``fault`` on the reads of every blob but the first."""
    for i in range(1, 8):
        proxy.inject(fault, methods={"GET"}, containing=f"blobs/{i:02d}")
    return proxy


@pytest.fixture
def blobs(s3_store: Store) -> Store:
    for i in range(8):
        s3_store.write(f"blobs/{i:02d}", f"payload {i}".encode())
    return s3_store


@pytest.mark.timeout(60)
def test_a_script_ends_cleanly_while_obstore_hands_over_its_last_answer(blobs: Store, s3_server: S3Server) -> None:
    for _ in range(3):
        done, _ = _run(_LINGER_AFTER_WAKING_THE_LOOP + _READ_ONE, blobs, s3_server.endpoint_url)
        assert (done.returncode, done.stdout) == (0, "payload 0\n"), done.stderr


@pytest.mark.timeout(60)
def test_a_script_ends_cleanly_with_reads_still_in_flight(
    blobs: Store, s3_server: S3Server, fault_proxy: FaultProxyFactory
) -> None:
    proxy = _all_but_the_first_blob(fault_proxy(s3_server.endpoint_url), Fault.delay(0.4))
    done, seconds = _run(_SLOW_TEARDOWN + _READ_THE_FIRST_OF_MANY, blobs, proxy.endpoint_url)
    assert (done.returncode, done.stdout) == (0, "payload 0\n"), done.stderr
    assert seconds < 10, f"the script took {seconds:.1f} s to end"


@pytest.mark.timeout(60)
def test_an_end_waiting_for_stalled_reads_says_so_and_ctrl_c_stops_it(
    blobs: Store, s3_server: S3Server, fault_proxy: FaultProxyFactory
) -> None:
    proxy = _all_but_the_first_blob(fault_proxy(s3_server.endpoint_url), Fault.stall())
    command = [sys.executable, "-c", _CTRL_C_AS_IN_A_TERMINAL + _READ_THE_FIRST_OF_MANY, blobs.url, proxy.endpoint_url]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None and child.stderr is not None
        assert child.stdout.readline() == "payload 0\n"
        notice = child.stderr.readline()  # about a second after the script's end
        assert re.search(r"waiting for [1-7] S3 requests in flight to end before exiting \(at most 30 s", notice), (
            notice
        )
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=10) == 0
        assert child.stderr.read() == ""  # no traceback
