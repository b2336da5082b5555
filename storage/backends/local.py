"""Local disk, and POSIX mounts of shared filesystems (GlusterFS, NFS, CephFS) checked against ``/proc/mounts``."""

from __future__ import annotations

import builtins
import collections
import contextlib
import ctypes
import errno
import hashlib
import io
import itertools
import os
import posixpath
import shutil
import stat
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

import xxhash
from fsspec.implementations.local import LocalFileSystem, make_path_posix

from datamount.storage._window import ordered_window
from datamount.storage.backends._options import refuse_unknown
from datamount.storage.errors import StoreConfigError, UnsafePathError
from datamount.storage.files import read_whole
from datamount.storage.mounts import require_mount
from datamount.storage.page_cache import first_page_cached
from datamount.storage.paths import LinkGuard
from datamount.storage.pools import generator_pool
from datamount.storage.store import (
    CHECKED_IN_MEMORY,
    DEFAULT_MAX_BYTES_IN_FLIGHT,
    HASH_GROUP_BYTES,
    HASH_GROUP_ITEMS,
    HASH_GROUPS_AHEAD,
    HASHERS,
    TEMP_PREFIX,
    Store,
    StoredFile,
    _copy_checked,
    _grouped,
    _read_checked,
    _Upload,
    each_until_failure,
)

#: Copies in flight on a local disk: one per core. The bytes go to the page cache and reach the disk together at the
#: commit, so more threads only contend (on 2 cores, 4,000 files of 110 KB took 0.30 s with 2 and 0.49 with 8).
LOCAL_DISK_REQUESTS = max(1, min(8, os.cpu_count() or 1))
#: Files fsynced at a time by :meth:`LocalStore.make_durable` on a shared mount (their paths are read as they come).
SYNC_BATCH = 4096
#: Files announced to the kernel ahead of a sequential :meth:`LocalStore.read_many`.
READ_AHEAD_FILES = 16
#: Once this many files in a row were in the page cache, only one file in :data:`PROBE_EVERY` is asked whether it is
#: (a warm pass then saves a system call per file, ~5% of it); one that is not sends the pass back to asking each.
CACHED_IN_A_ROW = 64
PROBE_EVERY = 16
#: Reading a file that is not itself a link; reading any file.
_READ_NO_LINK = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_CLOEXEC
#: Bytes :meth:`LocalStore.put_many_by_content` reads at once, into one buffer per thread kept across files (a new
#: ``bytes`` per file costs the kernel's zeroing and the page faults of its memory: reading 4,000 files of 110 KB
#: took 0.21 CPU-s that way, 0.05 into a kept buffer). A file this size or smaller is hashed before it is written.
CONTENT_CHUNK = 4 << 20


