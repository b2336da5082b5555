"""Who may delete a dataset's parts while others write it: shared locks for writers, an exclusive one for removals.

The rule: a part of a dataset (an object, a list, a pack folder, a manifest) is deleted only by the holder of the
dataset's *exclusive* lock, and every writer (upload, pack, import, copy, map, repair, public install) holds a
*shared* lock from its first look at what is stored (which objects it can reuse, which shards an earlier run left)
until its commit is made (:func:`datamount.datasets.catalog.commit` checks that it is held). So nothing that a
version being committed uses is deleted under it: a removal waits for the writers that announced themselves before
it, and writers that come later wait for the removal.

A lock is a small file in the dataset's ``locks/`` folder, ``shared-ID.json`` or ``exclusive-ID.json``, saying who
holds it (host, process, what for) and when it was last refreshed. Taking one needs only what every store offers:
an exclusive create and a listing that shows what was created before it.

- *shared*: create the file, list the folder; a live exclusive lock there -> remove the file, wait, try again.
- *exclusive*: create the file, list the folder; a live exclusive lock created earlier (by time, then name) -> remove
  the file, wait, try again; live shared locks -> keep the file (writers that come now see it and wait) and wait for
  them to go.

Of a writer and a remover, the one that lists later sees the other's file, so they never both go ahead. Holders
refresh their file every ``refresh_every`` seconds (a thread, joined on release). A lock is *stale*, ignored and
removed by whoever meets it, when its holder is a process of this host that is gone, or when it has not been
refreshed for ten refresh intervals (a process killed on another host); a holder whose file was removed so finds it
gone at its next refresh or before it commits (:class:`LockLostError`), and commits nothing.

What a lock file may say is checked before any of it is used (:func:`parse_lock`, the one rule): at most
``LOCK_BYTES`` of JSON nested at most ``LOCK_DEPTH`` deep, a host and a purpose of printable text, a process id
from 1 to ``2**31 - 1`` (and below this system's ``pid_max`` for a lock of this host), times that are finite, not
before 1970 and not further ahead of this host's clock than the lock's ``stale_after``, which is at most a day. A
file in the folder that says anything else is *unreadable*: it holds nothing, from the first look (nothing it
says can be trusted to let go: a pid of 0 or -1 always "runs", a NaN time is never old, a pid of 10**30 overflows
the check), is named in a warning once per process, and is left for a person to delete.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import json
import logging
import os
import posixpath
import random
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated

import msgspec

from datamount.datasets import layout
from datamount.datasets.errors import DatasetBusyError, LockLostError
from datamount.storage import DatamountError, ObjectExistsError, ObjectNotFoundError, Store, arguments

log = logging.getLogger(__name__)

SHARED = "shared"
EXCLUSIVE = "exclusive"
#: How often a holder rewrites its lock file; a file not rewritten for ``STALE_INTERVALS`` of these is stale.
REFRESH_SECONDS = 60.0
STALE_INTERVALS = 10
#: How long a writer waits for a removal to finish, and a removal for the writers before it, before giving up.
WAIT_SECONDS = 600.0
#: The longest pause between two looks at a busy lock folder.
LONGEST_POLL_SECONDS = 1.0
LOCK_FORMAT = 1
#: The most bytes a lock file may have, and how deeply its JSON may nest: a holder writes one flat object of about
#: 200 bytes, and nothing past this many is read.
LOCK_BYTES = 4096
LOCK_DEPTH = 8
#: The longest host name and purpose a lock file may give (a DNS name has at most 253 characters).
LONGEST_TEXT = 255
#: The longest a lock may go without a refresh before it is stale, whatever its file says.
LONGEST_STALE_AFTER = 86_400.0
#: The largest process id of any system (``pid_t`` is a signed 32-bit integer); those of this host are below its
#: ``pid_max`` (read from ``PID_MAX_FILE``; ``FALLBACK_PID_MAX``, Linux's ceiling, where there is none).
LARGEST_PID = 2**31 - 1
PID_MAX_FILE = "/proc/sys/kernel/pid_max"
FALLBACK_PID_MAX = 2**22


@dataclass(frozen=True)
class LockFile:
    """What a lock file says: who holds it, since when, and when it was last refreshed (seconds since the epoch)."""

    path: str
    kind: str
    host: str
    pid: int
    purpose: str
    created: float
    refreshed: float
    stale_after: float

    @property
    def order(self) -> tuple[float, str]:
        return self.created, posixpath.basename(self.path)

    def is_stale(self, now: float) -> bool:
        """Whether the holder is gone: a process of this host that no longer runs, or no refresh for too long."""
        if self.host == socket.gethostname() and not _process_runs(self.pid):
            return True
        return now - self.refreshed > self.stale_after

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.created))
        return f"process {self.pid} on {self.host} ({self.purpose}, since {since})"


class _LockFields(msgspec.Struct):
    """The fields of a lock file that are read, typed and bounded (others, such as ``format``, are let be: a later
    format may add some)."""

    host: Annotated[str, msgspec.Meta(max_length=LONGEST_TEXT)]
    pid: Annotated[int, msgspec.Meta(ge=1, le=LARGEST_PID)]
    purpose: Annotated[str, msgspec.Meta(max_length=LONGEST_TEXT)]
    created: Annotated[float, msgspec.Meta(ge=0)]  # msgspec gives no infinity nor NaN: JSON has none
    refreshed: Annotated[float, msgspec.Meta(ge=0)]
    stale_after: Annotated[float, msgspec.Meta(gt=0, le=LONGEST_STALE_AFTER)]


def parse_lock(path: str, data: bytes, *, now: float, host: str, pid_max: int) -> LockFile:
    """The lock file ``path`` whose bytes are ``data``, read on host ``host`` (this one, whose process ids are below
    ``pid_max``) at time ``now``: see the module's rule.

    Raises
    ------
    ValueError
        ``data`` is not a lock file datamount can read; the message says what is wrong with it.
    """
    if len(data) > LOCK_BYTES:
        raise ValueError(f"longer than {LOCK_BYTES} bytes")
    if _nesting(data) > LOCK_DEPTH:
        raise ValueError(f"JSON nested deeper than {LOCK_DEPTH}")
    try:
        fields = msgspec.json.decode(data, type=_LockFields)
    except msgspec.DecodeError as exc:
        raise ValueError(str(exc)) from None
    for name, text in (("host", fields.host), ("purpose", fields.purpose)):
        if not text.isprintable():
            raise ValueError(f"its {name} {text!r} is not printable text")
    if fields.host == host and fields.pid >= pid_max:
        raise ValueError(f"pid {fields.pid} is no process of this host, {host} (its pid_max is {pid_max})")
    for name, when in (("created", fields.created), ("refreshed", fields.refreshed)):
        if when > now + fields.stale_after:
            raise ValueError(f"{name} {when} is more than its stale_after ({fields.stale_after} s) ahead of {now}")
    kind = posixpath.basename(path).partition("-")[0]
    return LockFile(
        path, kind, fields.host, fields.pid, fields.purpose, fields.created, fields.refreshed, fields.stale_after
    )


def _nesting(data: bytes) -> int:
    """How deeply the JSON text ``data`` nests arrays and objects (brackets in strings not counted), counted
    without recursion: a decoder would recurse as deep."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            escaped, in_string = (False, True) if escaped else (byte == 0x5C, byte != 0x22)
        elif byte == 0x22:
            in_string = True
        elif byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    return deepest


