"""A local cache of remote files, keyed by their sha256: size-capped, least-recently-used eviction, safe when several
processes share it."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import platformdirs

from datamount.storage.arguments import parse_size
from datamount.storage.checksums import sha256_file
from datamount.storage.counters import Tally
from datamount.storage.errors import IntegrityError, StoreConfigError, StoreIOError

CACHE_DIR_ENV = "DATAMOUNT_CACHE_DIR"
CACHE_SIZE_ENV = "DATAMOUNT_CACHE_SIZE"
DEFAULT_MAX_BYTES = 20 << 30
#: What a cache key must be: a sha256 digest as lowercase hex, so that it can name nothing but a file of the cache.
DIGEST = re.compile(r"[0-9a-f]{64}")


def default_cache_dir() -> Path:
    """``$DATAMOUNT_CACHE_DIR``, else datamount's folder in the XDG cache folder."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    return Path(explicit).expanduser() if explicit else platformdirs.user_cache_path("datamount") / "shards"


def _size_from_environment() -> int:
    """The cap ``$DATAMOUNT_CACHE_SIZE`` sets (``20GB``, ``512MiB``, bytes), else :data:`DEFAULT_MAX_BYTES`."""
    written = os.environ.get(CACHE_SIZE_ENV, "").strip()
    if not written:
        return DEFAULT_MAX_BYTES
    try:
        return parse_size(written)
    except ValueError as exc:
        raise StoreConfigError(f"${CACHE_SIZE_ENV}: {exc}") from None