class LocalStore(Store):
    """A folder on this machine, read and written with plain file I/O.

    With ``mount="glusterfs"`` (or ``"nfs"``, ``"cephfs"``, any ``/proc/mounts`` type) the folder must be on such a
    mount: opening and every batch of writes check it, so that an unmounted mount point is never filled by mistake.
    """

    protocol = "file"
    atomic_put = False
    exclusive_create = True
    needs_dirs = True
    names_after_writing = True
    #: Requests in flight on a shared mount, where each waits on the network.
    default_max_requests = 8

    def __init__(self, root: str, *, url: str, mount: str | None = None, name: str | None = None) -> None:
        options = {"mount": mount} if mount else {}
        super().__init__(LocalFileSystem(), root, url=url, options=options, name=name)
        self.mount = mount
        self._links = LinkGuard(self.root)
        if not mount:
            self.default_max_requests = LOCAL_DISK_REQUESTS

    @classmethod
    def from_url(cls, url: str, *, name: str | None = None, **options: Any) -> LocalStore:
        refuse_unknown(options, {"mount"}, store="local")
        mount = options.pop("mount", None)
        root = make_path_posix(os.path.expanduser(_file_url_path(url)))
        return cls(root, url=f"file://{root}", mount=mount, name=name)

    def check(self) -> None:
        """The mount (``mount=``) is there, and the root, where it exists, is a folder. A missing root is made by
        the first write: a mistyped path opened to read leaves no folder behind."""
        self._check_mount()
        if os.path.lexists(self.root) and not os.path.isdir(self.root):
            raise StoreConfigError(f"{self.url} is not a folder")

    @property
    def root_exists(self) -> bool:
        return os.path.isdir(self.root)

    def _check_mount(self) -> None:
        if self.mount:
            require_mount(self.root, self.mount)

    def full_path(self, path: str, *, allow_root: bool = False) -> str:
        full = super().full_path(path, allow_root=allow_root)
        if full == self.root:
            return full
        if not self._links.leads_inside(full):
            raise UnsafePathError(f"store path {path!r} leads outside the store root {self.root} (through a link)")
        return full

    def local_path(self, path: str = "") -> str:
        return self.full_path(path, allow_root=True)

    def list(self, prefix: str = "", *, recursive: bool = True) -> dict[str, int]:
        # os.scandir directly: fsspec's find builds an info dict per file (several stat calls and string rewrites),
        # which made listing a version's objects a tenth of an upload. Links to folders are not followed.
        full = self.full_path(prefix, allow_root=True)
        cut = len(self.root.rstrip("/")) + 1
        listing: dict[str, int] = {}
        with self._errors("list", prefix):
            if os.path.isfile(full):
                if not os.path.basename(full).startswith(TEMP_PREFIX):
                    listing[full[cut:]] = os.path.getsize(full)
                return listing
            folders = [full]
            while folders:
                try:
                    entries = os.scandir(folders.pop())
                except (FileNotFoundError, NotADirectoryError):
                    continue
                with entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            if recursive:
                                folders.append(entry.path)
                        elif entry.is_file() and not entry.name.startswith(TEMP_PREFIX):
                            with contextlib.suppress(FileNotFoundError):  # removed since the folder was read
                                listing[entry.path[cut:]] = entry.stat().st_size
        return dict(sorted(listing.items()))

    def _read_many(self, items: Iterable[tuple[str, int]], max_requests: int | None, max_bytes: int) -> Iterator[bytes]:
        """On a local disk the files are read one after the other in this thread, each with one ``read()`` of the
        size it is said to have; the next ones are opened ahead, and those not in the page cache announced to the
        kernel (``POSIX_FADV_WILLNEED``) so that it reads them from the disk meanwhile. Threads would only fight over
        the GIL (and the process's page faults) for data that is, or soon will be, in the page cache. Shared
        filesystems (``mount=``), and an explicit ``max_requests``, keep many reads in flight on threads."""
        if self.mount or max_requests is not None or not hasattr(os, "posix_fadvise"):
            yield from super()._read_many(items, max_requests, max_bytes)
            return
        pending = iter(items)
        ahead: collections.deque[tuple[str, int, int | None]] = collections.deque()
        announcer = _ReadAhead()
        try:
            for path, size in itertools.islice(pending, READ_AHEAD_FILES):
                ahead.append((path, size, self._open_ahead(path, announcer)))
            while ahead:
                path, size, descriptor = ahead.popleft()
                following = next(pending, None)
                if following is not None:
                    ahead.append((*following, self._open_ahead(following[0], announcer)))
                if descriptor is None:
                    yield self.read(path)
                    continue
                try:
                    data = read_whole(descriptor, size)
                except OSError as exc:
                    raise self._translate(exc, "read", path) from exc
                finally:
                    os.close(descriptor)
                yield data
        finally:
            for _, _, descriptor in ahead:
                if descriptor is not None:
                    os.close(descriptor)

    def read_many_hashed(
        self,
        paths: Iterable[str],
        *,
        sizes: Iterable[int] | None = None,
        max_requests: int | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES_IN_FLIGHT,
    ) -> Iterator[tuple[bytes, str]]:
        """On a local disk each file is hashed by the thread that read it, while its bytes are in that core's cache:
        a group of files per task, a task per core (1.6 GB/s where reading on one thread and hashing on others gave
        1.1). Shared filesystems and an explicit ``max_requests`` keep many reads in flight instead."""
        if self.mount or max_requests is not None:
            yield from super().read_many_hashed(paths, sizes=sizes, max_requests=max_requests, max_bytes=max_bytes)
            return
        items = zip(paths, sizes, strict=True) if sizes is not None else ((path, 0) for path in paths)
        groups = _grouped(items, HASH_GROUP_ITEMS, HASH_GROUP_BYTES)
        with generator_pool(HASHERS, "datamount-io") as pool:
            for _, (pairs, failure) in ordered_window(
                lambda group: pool.submit(self._read_hashed, group), groups, max_in_flight=HASH_GROUPS_AHEAD
            ):
                yield from pairs
                if failure is not None:
                    raise failure

    def _read_hashed(
        self, group: builtins.list[tuple[str, int]]
    ) -> tuple[builtins.list[tuple[bytes, str]], BaseException | None]:
        """The group's files with their sha256s up to the first failure, and that failure (raised after them)."""
        return each_until_failure(lambda item: _with_sha256(self.read(item[0])), group)

    def _open_ahead(self, path: str, announcer: _ReadAhead) -> int | None:
        """``path`` opened (a descriptor), and announced to the kernel so that it reads it ahead where it is not in
        the page cache; ``None`` when it cannot be opened (reading it then raises the error)."""
        try:
            descriptor = self._open_descriptor(path)
        except (OSError, ValueError, UnsafePathError):
            return None
        announcer.announce(descriptor)
        return descriptor

    def _open_descriptor(self, path: str) -> int:
        """``path`` opened for reading. A file that is itself a link is refused by the open (``O_NOFOLLOW``) rather
        than by an ``lstat`` of every file; such a link is then followed only if it leads inside the root."""
        full = Store.full_path(self, path)
        if self._links.folder_inside(os.path.dirname(full)):
            try:
                return os.open(full, _READ_NO_LINK)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
        return os.open(self.full_path(path), _READ)  # full_path raises UnsafePathError where the link leads outside

    def _open_file(self, path: str) -> io.FileIO:
        """``path`` opened for reading, unbuffered (``FileIO.readall`` sizes one buffer from ``fstat`` and fills it,
        with no second copy)."""
        descriptor = self._open_descriptor(path)
        try:
            return io.FileIO(descriptor, "r")
        except BaseException:
            os.close(descriptor)  # a folder: FileIO refuses it, and does not close what it did not open
            raise

    def read(self, path: str) -> bytes:
        try:  # not self._errors: a local read is short enough for a context manager's cost to show
            with self._open_file(path) as f:
                return f.readall()
        except OSError as exc:
            raise self._translate(exc, "read", path) from exc

    def read_range(self, path: str, start: int, end: int) -> bytes:
        if not 0 <= start <= end:
            raise ValueError(f"byte range must satisfy 0 <= start <= end, got [{start}, {end})")
        full = self.full_path(path)
        with self._errors("read", path), open(full, "rb") as f:
            f.seek(start)
            return f.read(end - start)

    def _open_for_hashing(self, full: str) -> IO[bytes]:
        return open(full, "rb")

    def write(self, path: str, data: bytes | bytearray | memoryview) -> None:
        full = self.full_path(path)
        with self._errors("write", path):
            self._before_write(full)
            with self._temporary(full) as tmp:
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, full)

    def _create(self, full: str, data: bytes) -> None:
        # A fully written, synced file linked into place: link() fails if the name exists, and is atomic.
        with self._temporary(full) as tmp:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, full)
            finally:
                os.unlink(tmp)
        _fsync(os.path.dirname(full))  # the new name durable too, where the folder can be synced

    def _put_one_sync(self, local: str, full: str) -> None:
        with self._temporary(full) as tmp:
            shutil.copyfile(local, tmp)
            os.replace(tmp, full)

    def _put_checked_sync(self, item: _Upload) -> int:
        # Plain file I/O into a temporary name, renamed into place; the bytes reach the disk at the commit, together
        # with the version's other files (make_durable), not one fsync per file.
        with self._temporary(item.full) as tmp:
            with open(tmp, "xb") as out:
                if os.path.getsize(item.local) <= CHECKED_IN_MEMORY:
                    size = out.write(_read_checked(item))
                else:
                    size = _copy_checked(item, out.write)
            os.replace(tmp, item.full)
        return size

    def put_many_by_content(
        self,
        files: Iterable[tuple[str, int]],
        address: Callable[[str], str],
        *,
        staging: str,
        present: Mapping[str, int] | None = None,
        max_requests: int | None = None,
    ) -> Iterator[StoredFile]:
        """Each file is read, hashed and written by one thread, from one buffer that stays in that core's cache;
        a group of files per task, a task per core on a local disk (many on a shared mount)."""
        writer = _ContentWriter(self, address, staging, present or {})
        groups = _grouped(files, HASH_GROUP_ITEMS, HASH_GROUP_BYTES)
        workers = max_requests or self.default_max_requests
        with generator_pool(workers, "datamount-put") as pool:
            for _, (stored, failure) in ordered_window(
                lambda group: pool.submit(writer.store_group, group), groups, max_in_flight=workers + 1
            ):
                yield from stored
                if failure is not None:
                    raise failure

    def _make_durable(self, paths: Iterator[str]) -> None:
        """On a local disk one ``syncfs`` of the root's filesystem writes back everything at once (the paths are
        not even looked at). A shared mount (``mount=``) does not pass ``syncfs`` on to its servers (FUSE), so there
        each file, then each folder that holds one, is fsynced, many at a time: the files :data:`SYNC_BATCH` at a
        time as they come, the folders (a few hundred: a dataset's are its areas and ``objects/``'s 256) after."""
        self._check_mount()
        if not self.mount and getattr(_LIBC, "syncfs", None) is not None:
            for _ in paths:  # each checked (Store.make_durable) before the disk is asked
                pass
            self._sync_filesystem()
            return
        folders: set[str] = set()
        with ThreadPoolExecutor(self.default_max_requests, thread_name_prefix="datamount-sync") as pool:
            while batch := sorted({self.full_path(path) for path in itertools.islice(paths, SYNC_BATCH)}):
                folders.update(os.path.dirname(full) for full in batch)
                self._fsync_all(pool, batch)
            self._fsync_all(pool, sorted(folders))

    def _fsync_all(self, pool: ThreadPoolExecutor, batch: builtins.list[str]) -> None:
        for full, failure in zip(batch, pool.map(_fsync, batch), strict=True):
            if failure is not None:
                raise self._translate(failure, "make durable", os.path.relpath(full, self.root))

    def _sync_filesystem(self) -> bool:
        """``syncfs`` the filesystem of the root; False where the C library has no ``syncfs``."""
        syncfs = getattr(_LIBC, "syncfs", None)
        if syncfs is None:
            return False
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if syncfs(fd) != 0:
                error = ctypes.get_errno()
                raise self._translate(OSError(error, os.strerror(error)), "make durable", "")
        finally:
            os.close(fd)
        return True

    def _before_write(self, full: str) -> None:
        self._check_mount()
        os.makedirs(os.path.dirname(full), exist_ok=True)