def pid_max() -> int:
    """This system's ``pid_max``: every process id of this host is below it."""
    try:
        with open(PID_MAX_FILE, "rb") as file:
            return min(int(file.read(32)), LARGEST_PID + 1)
    except (OSError, ValueError):
        return FALLBACK_PID_MAX


def _process_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it runs
        return True
    return True


def locks_folder(name: str) -> str:
    return f"{layout.dataset_folder(name)}/{layout.LOCKS}"


def read_locks(store: Store, name: str) -> list[LockFile]:
    """The lock files of dataset ``name``: a file removed since the listing is skipped, and an unreadable one (see
    the module's rule) is named in a warning and holds nothing."""
    found = []
    now, host, largest = time.time(), socket.gethostname(), pid_max()
    for path in store.list(locks_folder(name), recursive=False):
        if posixpath.basename(path).partition("-")[0] not in (SHARED, EXCLUSIVE):
            continue
        try:
            data = store.read_range(path, 0, LOCK_BYTES + 1)
        except ObjectNotFoundError:
            continue
        try:
            found.append(parse_lock(path, data, now=now, host=host, pid_max=largest))
        except ValueError as exc:
            _say_unreadable(store.url_for(path), str(exc))
    return found


@functools.lru_cache(maxsize=1024)
def _say_unreadable(url: str, why: str) -> None:
    """Warn that ``url`` is no lock of ours, once per process (for the last 1,024 files and reasons)."""
    log.warning(
        "%s is not a lock file datamount can read (%s): it holds nothing; delete it if no one uses it", url, why
    )


