"""A private GlusterFS volume mounted through FUSE on loopback, and the ``gluster_server`` / ``gluster_store`` fixtures.

One ``glusterd`` runs from its own copy of ``/etc/glusterfs/glusterd.vol`` whose working and run directories are in
a temporary folder, so the machine's own GlusterFS state is never read or changed. The volume has one brick on
``127.0.0.2`` (glusterd refuses ``localhost`` and ``127.0.0.1`` as brick hosts) and is mounted with
``mount -t glusterfs``. Needs root, ``/dev/fuse``, the Debian packages ``glusterfs-server`` and ``glusterfs-client``,
and a free port 24007 (one glusterd per machine).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from datamount.storage import Store, open_store
from datamount.storage.mounts import read_mounts
from tests.servers._launch import (
    ServerStartError,
    can_bind,
    environment_path,
    log_tail,
    port_in_use,
    session_server,
    start_daemon,
    stop_pid,
    stop_process,
    wait_until,
)

GLUSTERD_VOLFILE = Path("/etc/glusterfs/glusterd.vol")
GLUSTERD_PORT = 24007
BRICK_HOST = "127.0.0.2"
VOLUME = "datamount-test"
#: Where glusterd has every brick process write its log, whatever its working directory.
BRICK_LOG_DIR = Path("/var/log/glusterfs/bricks")
START_TIMEOUT = 60.0
COMMAND_TIMEOUT = 60.0
TOOLS = {"glusterd": "glusterfs-server", "gluster": "glusterfs-server", "mount.glusterfs": "glusterfs-client"}


class GlusterError(RuntimeError):
    """A GlusterFS command failed; the message names the command, its output and the log files."""


def _tool(name: str) -> str | None:
    return shutil.which(name, path=environment_path())


def why_gluster_cannot_run() -> str | None:
    """Why this machine cannot run the GlusterFS tests, or ``None`` when it can."""
    if not sys.platform.startswith("linux"):
        return "GlusterFS mounts need Linux"
    if os.geteuid() != 0:
        return "GlusterFS needs root (glusterd, bricks with trusted.* attributes, a FUSE mount); run the tests as root"
    missing = sorted({package for tool, package in TOOLS.items() if _tool(tool) is None})
    if missing:
        return f"GlusterFS is not installed: apt-get install {' '.join(missing)}"
    if not GLUSTERD_VOLFILE.is_file():
        return f"{GLUSTERD_VOLFILE} is missing (it comes with glusterfs-server)"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist (in a container: --device /dev/fuse --cap-add SYS_ADMIN)"
    if port_in_use(GLUSTERD_PORT):
        reason = f"port {GLUSTERD_PORT} is in use (another glusterd?); only one glusterd can run on a machine"
        stale = [m.target for m in read_mounts() if m.fstype == "fuse.glusterfs" and "datamount-gluster-" in m.target]
        if stale:
            reason += f"; another test session, running or interrupted, has {', '.join(stale)} mounted"
        return reason
    if not can_bind(BRICK_HOST):
        return f"cannot listen on {BRICK_HOST}, the loopback address the brick needs"
    return None


def private_volfile(template: str, work: Path, run: Path) -> str:
    """``template`` (a ``glusterd.vol``) with its working and run directories and CLI socket moved to ours."""
    ours = {"working-directory": work, "run-directory": run, "glusterd-sockfile": run / "glusterd.socket"}
    lines = [line for line in template.splitlines() if line.split()[:2] not in (["option", key] for key in ours)]
    for index, line in enumerate(lines):
        if line.split()[:2] == ["type", "mgmt/glusterd"]:
            lines[index + 1 : index + 1] = [f"    option {key} {value}" for key, value in ours.items()]
            return "\n".join(lines) + "\n"
    raise GlusterError(f"{GLUSTERD_VOLFILE} has no 'type mgmt/glusterd' volume to copy")


@dataclass
class GlusterServer:
    """A private glusterd with one started volume, mounted at :attr:`mount_point`; :meth:`stop` undoes it all."""

    base: Path
    glusterd: subprocess.Popen[bytes] = field(repr=False)
    volume: str = VOLUME
    volume_created: bool = False
    brick_pids: list[int] = field(default_factory=list, repr=False)
    brick_sockets: list[Path] = field(default_factory=list, repr=False)

    @property
    def mount_point(self) -> Path:
        return self.base / "mnt"

    @property
    def brick(self) -> Path:
        return self.base / "brick" / self.volume

    @property
    def log_dir(self) -> Path:
        return self.base / "log"

    @property
    def run_dir(self) -> Path:
        return self.base / "run"

    @property
    def brick_log(self) -> Path:
        return BRICK_LOG_DIR / f"{str(self.brick).strip('/').replace('/', '-')}.log"

    def logs(self) -> str:
        """The log files to read when something fails."""
        return f"glusterd.log, cli.log and mount.log in {self.log_dir}, and {self.brick_log}"

    def gluster(self, *args: str, timeout: float = COMMAND_TIMEOUT) -> str:
        """Run ``gluster ARGS`` against this glusterd; its output, or :class:`GlusterError`."""
        options = [f"--glusterd-sock={self.run_dir / 'glusterd.socket'}", f"--log-file={self.log_dir / 'cli.log'}"]
        command = [_tool("gluster") or "gluster", "--mode=script", *options, *args]
        return self._run(command, f"gluster {' '.join(args)}", timeout=timeout)

    def _run(self, command: list[str], label: str, *, timeout: float = COMMAND_TIMEOUT) -> str:
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise GlusterError(f"'{label}' did not finish within {timeout:g} s; logs: {self.logs()}") from exc
        if done.returncode != 0:
            output = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[0]
            raise GlusterError(f"'{label}' failed (status {done.returncode}): {output}; logs: {self.logs()}")
        return done.stdout

    # -- mounting ------------------------------------------------------------------------------------------------

    def is_mounted(self) -> bool:
        """Whether the volume is mounted at :attr:`mount_point` now."""
        target = str(self.mount_point)
        return any(m.target == target and m.fstype == "fuse.glusterfs" for m in read_mounts())

    def mount(self, *, timeout: float = START_TIMEOUT) -> None:
        """Mount the volume through FUSE and wait until the mount answers."""
        if self.is_mounted():
            return
        source = f"{BRICK_HOST}:/{self.volume}"
        options = f"log-file={self.log_dir / 'mount.log'}"
        command = [_tool("mount") or "mount", "-t", "glusterfs", "-o", options, source, str(self.mount_point)]
        self._run(command, f"mount -t glusterfs {source} {self.mount_point}")

        def ready() -> bool:
            if not self.is_mounted():
                return False
            try:
                os.listdir(self.mount_point)
            except OSError:
                return False
            return True

        wait_until(ready, timeout=timeout, failed=self._glusterd_gone, what=f"mount of {source} at {self.mount_point}")

    def unmount(self) -> None:
        """Unmount the volume (lazily when it is busy); nothing happens when it is not mounted."""
        if not self.is_mounted():
            return
        umount = _tool("umount") or "umount"
        try:
            self._run([umount, str(self.mount_point)], f"umount {self.mount_point}")
        except GlusterError:
            self._run([umount, "-l", str(self.mount_point)], f"umount -l {self.mount_point}")

    # -- life cycle ----------------------------------------------------------------------------------------------

    def _glusterd_gone(self) -> str | None:
        if self.glusterd.poll() is None:
            return None
        log = self.log_dir / "glusterd.log"
        return f"glusterd exited with status {self.glusterd.returncode}; {log} ends with:{log_tail(log)}"

    def _answers(self) -> bool:
        try:
            self.gluster("volume", "list", timeout=10)
        except GlusterError:
            return False
        return True

    def _start_volume(self, timeout: float) -> None:
        wait_until(self._answers, timeout=timeout, failed=self._glusterd_gone, what="glusterd")
        self.brick.parent.mkdir(parents=True)
        # 'force': the brick sits on the root filesystem, which glusterd otherwise refuses.
        self.gluster("volume", "create", self.volume, f"{BRICK_HOST}:{self.brick}", "force")
        self.volume_created = True
        self.gluster("volume", "start", self.volume)
        self._record_bricks()

    def _record_bricks(self) -> None:
        """Note the brick processes (they detach from glusterd) and their sockets, to stop and remove them."""
        for pid_file in (self.run_dir / "vols" / self.volume).glob("*.pid"):
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text().strip())
                self.brick_pids.append(pid)
                arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if b"-S" in arguments:
                    self.brick_sockets.append(Path(os.fsdecode(arguments[arguments.index(b"-S") + 1])))

    def stop(self) -> None:
        """Unmount, stop and delete the volume, stop the brick and glusterd, and remove every file made.

        Every step is tried even when an earlier one fails; :class:`GlusterError` then lists what was left.
        """
        problems = self._teardown(keep_logs=False)
        if problems:
            raise GlusterError("GlusterFS teardown was incomplete: " + "; ".join(problems))

    def _teardown(self, *, keep_logs: bool) -> list[str]:
        """Undo everything, step by step; what could not be undone. With ``keep_logs``, :attr:`log_dir` stays."""
        problems: list[str] = []
        with _noting(problems, "unmount"):
            self.unmount()
        if self.volume_created and self.glusterd.poll() is None:
            with _noting(problems, "volume stop"):
                self.gluster("volume", "stop", self.volume, "force")
            with _noting(problems, "volume delete"):
                self.gluster("volume", "delete", self.volume)
        problems += [f"brick process {pid} is still running" for pid in self.brick_pids if not stop_pid(pid)]
        stop_process(self.glusterd)
        for socket_path in self.brick_sockets:
            with _noting(problems, "remove the brick socket"):
                socket_path.unlink(missing_ok=True)
        with _noting(problems, "keep the brick log"):
            if self.brick_log.exists():
                shutil.move(self.brick_log, self.log_dir / "brick.log")
        if self.is_mounted():
            problems.append(f"{self.mount_point} is still mounted, so {self.base} was left in place")
            return problems
        with _noting(problems, f"remove {self.base}"):
            if keep_logs:
                for leftover in self.base.iterdir():
                    if leftover.is_dir() and leftover != self.log_dir:
                        shutil.rmtree(leftover)
                    elif not leftover.is_dir():
                        leftover.unlink()
            else:
                shutil.rmtree(self.base)
        return problems


@contextlib.contextmanager
def _noting(problems: list[str], step: str) -> Iterator[None]:
    try:
        yield
    except (GlusterError, OSError) as exc:
        problems.append(f"{step}: {exc}")


def start_gluster_server(*, timeout: float = START_TIMEOUT) -> GlusterServer:
    """Start a private glusterd, create and start a one-brick volume on loopback, and mount it.

    Raises
    ------
    ServerStartError
        A step failed or timed out; everything started is stopped and the message names the kept log files.
    """
    reason = why_gluster_cannot_run()
    if reason is not None:
        raise ServerStartError(f"GlusterFS cannot run here: {reason}")
    base = Path(tempfile.mkdtemp(prefix="datamount-gluster-"))
    for folder in ("work", "run", "log", "mnt"):
        (base / folder).mkdir()
    volfile = base / "glusterd.vol"
    volfile.write_text(private_volfile(GLUSTERD_VOLFILE.read_text(), base / "work", base / "run"))
    command = [_tool("glusterd") or "glusterd", "-N", "-f", str(volfile), "-l", str(base / "log" / "glusterd.log")]
    command += ["-p", str(base / "run" / "glusterd.pid")]
    server = GlusterServer(base=base, glusterd=start_daemon(command, base / "log" / "glusterd.out"))
    try:
        server._start_volume(timeout)
        server.mount(timeout=timeout)
    except (GlusterError, ServerStartError) as exc:
        problems = server._teardown(keep_logs=True)
        left = f"; teardown: {'; '.join(problems)}" if problems else ""
        raise ServerStartError(f"GlusterFS did not start: {exc} (logs kept in {server.log_dir}){left}") from exc
    except BaseException:
        server._teardown(keep_logs=True)
        raise
    return server


@pytest.fixture(scope="session")
def gluster_server() -> Iterator[GlusterServer]:
    """A private GlusterFS volume mounted through FUSE for the whole session (skipped, with the reason, where the
    machine cannot run it)."""
    yield from session_server("GlusterFS", why_gluster_cannot_run, start_gluster_server)


@pytest.fixture
def gluster_folder(gluster_server: GlusterServer) -> Iterator[Path]:
    """A fresh folder path on the mounted volume (not created), removed after the test."""
    gluster_server.mount()  # a test that unmounted it may have failed before mounting it again
    folder = gluster_server.mount_point / f"t-{uuid.uuid4().hex[:12]}"
    yield folder
    gluster_server.mount()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def gluster_store(gluster_folder: Path) -> Store:
    """A store on a fresh, empty folder of the GlusterFS mount, guarded by ``mount="glusterfs"``."""
    return open_store(str(gluster_folder), mount="glusterfs")


@pytest.fixture(scope="session")
def gluster_shared_store(gluster_server: GlusterServer) -> Store:
    """A store on a folder of its own for the whole session, shared by the tests that only read it (it goes with
    the volume; a test that unmounts the volume mounts it again when it ends, see :func:`gluster_folder`)."""
    gluster_server.mount()
    return open_store(str(gluster_server.mount_point / f"shared-{uuid.uuid4().hex[:12]}"), mount="glusterfs")
