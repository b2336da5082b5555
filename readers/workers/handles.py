"""The consumer's handle on one worker, a thread or a process: is it alive, how did it end, what to call it."""

from __future__ import annotations

import signal
import threading
from multiprocessing.process import BaseProcess

from datamount.readers.errors import WorkerDiedError

#: How long a worker gets to stop by itself (running its reader's ``finally`` blocks) before it is terminated, and
#: how long an exit status may lag behind the end of the worker's pipe.
GRACE_SECONDS = 2.0

#: Signals that usually have one cause, told to the user with the worker's death.
_SIGNAL_HINTS = {
    "SIGKILL": " (often the kernel's out-of-memory killer)",
    "SIGBUS": " (often /dev/shm running out of space)",
}


class ThreadHandle:
    """A worker thread; ``label`` names it in errors (``"buffered() thread"``)."""

    sentinel = None

    def __init__(self, thread: threading.Thread, label: str) -> None:
        self.runner = thread
        self.label = label

    def is_alive(self) -> bool:
        return self.runner.is_alive()

    @property
    def failed(self) -> bool:
        """A thread has no exit status: whether it failed shows only in what it sent."""
        return False

    def describe(self) -> str:
        return f"{self.label} ended"


class ProcessHandle:
    """A worker process; ``label`` names it in errors (``"the DataLoader worker process"``)."""

    def __init__(self, process: BaseProcess, label: str) -> None:
        self.runner = process
        self.label = label
        self.sentinel = process.sentinel
        self.pid = process.pid

    def is_alive(self) -> bool:
        return self.runner.is_alive()

    @property
    def failed(self) -> bool:
        """True once the process has ended with a non-zero exit code or by a signal."""
        return self.runner.exitcode not in (None, 0)

    def describe(self) -> str:
        self.runner.join(timeout=GRACE_SECONDS)  # the pipe's EOF can come a moment before the exit status
        return f"{self.label} (pid {self.pid}) {exit_description(self.runner)}"


WorkerHandle = ThreadHandle | ProcessHandle


def worker_died(worker: WorkerHandle, task: str) -> WorkerDiedError:
    """The error for ``worker`` ending before ``task`` (``"the end of the epoch"``), with its exit status."""
    return WorkerDiedError(f"{worker.describe()} before {task}")


def exit_description(process: BaseProcess) -> str:
    """How ``process`` ended, for an error message: its exit code, or the signal that killed it and why."""
    code = process.exitcode
    if code is None:
        return "closed its pipe but is still running"
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = str(-code)
    return f"was killed by signal {name}{_SIGNAL_HINTS.get(name, '')}"