_LIBC = ctypes.CDLL(None, use_errno=True)


class _ContentWriter:
    """The work of :meth:`LocalStore.put_many_by_content` for one call: files in, objects named by content out.

    Per file it costs the read, the hashes, the write and four system calls (create, link, unlink, close): each
    folder is checked (and made) once, temporary names are a token of the call and a counter, not a random draw.
    """

    def __init__(self, store: LocalStore, address: Callable[[str], str], staging: str, present: Mapping[str, int]):
        self.store = store
        self.address = address
        self.present = present
        self.staging = staging
        full_staging = store.full_path(staging, allow_root=True)
        with store._errors("upload to", staging):
            store._before_write(posixpath.join(full_staging, "object"))
        self.folders: dict[str, str] = {}  # store folder -> its checked full path
        self.buffers = threading.local()
        self.temporaries = f"{full_staging}/{TEMP_PREFIX}object.{uuid.uuid4().hex[:12]}."
        self.numbers = itertools.count()

    def store_group(self, group: list[tuple[str, int]]) -> tuple[list[StoredFile], BaseException | None]:
        """The group's files stored, up to the first failure, and that failure (raised after them)."""
        buffer = getattr(self.buffers, "chunk", None)
        if buffer is None:
            buffer = self.buffers.chunk = memoryview(bytearray(CONTENT_CHUNK))
        return each_until_failure(lambda item: self.store_file(item[0], buffer), group)

    def store_file(self, local: str, buffer: memoryview) -> StoredFile:
        with open(local, "rb", buffering=0) as source:
            size = _fill(source, buffer, local)
            if size < len(buffer):  # the whole file: named before it is written, and only written when needed
                data = buffer[:size]
                sha256, fast = hashlib.sha256(data).hexdigest(), xxhash.xxh3_64_hexdigest(data)
                path = self.address(sha256)
                if self.present.get(path) == size:
                    return StoredFile(path, sha256, fast, size, written=False)
                tmp = f"{self.temporaries}{next(self.numbers)}"
                try:
                    with open(tmp, "xb") as out:
                        out.write(data)
                    return StoredFile(path, sha256, fast, size, self._name(tmp, path, size))
                except BaseException as exc:
                    raise self._failed(exc, tmp, f"upload {local} to", path) from exc
            tmp = f"{self.temporaries}{next(self.numbers)}"  # larger: written as it is read, then named
            hashers = hashlib.sha256(), xxhash.xxh3_64()
            try:
                with open(tmp, "xb") as out:
                    read = size
                    while read:
                        for hasher in hashers:
                            hasher.update(buffer[:read])
                        out.write(buffer[:read])
                        read = _fill(source, buffer, local)
                        size += read
                sha256, fast = (hasher.hexdigest() for hasher in hashers)
                path = self.address(sha256)
                return StoredFile(path, sha256, fast, size, self._name(tmp, path, size))
            except BaseException as exc:
                raise self._failed(exc, tmp, f"upload {local} to", self.staging) from exc

    def _failed(self, exc: BaseException, tmp: str, op: str, path: str) -> BaseException:
        """``exc`` as the error to raise, the temporary file ``tmp`` removed: a failure to read the local file as it
        is (it names that file), any other one as a failure to ``op`` ``path`` in the store."""
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, _LocalReadError) or not isinstance(exc, Exception):
            return exc
        return self.store._translate(exc, op, path)

    def _name(self, tmp: str, path: str, size: int) -> bool:
        """Give the written temporary file ``tmp`` its name ``path``; whether it was needed (``False``: a file of
        that name and size was there already). Anything else of that name (damaged, a link) is replaced."""
        folder, name = posixpath.split(path)
        full_folder = self.folders.get(folder)
        if full_folder is None:
            full_folder = self.store.full_path(folder)  # checked: inside the root, links followed
            self.store._before_write(f"{full_folder}/{name}")
            self.folders[folder] = full_folder
        full = f"{full_folder}/{name}"
        try:
            os.link(tmp, full)
        except FileExistsError:
            there = os.stat(full, follow_symlinks=False)
            if stat.S_ISREG(there.st_mode) and there.st_size == size:
                os.unlink(tmp)
                return False
            os.replace(tmp, full)
            return True
        os.unlink(tmp)
        return True