class Lock:
    """A lock held on one dataset (see the module's docstring); made by :func:`writing` and :func:`removing`."""

    def __init__(self, store: Store, name: str, kind: str, purpose: str, refresh_every: float) -> None:
        self.store = store
        self.name = name
        self.kind = kind
        self.purpose = purpose
        self.refresh_every = arguments.positive_number(refresh_every, "refresh_every")
        if refresh_every * STALE_INTERVALS > LONGEST_STALE_AFTER:
            raise ValueError(
                f"refresh_every must be at most {LONGEST_STALE_AFTER / STALE_INTERVALS:g} s (a lock not refreshed "
                f"for {STALE_INTERVALS} of them is stale, and none is kept longer than a day), got {refresh_every}"
            )
        if not isinstance(purpose, str) or not purpose.isprintable() or len(purpose) > LONGEST_TEXT:
            raise ValueError(f"purpose must be printable text of at most {LONGEST_TEXT} characters, got {purpose!r}")
        self.path = f"{locks_folder(name)}/{kind}-{uuid.uuid4().hex}.json"
        self.created = time.time()
        self.lost: str | None = None
        self._stop = threading.Event()
        self._refresher: threading.Thread | None = None

    def body(self) -> bytes:
        document = {
            "format": LOCK_FORMAT,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "purpose": self.purpose,
            "created": self.created,
            "refreshed": time.time(),
            "stale_after": self.refresh_every * STALE_INTERVALS,
        }
        return json.dumps(document).encode()

    # ------------------------------------------------------------------------------------------------ taking

    def acquire(self, wait: float) -> None:
        """Take the lock, waiting up to ``wait`` seconds for the holders it must wait for."""
        deadline = time.monotonic() + wait
        pauses = _pauses()
        while True:
            self._announce()
            blockers = self._blockers()
            if self.kind == EXCLUSIVE:  # keep the file while only writers are in the way: later ones wait for it
                while blockers and all(lock.kind == SHARED for lock in blockers) and time.monotonic() < deadline:
                    _say_waiting(self, blockers)
                    time.sleep(next(pauses))
                    blockers = self._blockers()
            if not blockers:
                break
            self._withdraw()
            if time.monotonic() >= deadline:
                raise DatasetBusyError(self._busy_message(blockers, wait))
            _say_waiting(self, blockers)
            time.sleep(next(pauses))
        self._refresher = threading.Thread(target=self._refresh, name="datamount-lock", daemon=True)
        self._refresher.start()

    def _announce(self) -> None:
        for _ in range(10):  # a removal may take the empty locks folder away between its making and the write
            try:
                self.store.create(self.path, self.body())
                return
            except ObjectNotFoundError:
                continue
            except ObjectExistsError:  # a name of 128 random bits taken: not ours to use
                self.path = f"{locks_folder(self.name)}/{self.kind}-{uuid.uuid4().hex}.json"
        self.store.create(self.path, self.body())

    def _blockers(self) -> list[LockFile]:
        """The live locks that keep this one from being held now; stale ones met are removed."""
        now = time.time()
        blockers = []
        for other in read_locks(self.store, self.name):
            if other.path == self.path:
                continue
            if other.is_stale(now):
                log.warning("removing a stale lock of %s: %s", self.name, other.describe())
                with contextlib.suppress(DatamountError):
                    self.store.remove(other.path, missing_ok=True)
                continue
            if self.kind == EXCLUSIVE:
                if other.kind == SHARED or other.order < (self.created, posixpath.basename(self.path)):
                    blockers.append(other)
            elif other.kind == EXCLUSIVE:
                blockers.append(other)
        return blockers

    def _busy_message(self, blockers: list[LockFile], wait: float) -> str:
        holders = "; ".join(lock.describe() for lock in blockers[:3])
        more = f" and {len(blockers) - 3} more" if len(blockers) > 3 else ""
        return (
            f"cannot {self.purpose} {self.name} in {self.store.url}: {holders}{more} still at work on it after "
            f"{wait:g} s; try again when that is done (the lock of a process killed on another host is let go "
            f"{STALE_INTERVALS * self.refresh_every:g} s after its last refresh)"
        )

    # ------------------------------------------------------------------------------------------ holding

    def _refresh(self) -> None:
        while not self._stop.wait(self.refresh_every):
            try:
                if not self.store.exists(self.path):
                    self.lost = "its lock file was removed as stale (was this process paused for long?)"
                    return
                self.store.write(self.path, self.body())
            except DatamountError as exc:  # the next refresh may get through; check() tells if none did
                log.warning("could not refresh the lock of %s: %s", self.name, exc)

    def check(self) -> None:
        """Raise :class:`LockLostError` unless this lock is still held (its file there, as this holder wrote it)."""
        if self.lost is None and not self.store.exists(self.path):
            self.lost = "its lock file is gone"
        if self.lost is not None:
            raise LockLostError(
                f"the {self.kind} lock on {self.name} in {self.store.url} was lost ({self.lost}); nothing was "
                "committed: run the same command again"
            )

    def release(self) -> None:
        self._stop.set()
        if self._refresher is not None:
            self._refresher.join()
        self._withdraw()
        # Left empty (a writer that wrote nothing, a removal of every version): nothing of the dataset is left over.
        self.store.remove_empty_folder(locks_folder(self.name))
        self.store.remove_empty_folder(layout.dataset_folder(self.name))

    def _withdraw(self) -> None:
        try:
            self.store.remove(self.path, missing_ok=True)
        except ObjectNotFoundError:
            pass
        except DatamountError as exc:  # what the lock guarded is done: its file goes stale once this process ends
            log.warning("could not remove the lock file %s (%s): it is let go once this process ends",
                        self.store.url_for(self.path), exc)  # fmt: skip


