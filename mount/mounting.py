"""Mounting and unmounting: the checks made before a mount, the serving process and its life cycle.

``mount()`` checks everything it can in the calling process (FUSE present, the mount point an empty folder and not
a mount left by a killed process, the version found), then serves the version in a process of its own (or in this
one, ``foreground=True``) and returns once the mount answers. The serving process unmounts and exits on
``unmount()``, SIGTERM or SIGINT.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

from datamount.datasets import catalog
from datamount.datasets.file_parts import FileParts
from datamount.datasets.manifest import Kind, Manifest
from datamount.datasets.progress import Progress
from datamount.datasets.row_folders import plan_row_files, shows_rows
from datamount.datasets.rows import read_lines
from datamount.mount.content import DEFAULT_MEMORY, DEFAULT_READ_AHEAD, Contents, ListedRowFiles, RowFiles
from datamount.mount.tree_view import BuiltTree, MountTree
from datamount.storage import MountError, Store, arguments, open_store
from datamount.storage.cache import ContentCache
from datamount.storage.mounts import read_mounts

#: The type ``/proc/mounts`` gives a datamount mount.
FSTYPE = "fuse.datamount"
#: Readers whose default read-ahead windows fit in the mount's memory at once.
READERS_IN_MEMORY = 4
#: Seconds to wait for a serving process to answer (again after each report of its pass over a version's rows).
READY_TIMEOUT = 120.0
#: Seconds between a serving process's reports of its pass over the rows of a version without a list, at least.
PASS_REPORT_SECONDS = 10.0

log = logging.getLogger("datamount.mount")

INSTALL_HINT = "install FUSE 3: apt-get install fuse3 (Debian, Ubuntu), dnf install fuse3 (Fedora)"


@dataclass(frozen=True)
class Mounted:
    """A mount that answers: the version shown, where, by which process, and where it logs."""

    ref: str
    mountpoint: str
    pid: int
    log_file: str | None


@dataclass(frozen=True)
class _Plan:
    """What a serving process needs (handed to it through a pipe: a store's credentials never appear in argv)."""

    store: Store
    ref: str
    mountpoint: str
    cache: str | bool
    memory: int
    read_ahead: int
    allow_other: bool


def mount(
    ref: str,
    mountpoint: str | os.PathLike[str],
    *,
    store: Store | str | None = None,
    cache: str | os.PathLike[str] | bool | None = None,
    memory: int = DEFAULT_MEMORY,
    read_ahead: int | None = None,
    allow_other: bool = False,
    foreground: bool = False,
    log_file: str | os.PathLike[str] | None = None,
) -> Mounted:
    """Mount version ``ref`` (``name`` or ``name@N``, pinned now) read-only at ``mountpoint``, an empty folder.

    ``cache``: a folder for the shared content cache (remote objects and shards are kept there under its cap),
    ``False`` for none; by default the default cache for a remote store, none for a local one. ``memory`` bounds the
    bytes of checked files held in memory; ``read_ahead`` those fetched ahead of each reader (at most ``memory``; by
    default 32 MB, or a quarter of ``memory`` when that is less: files fetched ahead must stay in memory until they
    are read, for four readers at once). ``foreground`` serves in this process until the mount is unmounted (or
    SIGTERM, SIGINT); otherwise a process of its own serves it, logging to ``log_file`` (by default a file in the
    user's state folder), and this returns once it answers.
    """
    arguments.whole_number(memory, "memory", minimum=1)
    if read_ahead is None:
        read_ahead = max(min(DEFAULT_READ_AHEAD, memory // READERS_IN_MEMORY), 1)
    elif arguments.whole_number(read_ahead, "read_ahead", minimum=1) > memory:
        raise ValueError(
            f"a read-ahead of {read_ahead:,} bytes does not fit in the mount's memory of {memory:,} bytes: files "
            "fetched ahead would be dropped before they are read (make the memory larger or the read-ahead smaller)"
        )
    check_fuse()
    target = os.path.abspath(mountpoint)
    check_mountpoint(target)
    opened = open_store(store)
    manifest = catalog.resolve(opened, ref)
    plan = _Plan(
        opened,
        manifest.ref,
        target,
        _cache_option(cache, opened),
        memory,
        read_ahead,
        allow_other,
    )
    if foreground:
        serve(plan, manifest)
        return Mounted(manifest.ref, target, os.getpid(), None)
    return _start_server(plan, Path(log_file) if log_file else _default_log(target))


def unmount(mountpoint: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
    """Unmount the datamount mount at ``mountpoint`` (also one left by a killed process); its serving process exits."""
    target = os.path.abspath(mountpoint)
    found = [entry for entry in read_mounts() if entry.target == target]
    if not found:
        raise MountError(f"{target} is not mounted")
    if found[-1].fstype != FSTYPE:
        raise MountError(f"{target} is a {found[-1].fstype} mount, not datamount's: unmount it with umount")
    command, lazy_flag = _unmount_command()
    result = subprocess.run([*command, target], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        # Busy (a shell inside it, an open file) or left by a killed process: detach it now, gone once unused.
        lazy = subprocess.run([*command, lazy_flag, target], capture_output=True, text=True, check=False)
        if lazy.returncode != 0:
            raise MountError(f"could not unmount {target}: {(result.stderr or lazy.stderr).strip()}")
    deadline = time.monotonic() + timeout
    while any(entry.target == target for entry in read_mounts()) and time.monotonic() < deadline:
        time.sleep(0.05)


def check_fuse() -> None:
    """Raise a :class:`MountError` naming what is missing when this machine cannot mount with FUSE."""
    if not os.path.exists("/dev/fuse"):
        raise MountError(
            "FUSE is not available: /dev/fuse is missing (in a container, give it the device /dev/fuse and the "
            f"SYS_ADMIN capability; on a machine, {INSTALL_HINT})"
        )
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        raise MountError("FUSE is not available: no permission to open /dev/fuse (run as root, or join its group)")
    try:
        import pyfuse3  # noqa: F401  (links libfuse 3)
    except (ImportError, OSError) as exc:
        raise MountError(f"FUSE is not available: {exc} ({INSTALL_HINT}; pip install 'datamount[mount]')") from exc
    if os.getuid() != 0 and shutil.which("fusermount3") is None:
        raise MountError(f"FUSE is not available: fusermount3 is missing ({INSTALL_HINT})")


def check_mountpoint(target: str) -> None:
    """A mount point must be an empty folder, and not a mount (a live one, or one left by a killed process)."""
    mounted = [entry for entry in read_mounts() if entry.target == target]
    if mounted:
        if mounted[-1].fstype == FSTYPE and _is_dead(target):
            raise MountError(
                f"{target} is a datamount mount whose serving process is gone (killed?): run "
                f"'datamount unmount {target}', then mount again"
            )
        raise MountError(f"{target} is mounted already ({mounted[-1].fstype}): unmount it first")
    try:
        os.stat(target)
    except FileNotFoundError as exc:
        raise MountError(f"the mount point {target} does not exist: create an empty folder there") from exc
    except OSError as exc:
        raise MountError(f"the mount point {target} cannot be used: {exc.strerror}") from exc
    if not os.path.isdir(target):
        raise MountError(f"the mount point {target} is not a folder")
    if os.listdir(target):
        raise MountError(f"the mount point {target} is not empty: mount on an empty folder (nothing is hidden)")


def _is_dead(target: str) -> bool:
    """Whether the FUSE mount at ``target`` has lost its serving process (the kernel answers ENOTCONN)."""
    try:
        os.listdir(target)
    except OSError as exc:
        return exc.errno == errno.ENOTCONN
    return False


# ------------------------------------------------------------------------------------------------------ serving


def serve(
    plan: _Plan,
    manifest: Manifest | None = None,
    on_ready: Callable[[], None] | None = None,
    progress: Progress | None = None,
) -> None:
    """Serve ``plan``'s version at its mount point until it is unmounted, SIGTERM or SIGINT (blocking). The pass over
    the rows of a version without a list is reported to ``progress``. An indexed image version (format 7) is served
    from its indexes, a node at a time, as soon as the mount is made; any other has its tree built whole first."""
    import pyfuse3
    import trio

    from datamount.mount.filesystem import DatasetFilesystem

    manifest = manifest or catalog.resolve(plan.store, plan.ref)
    cache = None if plan.cache is False else ContentCache(None if plan.cache is True else plan.cache)
    tree, row_files = _tree(plan.store, manifest, cache, progress)
    contents = Contents(plan.store, manifest, row_files=row_files, cache=cache, memory=plan.memory)
    filesystem = DatasetFilesystem(tree, contents, read_ahead=plan.read_ahead, created_ns=_created_ns(manifest))
    options = {"ro", "default_permissions", f"fsname=datamount:{manifest.ref}", "subtype=datamount"}
    if plan.allow_other:
        options.add("allow_other")
    try:
        pyfuse3.init(filesystem, plan.mountpoint, options)
    except RuntimeError as exc:
        contents.close()
        raise MountError(f"could not mount {plan.mountpoint}: libfuse refused ({exc}); see the log") from exc
    try:
        trio.run(_serve_until_stopped, on_ready)
    finally:
        log.info("%s; %s", contents.summary(), filesystem.filler.summary())
        pyfuse3.close(unmount=True)
        contents.close()
        log.info("unmounted")


def _tree(
    store: Store, manifest: Manifest, cache: ContentCache | None, progress: Progress | None
) -> tuple[MountTree, RowFiles | None]:
    """The tree the mount serves, and each row's file (what its row groups' files are checked against): an
    indexed image version's from its indexes (nothing read yet), any other's built whole."""
    from datamount.datasets.tree import Tree
    from datamount.mount.lazy_tree import LazyTree

    if manifest.indexed and manifest.kind is Kind.IMAGE and manifest.has_list:
        assert manifest.row_parts is not None
        return LazyTree(_through(manifest, cache), store), manifest.row_parts.cached_in(cache)
    lines = read_lines(store, manifest) if manifest.kind is Kind.IMAGE and manifest.has_list else None
    # A version without a list: its files' paths and sizes come from a pass over its rows (through the cache).
    row_files = plan_row_files(store, manifest, cache=cache, progress=progress) if shows_rows(manifest) else None
    built = Tree(manifest, lines, row_files)
    return BuiltTree(built), ListedRowFiles(built.row_entries)


def _through(manifest: Manifest, cache: ContentCache | None) -> Manifest:
    """``manifest`` with its file entries' parts read through ``cache`` (as it is, with none)."""
    if cache is None or not isinstance(manifest.files, FileParts):
        return manifest
    return dataclasses.replace(manifest, files=manifest.files.cached_in(cache))


async def _serve_until_stopped(on_ready: Callable[[], None] | None) -> None:
    """Answer requests until the mount goes away (``unmount``) or SIGTERM/SIGINT ends it; ready once signals are
    caught."""
    import pyfuse3
    import trio

    async def stop_on_signal(received: Any) -> None:
        async for number in received:
            log.info("%s: unmounting", signal.Signals(number).name)
            pyfuse3.terminate()
            return

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as received:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_on_signal, received)
            if on_ready is not None:
                on_ready()
            await pyfuse3.main()
            nursery.cancel_scope.cancel()


def _serve_from_pipe() -> None:
    """The serving process: its plan on stdin; one JSON line on stdout once the mount answers (or why not)."""
    plan: _Plan = pickle.loads(sys.stdin.buffer.read())
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s datamount mount {plan.ref} at {plan.mountpoint}: %(message)s"
    )
    answer = sys.stdout
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)

    def ready() -> None:
        log.info("serving (process %d)", os.getpid())
        answer.write(json.dumps({"pid": os.getpid()}) + "\n")
        answer.close()

    def rows_read(done: int, rows: int) -> None:
        log.info("read %s of %s rows to make the tree", f"{done:,}", f"{rows:,}")
        answer.write(json.dumps({"rows_read": done, "rows": rows}) + "\n")
        answer.flush()

    try:
        serve(plan, on_ready=ready, progress=_PassReport(rows_read))
    except Exception as exc:
        if not answer.closed:
            answer.write(json.dumps({"error": str(exc)}) + "\n")
            answer.close()
        raise


def _start_server(plan: _Plan, log_file: Path) -> Mounted:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "datamount.mount.serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,  # not stopped by the terminal's Ctrl-C, nor when the shell exits
            cwd="/",
        )
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(pickle.dumps(plan))
    server.stdin.close()
    line = _read_answer(server)
    answer = json.loads(line) if line.strip() else {}
    if "pid" not in answer:
        server.wait(5) if server.poll() is None else None
        reason = answer.get("error") or _last_lines(log_file) or f"it exited with status {server.returncode}"
        raise MountError(f"could not mount {plan.ref} at {plan.mountpoint}: {reason} (log: {log_file})")
    # Reaped when it exits (on unmount), so that a long-lived caller keeps no zombie.
    threading.Thread(target=server.wait, name="datamount-mount-reaper", daemon=True).start()
    return Mounted(plan.ref, plan.mountpoint, int(answer["pid"]), str(log_file))


def _read_answer(server: subprocess.Popen[bytes]) -> str:
    """The serving process's answer (its first line that does not report its pass over a version's rows); an error
    line when it sends nothing for :data:`READY_TIMEOUT` seconds."""
    import selectors

    assert server.stdout is not None
    source, pending = server.stdout.fileno(), b""
    with selectors.DefaultSelector() as waiting:
        waiting.register(source, selectors.EVENT_READ)
        while True:
            while b"\n" not in pending:
                if not waiting.select(READY_TIMEOUT):
                    server.kill()
                    return json.dumps({"error": f"the mount did not answer within {READY_TIMEOUT:.0f} s"})
                chunk = os.read(source, 1 << 16)
                if not chunk:  # it exited
                    return pending.decode("utf-8", "replace")
                pending += chunk
            line, _, pending = pending.partition(b"\n")
            if b'"rows_read"' not in line:
                return line.decode("utf-8", "replace")


class _PassReport:
    """The pass over a version's rows as reports to ``send(done, rows)``: when it starts, then at most every
    :data:`PASS_REPORT_SECONDS` (each restarts the wait of ``mount()``: a long pass is not a server that hangs)."""

    def __init__(self, send: Callable[[int, int], None]) -> None:
        self._send = send
        self._rows = self._done = 0
        self._sent = 0.0

    def start(self, phase: str, *, items: int, size: int) -> None:
        self._rows, self._done, self._sent = items, 0, time.monotonic()
        self._send(0, items)

    def advance(self, *, items: int = 1, size: int = 0) -> None:
        self._done += items
        if time.monotonic() - self._sent >= PASS_REPORT_SECONDS:
            self._sent = time.monotonic()
            self._send(self._done, self._rows)

    def finish(self) -> None:
        self._send(self._done, self._rows)


def _last_lines(log_file: Path, count: int = 3) -> str:
    try:
        lines = [line for line in log_file.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return " / ".join(lines[-count:])


def _default_log(target: str) -> Path:
    escaped = target.strip("/").replace("/", "-") or "root"
    return platformdirs.user_state_path("datamount") / "mounts" / f"{escaped}.log"


def _cache_option(cache: str | os.PathLike[str] | bool | None, store: Store) -> str | bool:
    if cache is None:
        return store.local_path() is None
    return cache if isinstance(cache, bool) else str(cache)


def _unmount_command() -> tuple[list[str], str]:
    """The command that unmounts a FUSE mount, and its flag for a lazy unmount."""
    fusermount = shutil.which("fusermount3") or shutil.which("fusermount")
    if fusermount is not None:
        return [fusermount, "-u"], "-z"
    return ["umount"], "-l"


def _created_ns(manifest: Manifest) -> int:
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(manifest.created).timestamp() * 1e9)
    except ValueError:
        return 0
