"""A folder a command makes on local disk appears whole or not at all: it is written into a hidden sibling and renamed
into place at the end.

The rule (:func:`staged_folder`):

- The target is a folder that does not exist yet, or an empty one. A target that holds anything is refused before
  anything is written: it is never half-replaced, nor mixed with what it held.
- Everything is written into ``.NAME.datamount-COMMAND-KEY-RANDOM``, beside the target (same parent, so the same file
  system): ``KEY`` names what is written (for ``export``, the version), ``RANDOM`` tells two runs apart. At the end
  it is renamed to the target, one ``rename(2)``: atomic on a POSIX file system, and refused by the kernel if the
  target was filled meanwhile (then the sibling is removed and the error says so). An empty target is replaced by
  the sibling, which takes its mode.
- An empty target that is a mount point (a Kubernetes ``emptyDir``, a container's volume), whose parent cannot be
  written, or that is the working folder, is not replaced: the sibling is made inside it
  (``.datamount-COMMAND-KEY-RANDOM``) and, at the end, what it holds is renamed into the target entry by entry (a
  handful for an export: its top-level folders and its list). Only a process killed between those renames leaves
  part of them.
- On any failure, ``KeyboardInterrupt`` and SIGTERM (:mod:`~datamount.storage.termination`) included, the sibling is
  removed, and so are the parent folders the command made for it.
- A run that is killed (SIGKILL, a power cut) leaves its sibling, hidden. The run holds an ``flock`` on it, which
  the kernel releases when the process dies: the next run for the same target finds the sibling unlocked and takes
  it over when it has the same ``KEY`` (what was written is kept where its bytes are right: an export resumes), or
  removes it otherwise. A sibling still locked is another run at work, and is left alone. Where the file system
  offers no ``flock`` (some network file systems), no sibling is taken over or removed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from datamount.storage.termination import sigterm_unwinds

#: How many bytes of the target's name a sibling's name repeats (a name has at most 255 bytes).
NAME_BYTES = 100


@contextlib.contextmanager
def staged_folder(target: str | os.PathLike[str], *, command: str, key: str) -> Iterator[Path]:
    """Yield a hidden sibling of ``target`` to write into; put what it holds in place of ``target`` when the block
    ends normally, remove it when the block raises (module docstring). ``command`` names the writer in the sibling's
    name, ``key`` what it writes: a sibling left by a killed run with the same ``command`` and ``key`` is taken over.

    Raises :class:`FileExistsError` when ``target`` holds anything (before anything is written, or at the end when
    it was filled meanwhile), :class:`NotADirectoryError` when it is a file.
    """
    given = os.fspath(target)
    out = Path(given).resolve()  # a link to a folder: the sibling goes beside the folder it names
    inside = _must_stage_inside(out)
    prefix = _inside_prefix(command) if inside else _beside_prefix(out, command)
    place = out if inside else out.parent
    _check_empty(out, given, command)
    with sigterm_unwinds():
        made = _make_parents(out.parent)
        try:
            with _sibling(place, prefix, key) as stage:
                try:
                    yield stage
                    if inside:
                        _move_entries(stage, out, given)
                    else:
                        _rename(stage, out, given)
                except BaseException:
                    shutil.rmtree(stage, ignore_errors=True)
                    raise
        except BaseException:
            for folder in reversed(made):
                with contextlib.suppress(OSError):
                    folder.rmdir()  # only if empty: another process may have written there meanwhile
            raise


def _must_stage_inside(out: Path) -> bool:
    """Whether ``out`` is a folder that cannot be replaced by a sibling: a mount point, one in a folder this process
    cannot write, or the working folder (a shell in it would go on seeing the folder replaced, empty)."""
    if not out.is_dir():
        return False
    if os.path.ismount(out) or not os.access(out.parent, os.W_OK | os.X_OK):
        return True
    try:
        return os.path.samefile(out, os.getcwd())
    except OSError:
        return False


def is_empty(target: str | os.PathLike[str], *, command: str) -> bool:
    """Whether ``target`` does not exist, or is a folder that holds nothing (but the siblings a killed run of
    ``command`` left inside it): what :func:`staged_folder` writes into."""
    out = Path(target).resolve()
    if not out.is_dir():
        return not out.exists()
    inside = _inside_prefix(command)
    with os.scandir(out) as entries:
        return not any(not entry.name.startswith(inside) for entry in entries)


def _check_empty(out: Path, given: str, command: str) -> None:
    """Refuse ``out`` unless :func:`is_empty`."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{given} exists and is not a folder: give a folder that does not exist yet")
    if not is_empty(out, command=command):
        raise FileExistsError(
            f"{given} is not empty: give a folder that does not exist yet or is empty (nothing was written; what is "
            "there is never replaced nor mixed with what is written)"
        )


