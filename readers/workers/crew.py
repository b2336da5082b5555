"""A crew: the threads or processes working for one consumer, started together and stopped together.

Stopping is one sequence for every crew: set the stop signal (an event, or a stop message for a worker that
listens to a pipe), give the workers :data:`GRACE_SECONDS` to end by themselves while what they send is drained, then
terminate the processes still running, then kill them, and join every worker before the inbox is closed. A thread
cannot be terminated: it is waited for up to :data:`THREAD_JOIN_SECONDS`, then left with a warning.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from typing import Any

from datamount.readers.workers.channels import Inbox, Sender, StopSignal
from datamount.readers.workers.handles import GRACE_SECONDS, ProcessHandle, ThreadHandle, WorkerHandle
from datamount.readers.workers.produce import Emit, produce

#: How long closing waits for a thread that is still inside its reader (a hung network read cannot be interrupted).
THREAD_JOIN_SECONDS = 30.0


class Crew:
    """Workers that send to one :class:`~datamount.readers.workers.channels.Inbox` and share one stop signal.

    Start workers with :meth:`start_thread`, :meth:`start_producer` or :meth:`start_process`; read what they send
    with :meth:`items`; end with :meth:`shutdown`, always (a ``finally`` or a ``weakref.finalize``).
    """

    def __init__(self, inbox: Inbox, stop: StopSignal) -> None:
        self.inbox = inbox
        self.stop = stop
        self.workers: list[WorkerHandle] = []
        self._shut = False

    def start_thread(
        self, target: Callable[..., None], args: tuple[Any, ...], *, name: str, label: str, sends: bool = True
    ) -> ThreadHandle:
        """Start a thread running ``target(*args)``; with ``sends`` the inbox expects its items and end marker."""
        # daemon only so that a reader stuck in I/O cannot block interpreter exit; shutdown() always joins.
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        worker = ThreadHandle(thread, label)
        thread.start()
        self.workers.append(worker)
        if sends:
            self.inbox.watch(worker)
        return worker

    def start_producer(self, source: Callable[[], Iterable[Any]], emit: Emit, *, name: str, label: str) -> ThreadHandle:
        """Start a thread that runs :func:`~datamount.readers.workers.produce.produce` over ``source``."""
        return self.start_thread(produce, (source, emit, label), name=name, label=label)

    def start_process(
        self,
        context: BaseContext,
        target: Callable[..., None],
        args: tuple[Any, ...],
        *,
        name: str,
        label: str,
        reply: Connection | None = None,
        hand_over: Sequence[Connection] = (),
    ) -> ProcessHandle:
        """Start a process running ``target(*args)``; the inbox expects its items (through ``reply``, its pipe, if
        any). ``hand_over`` are pipe ends the process now owns: they are closed here once it has started, so that
        its death reads as the end of the pipe."""
        # daemonic, as torch's DataLoader workers are: the interpreter's exit terminates them instead of waiting.
        process = context.Process(  # type: ignore[attr-defined]
            target=_process_main, args=(target, args), name=name, daemon=True
        )
        try:
            process.start()
        except BaseException:
            if reply is not None:
                reply.close()
            raise
        finally:
            for conn in hand_over:
                conn.close()
        worker = ProcessHandle(process, label)
        self.workers.append(worker)
        self.inbox.watch(worker, reply)
        return worker

    def start_server(
        self, context: BaseContext, source: Callable[[], Iterable[Any]], *, name: str, label: str
    ) -> ProcessHandle:
        """Start a process that runs :func:`serve` over ``source``, sending through the inbox's transport."""
        send, reply = self.inbox.open_sender(context, self.stop)
        args = (source, send, label)
        return self.start_process(context, serve, args, name=name, label=label, reply=reply, hand_over=send.ends)

    def items(self, start: Callable[[], object] | None = None) -> Iterator[Any]:
        """What the workers send, until each has sent its end marker (see :meth:`Inbox.items`); ``start`` runs on the
        first ``next()`` (it starts the workers), and the crew is shut down when the iteration ends however it ends."""
        return self.inbox.items(start, self.shutdown)

    def shutdown(self) -> None:
        """Stop every worker (grace, then terminate, then kill), join them all and close the inbox; idempotent."""
        if self._shut:
            return
        self._shut = True
        try:
            self.stop.set()
            self.inbox.drain()
            current = threading.current_thread()
            processes = [worker for worker in self.workers if isinstance(worker, ProcessHandle)]
            # A thread cannot join itself: garbage collection may run this inside a worker's own reader; that
            # thread ends by itself once it sees the stop signal.
            threads = [w for w in self.workers if isinstance(w, ThreadHandle) and w.runner is not current]
            if processes:
                self._stop_processes(processes)
            if threads:
                self._join_threads(threads)
        finally:
            self.inbox.close()

    def _stop_processes(self, processes: list[ProcessHandle]) -> None:
        self._wait_for_exits(processes, GRACE_SECONDS)
        for worker in processes:
            if worker.is_alive():
                worker.runner.terminate()
        self._wait_for_exits(processes, GRACE_SECONDS)
        for worker in processes:
            if worker.is_alive():
                worker.runner.kill()
            worker.runner.join()
            worker.runner.close()

    def _wait_for_exits(self, processes: list[ProcessHandle], seconds: float) -> None:
        """Wait up to ``seconds`` for the processes to exit, draining the inbox so none stays blocked sending."""
        deadline = time.monotonic() + seconds
        while (alive := [worker for worker in processes if worker.is_alive()]) and (
            remaining := deadline - time.monotonic()
        ) > 0:
            if wait([*self.inbox.waitables(), *(worker.sentinel for worker in alive)], timeout=remaining):
                self.inbox.drain()

    def _join_threads(self, threads: list[ThreadHandle]) -> None:
        deadline = time.monotonic() + THREAD_JOIN_SECONDS
        for worker in threads:
            worker.runner.join(timeout=max(deadline - time.monotonic(), 0.0))
        for worker in threads:
            if worker.is_alive():
                warnings.warn(
                    f"{worker.label} is still inside the reader {THREAD_JOIN_SECONDS:.0f} s after it was asked to "
                    "stop; it will stop after the reader's current item",
                    RuntimeWarning,
                    stacklevel=3,
                )


def _process_main(target: Callable[..., None], args: tuple[Any, ...]) -> None:
    """Entry point of every worker process."""
    # Ctrl-C reaches the whole process group; the parent handles it and stops its workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    target(*args)


def serve(source: Callable[[], Iterable[Any]], send: Sender, label: str) -> None:
    """Worker process body: :func:`~datamount.readers.workers.produce.produce` over ``source`` into ``send``."""
    try:
        produce(source, send, f"{label} (pid {os.getpid()})", carry=Exception)
    finally:
        send.close()
