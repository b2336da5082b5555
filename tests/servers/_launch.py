"""Starting and stopping server processes for the tests: readiness waits, PID shutdown, log tails, free ports,
buckets for the session's shared stores."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn, Protocol, TypeVar

import pytest

#: Seconds a process gets to exit after SIGTERM before it is killed.
STOP_GRACE = 10.0


#: Set (to anything but "" or "0") where every server must run, as in CI: a server that cannot run then fails its
#: tests instead of skipping them.
REQUIRE_SERVERS_ENV = "DATAMOUNT_REQUIRE_SERVERS"


def cannot_run(what: str, reason: str) -> NoReturn:
    """Skip the tests that need server ``what``, saying ``reason``; fail them where :data:`REQUIRE_SERVERS_ENV` is
    set."""
    message = f"{what} tests cannot run here: {reason}"
    if os.environ.get(REQUIRE_SERVERS_ENV, "") not in ("", "0"):
        pytest.fail(f"{message} (${REQUIRE_SERVERS_ENV} requires every server)", pytrace=False)
    pytest.skip(message)


class ServerStartError(RuntimeError):
    """A test server did not come up; the message names its log files."""


def log_tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of the log at ``path``, indented for an error message ('' when there is none)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    tail = text.rstrip().splitlines()[-lines:]
    return "".join(f"\n    {line}" for line in tail)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie left to an init that never reaps counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def stop_pid(pid: int, *, grace: float = STOP_GRACE) -> bool:
    """SIGTERM ``pid``, SIGKILL it if it is still there after ``grace`` seconds; ``True`` once it is gone."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        if not pid_alive(pid):
            return True
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    return not pid_alive(pid)


def stop_process(process: subprocess.Popen[bytes], *, grace: float = STOP_GRACE) -> int | None:
    """Terminate a child started by the tests, kill it after ``grace`` seconds, and reap it; its exit status."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5.0)
    return process.returncode


def exit_report(process: subprocess.Popen[bytes], log: Path) -> str | None:
    """``None`` while ``process`` runs; once it has exited, its status and the end of its ``log`` (a ``failed`` for
    :func:`wait_until`)."""
    if process.poll() is None:
        return None
    return f"exited with status {process.returncode}; its log {log} ends with:{log_tail(log)}"


def wait_until(ready: Callable[[], bool], *, timeout: float, failed: Callable[[], str | None], what: str) -> None:
    """Poll ``ready`` until it is true; raise :class:`ServerStartError` when ``failed`` names a reason or time is up.

    ``failed`` returns why waiting is pointless (e.g. the process exited, with its log), or ``None``.
    """
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        if ready():
            return
        reason = failed()
        if reason is not None:
            raise ServerStartError(f"{what}: {reason}")
        if time.monotonic() >= deadline:
            raise ServerStartError(f"{what}: not ready within {timeout:g} s")
        time.sleep(delay)
        delay = min(delay * 2, 0.25)


#: Where :func:`free_port` picks ports: below the kernel's range for outgoing connections (32768-60999 on Linux),
#: which would otherwise take a port picked for a server in the seconds before the server binds it (a JVM starts).
PORTS = range(20000, 32768)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on now and no outgoing connection will be given (see
    :data:`PORTS`); one the OS chooses where none of those is free."""
    for port in random.sample(PORTS, 64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def port_in_use(port: int, host: str = "") -> bool:
    """Whether something already listens on ``port`` (on every address when ``host`` is empty)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def can_bind(host: str) -> bool:
    """Whether this machine can listen on the address ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, 0))
        except OSError:
            return False
    return True


def start_daemon(command: list[str], log: Path, *, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ``command`` in its own session (so a ``timeout`` wrapper's process group does not take it down),
    its output appended to ``log``."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True
        )


def environment_path() -> str:
    """``PATH`` with the system folders where daemons live added (a non-login root shell may lack ``sbin``)."""
    folders = os.environ.get("PATH", "").split(os.pathsep)
    extra = [folder for folder in ("/usr/local/sbin", "/usr/sbin", "/sbin") if folder not in folders]
    return os.pathsep.join([*folders, *extra])


class _Stoppable(Protocol):
    def stop(self) -> None: ...


Server = TypeVar("Server", bound=_Stoppable)


def session_server(what: str, why_not: Callable[[], str | None], start: Callable[[], Server]) -> Iterator[Server]:
    """The body of a server's session fixture (``yield from`` it): the server ``start()`` returns, stopped when the
    session ends; the tests skipped (see :func:`cannot_run`) when ``why_not()`` gives a reason."""
    reason = why_not()
    if reason is not None:
        cannot_run(what, reason)
    server = start_on_free_ports(start)
    try:
        yield server
    finally:
        server.stop()


#: Starts of a server whose port was taken between being picked and being bound.
START_ATTEMPTS = 3


def start_on_free_ports(start: Callable[[], Server]) -> Server:
    """``start()``, again (with new ports, as each start picks its own) when a port it picked was taken before the
    server bound it."""
    for _ in range(START_ATTEMPTS - 1):
        try:
            return start()
        except ServerStartError as exc:
            if not any(sign in str(exc) for sign in _PORT_TAKEN):
                raise
    return start()


_PORT_TAKEN = ("Address already in use", "address already in use", "Port in use")


class _MakesBuckets(Protocol):
    def create_bucket(self, name: str) -> None: ...


def shared_bucket(server: _MakesBuckets) -> str:
    """Create a bucket of a new name on ``server``, for a store shared by the session's tests; its name."""
    name = f"datamount-shared-{uuid.uuid4().hex[:12]}"
    server.create_bucket(name)
    return name


class _Serving(Protocol):
    def exited(self) -> int | None: ...

    def stop(self) -> None: ...


def serve_until_stopped(server: _Serving) -> int:
    """Keep ``server`` running until Ctrl-C or until it exits on its own, then stop it (for ``python -m``)."""
    try:
        while server.exited() is None:
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