def _beside_prefix(out: Path, command: str) -> str:
    """How the name of a sibling made beside ``out`` starts: with the start of its name, cut to whole bytes."""
    return f".{os.fsdecode(os.fsencode(out.name)[:NAME_BYTES])}.datamount-{command}-"


def _inside_prefix(command: str) -> str:
    """How the name of a sibling made inside a target starts."""
    return f".datamount-{command}-"


def _make_parents(parent: Path) -> list[Path]:
    """Make ``parent`` and the folders above it that are missing; return those made, outermost first."""
    missing = []
    folder = parent
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    made = []
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made by another process meanwhile: not ours to remove
            folder.mkdir()
            made.append(folder)
    return made


@contextlib.contextmanager
def _sibling(place: Path, prefix: str, key: str) -> Iterator[Path]:
    """A folder in ``place`` named ``prefix`` + the key's tag + a random part, locked for as long as the block runs:
    one a killed run left with the same ``key``, or a new one. Those killed runs left with another key are removed."""
    tag = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    adopted: tuple[Path, int] | None = None
    with os.scandir(place) as entries:
        found = sorted(place / entry.name for entry in entries if entry.name.startswith(prefix))
    for path in found:
        handle = _lock(path)
        if handle is None:
            continue  # another run at work, or no flock on this file system: not ours to take
        if adopted is None and path.name.startswith(f"{prefix}{tag}-"):
            adopted = (path, handle)
            continue
        shutil.rmtree(path, ignore_errors=True)
        os.close(handle)
    if adopted is None:
        path = place / f"{prefix}{tag}-{secrets.token_hex(4)}"
        path.mkdir()  # the umask's mode, as any folder the user makes
        handle = _lock(path)
        if handle is None:  # no flock on this file system: the folder is this run's by its random name alone
            handle = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        adopted = (path, handle)
    path, handle = adopted
    try:
        yield path
    finally:
        os.close(handle)  # releases the lock


def _lock(path: Path) -> int | None:
    """An open descriptor of the folder ``path`` holding its exclusive ``flock``; None when another process holds it,
    when it is not a folder, or when the file system has no ``flock``."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(handle)
        return None
    return handle


def _rename(stage: Path, out: Path, given: str) -> None:
    """Give ``stage`` the name ``out``: in place of nothing, or of an empty folder (whose mode it takes)."""
    with contextlib.suppress(FileNotFoundError):
        os.chmod(stage, stat.S_IMODE(out.stat().st_mode))
    try:
        os.rename(stage, out)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise FileExistsError(
                f"{given} was filled by another process while this ran; nothing was put there"
            ) from exc
        if exc.errno == errno.ENOTDIR:
            raise NotADirectoryError(f"{given} was made a file by another process while this ran") from exc
        raise


def _move_entries(stage: Path, out: Path, given: str) -> None:
    """Rename what ``stage`` (inside ``out``) holds into ``out``, entry by entry, none over an entry already there."""
    with os.scandir(stage) as entries:
        names = sorted(entry.name for entry in entries)
    for name in names:
        if os.path.lexists(out / name):
            raise FileExistsError(f"{given} was filled by another process while this ran ({name} is there now)")
    for name in names:
        os.rename(stage / name, out / name)
    stage.rmdir()