class _LocalReadError(OSError):
    """A local file being stored could not be read (raised as it is: it names that file, not the store)."""


def _fill(source: io.FileIO, buffer: memoryview, local: str) -> int:
    """Read from ``source`` until ``buffer`` is full or the file ends; how many bytes were read. A failure names the
    local file ``local``."""
    filled = 0
    try:
        while filled < len(buffer) and (count := source.readinto(buffer[filled:])):
            filled += count
    except OSError as exc:
        raise _LocalReadError(exc.errno, exc.strerror, local) from exc
    return filled


def _with_sha256(data: bytes) -> tuple[bytes, str]:
    return data, hashlib.sha256(data).hexdigest()


def _fsync(full: str) -> OSError | None:
    """fsync the file or folder ``full``; the error, if any."""
    try:
        fd = os.open(full, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        return exc
    return None


def _file_url_path(url: str) -> str:
    """The path a ``file:`` URL names (``file:///p``, ``file://localhost/p`` and ``file:/p`` alike); anything else is
    a path as it is. A URL naming another host, or no absolute path, is a :class:`StoreConfigError`."""
    if not url.startswith("file:"):
        return url
    rest = url[len("file:") :]
    if rest.startswith("//"):
        host, slash, path = rest[2:].partition("/")
        if host not in ("", "localhost"):
            raise StoreConfigError(f"{url!r} names a folder on host {host!r}: a file URL names one on this machine")
        rest = slash + path
    if not rest.startswith("/"):
        raise StoreConfigError(f"{url!r} is not a file URL (file:///absolute/path); write ./{rest} for a relative path")
    return rest


class _ReadAhead:
    """Announces files about to be read to the kernel (``POSIX_FADV_WILLNEED``), those not in the page cache only,
    asking of fewer files once many in a row were cached (:data:`CACHED_IN_A_ROW`, :data:`PROBE_EVERY`)."""

    def __init__(self) -> None:
        self.cached_in_a_row = 0
        self.seen = 0

    def announce(self, descriptor: int) -> None:
        self.seen += 1
        if self.cached_in_a_row >= CACHED_IN_A_ROW and self.seen % PROBE_EVERY:
            return
        if first_page_cached(descriptor):
            self.cached_in_a_row += 1
            return
        self.cached_in_a_row = 0
        with contextlib.suppress(OSError):
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_WILLNEED)