class ContentCache:
    """Files by content: ``use(sha256, size, fill)`` holds a local path with those bytes for the ``with`` block.

    Each file has two locks in ``locks/``, taken with ``flock`` so that they hold across processes:

    - ``<sha256>.use``, shared by every reader between getting the path and finishing with it;
    - ``<sha256>.fill``, exclusive while the file is fetched: a miss calls ``fill(file)`` once, even when several
      processes ask at the same time (the others wait), checks the bytes against ``sha256`` and renames them into place.

    A hit is re-hashed the first time this process uses it, and fetched again when damaged. A copy whose bytes fail a
    check made after the cache handed them out (damaged on disk since this process hashed it) is fetched again over
    it, once (:meth:`refetch`; :meth:`read` does both): only bytes just fetched that fail are the store's.

    Before a new file goes in, the least recently used files go until it fits under ``max_bytes``; eviction takes both
    locks of a file without waiting and skips a file whose locks are held, so a file in use is never removed. The cap
    is passed only while readers hold more than it allows (then by the files they hold).
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None, max_bytes: int | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.max_bytes = max_bytes if max_bytes is not None else _size_from_environment()
        if self.max_bytes < 1:
            raise ValueError(f"the cache size must be positive, got {self.max_bytes}")
        (self.directory / "locks").mkdir(parents=True, exist_ok=True)
        self._verified: set[str] = set()
        #: ``cache_hits``, ``cache_misses`` and ``bytes_verified`` (files hashed: fetched, or first used here).
        self.tally = Tally()

    def __reduce__(self) -> tuple[type[ContentCache], tuple[Path, int]]:
        return (ContentCache, (self.directory, self.max_bytes))

    @property
    def hits(self) -> int:
        """Uses that found the file here, in this process."""
        return int(self.tally.get("cache_hits"))

    @property
    def misses(self) -> int:
        """Uses that fetched the file, in this process."""
        return int(self.tally.get("cache_misses"))

    def path_for(self, sha256: str, *, name: str = "") -> Path:
        """Where the content ``sha256`` is kept; a key that is not a digest is an :class:`IntegrityError`."""
        if not isinstance(sha256, str) or not DIGEST.fullmatch(sha256):
            raise IntegrityError(
                f"{name or 'a cached file'}: the sha256 recorded for it, {sha256!r}, is not a sha256 digest "
                "(64 lowercase hex characters); the manifest that names it is damaged or was edited by hand"
            )
        return self.directory / sha256[:2] / sha256

    @contextlib.contextmanager
    def use(self, sha256: str, size: int, fill: Callable[[BinaryIO], None], *, name: str = "") -> Iterator[Path]:
        """The local path of the content ``sha256`` (``size`` bytes), fetched with ``fill`` when not here, and kept
        from eviction (by any process) until the block ends. ``name`` names the content in errors."""
        with self.held(sha256, size, fill, name=name) as (path, _):
            yield path

    @contextlib.contextmanager
    def held(
        self, sha256: str, size: int, fill: Callable[[BinaryIO], None], *, name: str = ""
    ) -> Iterator[tuple[Path, bool]]:
        """:meth:`use`'s path, and whether it was fetched (and checked against ``sha256``) just now."""
        final = self.path_for(sha256, name=name)
        fetched = False
        with self._lock(f"{sha256}.use", shared=True):
            if self._present(final, sha256, size):
                self.tally.add("cache_hits")
                os.utime(final)
            else:
                with self._lock(f"{sha256}.fill"):
                    if self._present(final, sha256, size):
                        self.tally.add("cache_hits")
                    else:
                        self.tally.add("cache_misses")
                        self._fill(final, sha256, size, fill, name or sha256)
                        fetched = True
            yield final, fetched

    def get(self, sha256: str, size: int, fill: Callable[[BinaryIO], None], *, name: str = "") -> Path:
        """Make sure the content ``sha256`` is here, and return its path. The path is not held: any process may evict
        it once this returns, so read it inside :meth:`use` instead."""
        with self.use(sha256, size, fill, name=name) as path:
            return path

    def read(
        self, sha256: str, size: int, fill: Callable[[BinaryIO], None], *, check: Callable[[bytes], bool], name: str
    ) -> bytes:
        """The bytes of the content ``sha256`` (see :meth:`use`), which must pass ``check``. A kept copy that fails it
        is fetched again over it, once (:meth:`refetch`); bytes just fetched are checked against ``sha256`` by the
        fetch, and an :class:`IntegrityError` naming ``name`` (the store's copy) when they still fail ``check``."""
        for _ in range(2):
            with self.held(sha256, size, fill, name=name) as (path, fetched):
                data = path.read_bytes()
            if check(data):
                return data
            if fetched:
                break
            self.refetch(sha256, size, fill, name=name)  # damaged on this disk since it was hashed here
        raise IntegrityError(
            f"{name}: the bytes fetched from the store match the sha256 recorded for them but not their other "
            "checksum; the manifest that records both is damaged"
        )

    def refetch(self, sha256: str, size: int, fill: Callable[[BinaryIO], None], *, name: str = "") -> None:
        """Fetch the content ``sha256`` again over its kept copy, found damaged by a check made on its bytes (unless
        the copy is whole again when re-hashed here: another reader fetched it meanwhile). The new bytes replace the
        old in one rename: readers that opened the damaged copy keep it, and none finds no file."""
        final = self.path_for(sha256, name=name)
        with self._lock(f"{sha256}.use", shared=True), self._lock(f"{sha256}.fill"):
            self._verified.discard(sha256)
            if not self._present(final, sha256, size):
                self.tally.add("cache_misses")
                self._fill(final, sha256, size, fill, name or sha256)

    def usage(self) -> int:
        """Bytes the cache holds now (files come and go only under the ``.evict`` lock, so this is a true total)."""
        with self._lock(".evict"):
            return sum(size for _, size, _ in self._entries())

    def _present(self, path: Path, sha256: str, size: int) -> bool:
        try:
            if path.stat().st_size != size:
                return False
        except FileNotFoundError:
            return False
        if sha256 not in self._verified:
            self.tally.add("bytes_verified", size)
            if sha256_file(path) != sha256:
                return False
            self._verified.add(sha256)
        return True

    def _fill(self, final: Path, sha256: str, size: int, fill: Callable[[BinaryIO], None], name: str) -> None:
        final.parent.mkdir(parents=True, exist_ok=True)
        self._make_room_on_disk(size, name)
        temporary = final.with_name(f".{final.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
        try:
            try:
                with open(temporary, "wb") as out:
                    fill(out)
            except OSError as exc:
                if exc.errno == errno.ENOSPC:  # the room was taken meanwhile (another writer, more bytes than said)
                    raise self._no_room(size, name, "filled up while it was fetched") from exc
                raise
            got = sha256_file(temporary)
            self.tally.add("bytes_verified", size)
            if got != sha256 or temporary.stat().st_size != size:
                raise IntegrityError(f"{name}: the bytes fetched do not match the sha256 recorded for them")
            with self._lock(".evict"):
                self._evict(room=size)
                os.replace(temporary, final)
            self._verified.add(sha256)
        finally:
            temporary.unlink(missing_ok=True)

    def _make_room_on_disk(self, size: int, name: str) -> None:
        """Evict least recently used files (those not in use) until ``size`` bytes fit on the cache's disk, whatever
        the cap; a :class:`StoreIOError` when they cannot, before anything is fetched."""
        if self._free_bytes() >= size:
            return
        with self._lock(".evict"):
            self._evict_until(lambda _: self._free_bytes() >= size)
            if self._free_bytes() < size:
                raise self._no_room(size, name, "is too small even with every file not in use evicted")

    def _free_bytes(self) -> int:
        found = os.statvfs(self.directory)
        return found.f_bavail * found.f_frsize

    def _no_room(self, size: int, name: str, why: str) -> StoreIOError:
        return StoreIOError(
            f"cannot keep {name} ({size:,} bytes) in the cache {self.directory}: its disk {why} "
            f"({self._free_bytes():,} bytes free); free space there, set {CACHE_DIR_ENV} to a folder on a larger disk, "
            "or read without a cache (cache=False)"
        )

    def _evict(self, room: int) -> None:
        """Remove least recently used files until ``room`` more bytes fit under the cap (called under ``.evict``)."""
        self._evict_until(lambda total: total + room <= self.max_bytes)

    def _evict_until(self, enough: Callable[[int], bool]) -> None:
        """Remove least recently used files not in use, until ``enough(bytes the cache holds)`` (under ``.evict``)."""
        entries = sorted(self._entries(), key=lambda entry: entry[2])
        total = sum(size for _, size, _ in entries)
        for path, size, _ in entries:
            if enough(total):
                return
            if self._remove_unless_held(path):
                total -= size

    def _remove_unless_held(self, path: Path) -> bool:
        sha256 = path.name
        with contextlib.ExitStack() as locks:
            if not all(locks.enter_context(self._lock(f"{sha256}.{kind}", blocking=False)) for kind in ("use", "fill")):
                return False
            path.unlink(missing_ok=True)
            self._verified.discard(sha256)
            # Unlinked while held: a process that opened a lock file before this waits on it, then sees it is stale.
            for kind in ("use", "fill"):
                (self.directory / "locks" / f"{sha256}.{kind}").unlink(missing_ok=True)
            return True

    def _entries(self) -> Iterator[tuple[Path, int, int]]:
        """``(path, size, mtime_ns)`` of each cached file (not the temporary ones)."""
        for path in self.directory.glob("??/*"):
            if DIGEST.fullmatch(path.name):
                with contextlib.suppress(FileNotFoundError):  # evicted by another process since the listing
                    stat = path.stat()
                    yield path, stat.st_size, stat.st_mtime_ns

    @contextlib.contextmanager
    def _lock(self, name: str, *, shared: bool = False, blocking: bool = True) -> Iterator[bool]:
        """Hold ``locks/<name>`` (shared or exclusive); yields False when ``blocking`` is off and another holds it."""
        path = self.directory / "locks" / name
        operation = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB)
        while True:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                acquired = _flock(descriptor, operation)
                if not acquired or _same_file(descriptor, path):
                    yield acquired
                    return
            finally:
                os.close(descriptor)  # which releases the lock


def _flock(descriptor: int, operation: int) -> bool:
    try:
        fcntl.flock(descriptor, operation)
    except BlockingIOError:
        return False
    return True


def _same_file(descriptor: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``descriptor`` (eviction unlinks lock files)."""
    try:
        named = path.stat()
    except FileNotFoundError:
        return False
    opened = os.fstat(descriptor)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)