def _pauses() -> Iterator[float]:
    """Pauses between looks at a busy lock folder: growing, with jitter so that waiters do not move in step."""
    jitter = random.Random(uuid.uuid4().int)
    for step in itertools.count():
        yield min(LONGEST_POLL_SECONDS, 0.01 * 2**step) * jitter.uniform(0.5, 1.5)


_said: set[tuple[str, str]] = set()


def _say_waiting(lock: Lock, blockers: list[LockFile]) -> None:
    """Log once per holder that ``lock`` waits for it."""
    for other in blockers:
        if (lock.path, other.path) not in _said:
            _said.add((lock.path, other.path))
            log.warning("waiting to %s %s: %s is at work on it", lock.purpose, lock.name, other.describe())


# ------------------------------------------------------------------------------------- the locks this process holds


@dataclass
class _Hold:
    """This process's hold on one dataset: its lock, and the threads that use it (how many times each, nested)."""

    lock: Lock
    users: collections.Counter[int] = field(default_factory=collections.Counter)


#: What this process holds, by store, dataset and process (a forked child holds none of its parent's). Threads share
#: a shared lock, a thread's nested writers (an upload that packs) share its lock, and the last user releases it;
#: a thread that wants the exclusive lock waits for the other threads' shared one to go, and the other way round.
_held: dict[tuple[str, str, int], _Hold] = {}
_changes: dict[tuple[str, str, int], threading.Condition] = {}
_changes_guard = threading.Lock()


def _key(store: Store, name: str) -> tuple[str, str, int]:
    return store.url, name, os.getpid()


@contextlib.contextmanager
def writing(
    store: Store,
    name: str,
    *,
    purpose: str = "write",
    wait: float = WAIT_SECONDS,
    refresh_every: float = REFRESH_SECONDS,
) -> Iterator[Lock]:
    """Hold a shared lock on dataset ``name`` while writing it (one this process holds already is shared)."""
    with _holding(store, name, SHARED, purpose, wait, refresh_every) as lock:
        yield lock


@contextlib.contextmanager
def removing(
    store: Store,
    name: str,
    *,
    purpose: str = "remove",
    wait: float = WAIT_SECONDS,
    refresh_every: float = REFRESH_SECONDS,
) -> Iterator[Lock]:
    """Hold the exclusive lock on dataset ``name``: no writer holds a shared one meanwhile."""
    with _holding(store, name, EXCLUSIVE, purpose, wait, refresh_every) as lock:
        yield lock


@contextlib.contextmanager
def _holding(store: Store, name: str, kind: str, purpose: str, wait: float, refresh_every: float) -> Iterator[Lock]:
    key, me = _key(store, name), threading.get_ident()
    with _changes_guard:
        changes = _changes.setdefault(key, threading.Condition(threading.RLock()))
    deadline = time.monotonic() + wait
    with changes:
        while True:
            hold = _held.get(key)
            if hold is None:  # taken from the store while the other threads of this process wait to use it
                hold = _held[key] = _Hold(_taken(store, name, kind, purpose, deadline, refresh_every))
                break
            if me in hold.users and (kind == SHARED or hold.lock.kind == EXCLUSIVE):
                break  # nested in this thread's own hold
            if me in hold.users:
                raise DatasetBusyError(f"cannot {purpose} {name} in {store.url} while this thread writes it")
            if kind == SHARED and hold.lock.kind == SHARED:
                break
            if not changes.wait(deadline - time.monotonic()):
                raise DatasetBusyError(
                    f"cannot {purpose} {name} in {store.url}: another thread of this process holds it "
                    f"({hold.lock.purpose}) still after {wait:g} s"
                )
        hold.users[me] += 1
    try:
        yield hold.lock
    finally:
        with changes:
            hold.users[me] -= 1
            if not hold.users[me]:
                del hold.users[me]
            if not hold.users:
                del _held[key]
                hold.lock.release()
                changes.notify_all()


def _taken(store: Store, name: str, kind: str, purpose: str, deadline: float, refresh_every: float) -> Lock:
    lock = Lock(store, name, kind, purpose, refresh_every)
    lock.acquire(max(0.0, deadline - time.monotonic()))
    return lock


def held(store: Store, name: str) -> Lock | None:
    """The lock this process holds on dataset ``name``, if any."""
    hold = _held.get(_key(store, name))
    return None if hold is None else hold.lock
