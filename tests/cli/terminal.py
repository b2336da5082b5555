"""``datamount`` run at a real terminal (a pseudo-terminal), for what it does only there: ask before it removes."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys

#: Seconds to wait for the command to ask, or to end.
WAIT = 60


def answered_at_a_terminal(answer: bytes, *args: str) -> tuple[int, str]:
    """Run ``datamount ARGS`` with a terminal for its input and output, type ``answer`` once it asks a question
    (``[y/N]``), and return its exit status and everything it wrote (the question included)."""
    controller, terminal = pty.openpty()
    command = [sys.executable, "-m", "datamount.cli.main", *args]
    process = subprocess.Popen(command, stdin=terminal, stdout=terminal, stderr=terminal)
    os.close(terminal)
    written = b""
    try:
        written += _read_until(controller, b"[y/N]")
        if b"[y/N]" in written:
            os.write(controller, answer)
        written += _read_until(controller, None)
        return process.wait(timeout=WAIT), written.decode().replace("\r\n", "\n")
    finally:
        os.close(controller)
        if process.poll() is None:
            process.kill()
            process.wait()


def _read_until(controller: int, marker: bytes | None) -> bytes:
    """What the command writes until ``marker`` (or until it closes the terminal, ``None``)."""
    written = b""
    while marker is None or marker not in written:
        ready, _, _ = select.select([controller], [], [], WAIT)
        if not ready:
            raise TimeoutError(f"the command wrote nothing for {WAIT} s after {written!r}")
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: every copy of the terminal is closed, the command has ended
            break
        if not chunk:
            break
        written += chunk
    return written
