"""The :class:`Store`: a root folder on an fsspec filesystem, with the operations datasets and readers need."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import errno
import hashlib
import os
import posixpath
import tempfile
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any, ClassVar, TypeVar

import fsspec
import xxhash
from fsspec.asyn import AsyncFileSystem

from datamount.storage import redact
from datamount.storage._window import ordered_window
from datamount.storage.checksums import copy_check, read_checked, require_unchanged
from datamount.storage.counters import Tally, added
from datamount.storage.errors import (
    DatamountError,
    ObjectExistsError,
    ObjectNotFoundError,
    StoreConfigError,
    StoreIOError,
    StorePermissionError,
    StoreUnreachableError,
)
from datamount.storage.paths import clean_relpath
from datamount.storage.pools import generator_pool

T = TypeVar("T")
R = TypeVar("R")
#: A file for :meth:`Store.put_many`: ``(local_path, store_path)``, or with the sha256 (and xxh3-64) it must have.
PutItem = (
    tuple[str | os.PathLike[str], str]
    | tuple[str | os.PathLike[str], str, str]
    | tuple[str | os.PathLike[str], str, str, str]
)

TEMP_PREFIX = ".~tmp."
"""Basename prefix of objects being written; :meth:`Store.list` never shows them."""

HASH_CHUNK = 4 << 20
DEFAULT_MAX_BYTES_IN_FLIGHT = 256 << 20
#: A thread-pool read task takes up to this many objects, or this many bytes when sizes are known.
READ_GROUP_ITEMS = 16
READ_GROUP_BYTES = 4 << 20
#: Objects (and bytes) hashed by one task of :meth:`Store.read_many_hashed`.
HASH_GROUP_ITEMS = 32
HASH_GROUP_BYTES = 4 << 20
#: Hashing tasks at once: sha256 (about 1.6 GB/s per core) is the slowest step of a checked local read, so every
#: core takes a group.
HASHERS = max(1, min(4, os.cpu_count() or 1))
#: Groups read and hashed ahead of the one being handed out: one per hasher, and one more.
HASH_GROUPS_AHEAD = HASHERS + 1
#: An upload task on the thread pool copies up to this many files.
PUT_GROUP_ITEMS = 8
#: Every store of this process, and (in a forked child) every filesystem it inherited, held so that none is
#: collected there: their finalizers would close connections the parent still uses, or wait for an event loop
#: that does not exist in the child.
_LIVE_STORES: weakref.WeakSet[Store] = weakref.WeakSet()
_INHERITED_FILESYSTEMS: list[Any] = []


def _hold_filesystems_across_fork() -> None:
    """Just before a fork, in the parent: the child will hold every filesystem fsspec has cached (its own handler
    empties the cache in the child) and every store's."""
    cached = getattr(fsspec.spec, "_registered_classes", ())
    _INHERITED_FILESYSTEMS.extend(instance for cls in list(cached) for instance in list(cls._cache.values()))
    _INHERITED_FILESYSTEMS.extend(store._fs for store in list(_LIVE_STORES))


def _forget_held_filesystems() -> None:
    """Just after a fork, in the parent: it holds its filesystems itself."""
    _INHERITED_FILESYSTEMS.clear()


os.register_at_fork(before=_hold_filesystems_across_fork, after_in_parent=_forget_held_filesystems)
#: Files up to this size are read into memory to be checked and sent; larger ones are checked on a local copy.
CHECKED_IN_MEMORY = 64 << 20

#: OS error numbers that mean the store did not answer (rather than answered with an error).
UNREACHABLE_ERRNOS = {
    errno.ECONNREFUSED,
    errno.ECONNRESET,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.ETIMEDOUT,
    errno.EHOSTDOWN,
}


@dataclass(frozen=True)
class ObjectInfo:
    """What a store knows of one path."""

    path: str
    size: int
    is_dir: bool


@dataclass(frozen=True)
class StoredFile:
    """A local file stored under its content's name by :meth:`Store.put_many_by_content`: the checksums and size of
    the bytes read, where they are now, and whether they were written (``False``: the store held them already)."""

    path: str
    sha256: str
    xxh3: str
    size: int
    written: bool


@dataclass(frozen=True)
class Failure:
    """How a backend exception reads to a user: the datamount error kind and a short reason."""

    kind: type[DatamountError]
    reason: str


class Store:
    """A root on an fsspec filesystem; every path given to it is relative to that root and may not leave it.

    Build one with :func:`datamount.storage.open_store`. Subclasses adapt one backend each: how the filesystem is
    built from a URL, which errors mean what, and which writes are atomic.

    Attributes
    ----------
    fs : fsspec.AbstractFileSystem
        The underlying filesystem.
    root : str
        The root path on ``fs`` (without protocol).
    url : str
        The root as a URL, credentials masked.
    name : str or None
        The profile the store was opened from, if any.
    """

    protocol: ClassVar[str] = ""
    #: Other processes, on this machine and others, that open the store's URL see the same objects (not so for a
    #: store that lives in one process's memory): the store can be handed to worker processes, Ray tasks and actors.
    shareable: ClassVar[bool] = True
    #: :meth:`create` is exclusive: of several writers creating one path at once, exactly one succeeds. Where it is
    #: not (a generic fsspec filesystem), :meth:`create` checks and then writes, which two writers can both pass.
    exclusive_create: ClassVar[bool] = False
    #: A single ``pipe_file``/``put_file`` is atomic (object stores): no temporary name is needed.
    atomic_put: ClassVar[bool] = False
    #: Parent folders must exist before a write (file systems, not object stores).
    needs_dirs: ClassVar[bool] = True
    #: :meth:`put_many_by_content` is available: a file can be stored under a name found from its bytes while they
    #: are being written (a temporary name linked into place), so each local file is read once.
    names_after_writing: ClassVar[bool] = False
    #: Requests kept in flight by :meth:`read_many` and :meth:`put_many` unless told otherwise.
    default_max_requests: ClassVar[int] = 16
    #: Seconds :meth:`check` may take before the store is reported unreachable.
    check_timeout: ClassVar[float] = 12.0

    def __init__(
        self,
        fs: fsspec.AbstractFileSystem,
        root: str,
        *,
        url: str,
        options: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        self.fs = fs
        _LIVE_STORES.add(self)
        self.root = root.rstrip("/") or "/"
        self.url = redact.redact_url(url.rstrip("/") or url)
        self.name = name
        self._public_options = redact.redact_options(options or {})
        self._secrets = redact.note_secrets(url, options or {})
        self._is_async = isinstance(fs, AsyncFileSystem) and getattr(fs, "async_impl", False)
        #: Reads sent to the store (``requests``), for readers' statistics (see :meth:`counts`).
        self.tally = Tally()

    # -- construction ------------------------------------------------------------------------------------------

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The filesystem; in a process forked from the one that made it, a new one made the same way (a client's
        connections and event loop do not survive fork), so that a store works in forked workers as it does here."""
        if self._fs_pid != os.getpid():
            self._fs = self._filesystem_after_fork(self._fs)
            self._fs_pid = os.getpid()
        return self._fs

    @fs.setter
    def fs(self, filesystem: fsspec.AbstractFileSystem) -> None:
        self._fs = filesystem
        self._fs_pid = os.getpid()

    def _filesystem_after_fork(self, inherited: fsspec.AbstractFileSystem) -> fsspec.AbstractFileSystem:
        """A new filesystem like ``inherited``, for a forked child: fsspec's own recipe (as for pickling), the same
        class with the same arguments, never the cached instance. The inherited one is kept, never closed (see
        ``_hold_filesystems_across_fork``): its connections are the parent's too."""
        return type(inherited)(*inherited.storage_args, **{**inherited.storage_options, "skip_instance_cache": True})

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickled in a spawned process: the filesystem was made there, by the unpickling.
        self.__dict__.update(state)
        self._fs_pid = os.getpid()
        _LIVE_STORES.add(self)

    @classmethod
    def from_url(cls, url: str, *, name: str | None = None, **options: Any) -> Store:
        """Open the store rooted at ``url``; ``options`` go to the fsspec filesystem."""
        if url.startswith(("http://", "https://")) and ("?" in url or "#" in url):
            raise StoreConfigError(
                f"{redact.redact_url(url.split('?')[0].split('#')[0])!r}: a store URL names a folder, and each file's "
                "name goes after it, so a query (?...) or fragment (#...) would end up inside every file's URL; give "
                "headers or tokens as the client_kwargs option (in a profile) instead"
            )
        try:
            fs, root = fsspec.core.url_to_fs(url, **options)
        except ImportError as exc:
            from datamount.storage.errors import BackendNotInstalledError

            raise BackendNotInstalledError(f"cannot open {redact.redact_url(url)}: {exc}") from exc
        return cls(fs, root, url=url, options=options, name=name)

    def check(self) -> None:
        """Make sure the store answers and its root is usable; raise a clear error otherwise."""
        with self._errors("open", ""):
            self.fs.exists(self.root)

    def _call_with_deadline(self, op: str, coroutine_function: Callable[..., Awaitable[R]], *args: Any) -> R:
        """Run an async filesystem call from this thread, failing as unreachable after :attr:`check_timeout`."""
        from fsspec.asyn import sync
        from fsspec.exceptions import FSTimeoutError

        with self._errors(op, ""):
            try:
                return sync(self.fs.loop, coroutine_function, *args, timeout=self.check_timeout)
            except FSTimeoutError as exc:
                raise StoreUnreachableError(
                    f"cannot {op} {self.url}: no answer within {self.check_timeout:g} s from {self.endpoint}"
                ) from exc

    @property
    def endpoint(self) -> str:
        """Where the store's requests go, for messages (a host URL, or the service's name)."""
        return self.url

    def close(self) -> None:
        """Release what the store holds (connections are pooled by fsspec and closed at exit)."""

    def counts(self) -> dict[str, float]:
        """What the store did in this process, for readers' statistics: ``requests``, the reads sent to a remote store
        (a whole object or a byte range each; a local folder's are file reads, not counted), and where the client
        counts them (obstore's S3 client), ``retries`` (new attempts after a failed request) and ``throttled_s``
        (seconds every request was paused after a throttling answer)."""
        client = getattr(self.fs, "tally", None)  # a client that counts its own retries and pauses
        return added([self.tally.snapshot(), client.snapshot() if isinstance(client, Tally) else {}])

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in sorted(self._public_options.items()))
        label = f"{self.name!r}, " if self.name else ""
        return f"{type(self).__name__}({label}{self.url!r}{', ' + options if options else ''})"

    # -- paths ---------------------------------------------------------------------------------------------------

    def full_path(self, path: str, *, allow_root: bool = False) -> str:
        """The path on :attr:`fs` of the store-relative ``path`` (validated: it cannot leave the root)."""
        rel = clean_relpath(path, allow_root=allow_root)
        if not rel:
            return self.root
        return f"{self.root}/{rel}" if self.root != "/" else f"/{rel}"

    def local_path(self, path: str = "") -> str | None:
        """The path on this machine where the bytes of ``path`` (by default the root folder) can be read or
        memory-mapped directly, with no request to the store; ``None`` when the store is not a folder on this
        machine (object stores, HDFS, memory). ``store.local_path() is not None`` thus asks whether reads are
        local file reads."""
        clean_relpath(path, allow_root=True)
        return None

    @property
    def root_exists(self) -> bool:
        """Whether the store's root is there. A local folder is made by the store's first write (opening a mistyped
        path to read makes nothing); object stores check their bucket when they are opened."""
        return True

    def url_for(self, path: str = "") -> str:
        """The URL of ``path`` in this store, for messages and for tools outside datamount."""
        rel = clean_relpath(path, allow_root=True) if path else ""
        return f"{self.url}/{rel}" if rel else self.url

    def _relative(self, full: str) -> str:
        full = full.rstrip("/")
        prefix = self.root.rstrip("/") + "/"
        return full[len(prefix) :] if full.startswith(prefix) else full

    # -- reading -------------------------------------------------------------------------------------------------

    def read(self, path: str) -> bytes:
        """The whole content of the object at ``path``."""
        full = self.full_path(path)
        self.tally.add("requests")
        with self._errors("read", path):
            return self.fs.cat_file(full)

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object at ``path`` (shorter at the end of the object)."""
        if not 0 <= start <= end:
            raise ValueError(f"byte range must satisfy 0 <= start <= end, got [{start}, {end})")
        full = self.full_path(path)
        if start == end:
            return b""
        self.tally.add("requests")
        with self._errors("read", path):
            return self.fs.cat_file(full, start=start, end=end)

    def read_range_buffer(self, path: str, start: int, end: int) -> bytes | memoryview:
        """As :meth:`read_range`, but where the client has the bytes in a buffer of its own (obstore), a read-only
        view of it rather than a copy: for a reader that hands the bytes straight to Arrow."""
        cat_buffer = getattr(self.fs, "cat_buffer", None)
        if cat_buffer is None:
            return self.read_range(path, start, end)
        if not 0 <= start <= end:
            raise ValueError(f"byte range must satisfy 0 <= start <= end, got [{start}, {end})")
        full = self.full_path(path)
        self.tally.add("requests")
        with self._errors("read", path):
            return cat_buffer(full, start=start, end=end)

    def read_many(
        self,
        paths: Iterable[str],
        *,
        sizes: Iterable[int] | None = None,
        max_requests: int | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES_IN_FLIGHT,
    ) -> Iterator[bytes]:
        """Yield the content of each of ``paths``, in order, with many reads in flight at once.

        Parameters
        ----------
        paths
            Store-relative paths; may be a lazy iterable (it is consumed as the window advances).
        sizes
            The objects' sizes, in the same order, when known: then the bytes in flight stay under ``max_bytes``.
        max_requests
            Reads in flight at most (default :attr:`default_max_requests`).
        max_bytes
            Bytes in flight at most, when ``sizes`` are given (one larger object still goes alone).
        """
        items: Iterable[tuple[str, int]] = (
            zip(paths, sizes, strict=True) if sizes is not None else ((p, 0) for p in paths)
        )
        yield from self._read_many(items, max_requests, max_bytes)

    def _read_many(self, items: Iterable[tuple[str, int]], max_requests: int | None, max_bytes: int) -> Iterator[bytes]:
        """The reads of :meth:`read_many`, over ``(path, size)`` pairs (size 0 when unknown)."""
        limit = max_requests or self.default_max_requests
        if self._is_async:
            with self._submitter(self._read_one, self._aread_one, limit) as submit:
                window = ordered_window(
                    submit, items, max_in_flight=limit, weight=lambda item: item[1], max_weight=max_bytes
                )
                for _, data in window:
                    yield data
            return
        # Threads: hand each worker a group of objects, so that the hand-off cost is paid once per group.
        groups = _grouped(items, READ_GROUP_ITEMS, READ_GROUP_BYTES)
        with self._submitter(self._read_group, self._aread_one, limit) as submit:
            window = ordered_window(
                submit, groups, max_in_flight=limit, weight=lambda group: sum(s for _, s in group), max_weight=max_bytes
            )
            for _, (blobs, failure) in window:
                yield from blobs
                if failure is not None:
                    raise failure

    def read_many_hashed(
        self,
        paths: Iterable[str],
        *,
        sizes: Iterable[int] | None = None,
        max_requests: int | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES_IN_FLIGHT,
    ) -> Iterator[tuple[bytes, str]]:
        """As :meth:`read_many`, each object's bytes with their sha256 (hex), for a caller that checks them. The
        digests are computed on threads of their own (hashlib lets go of the GIL) while later objects arrive."""
        blobs = self.read_many(paths, sizes=sizes, max_requests=max_requests, max_bytes=max_bytes)
        failures: list[Exception] = []

        def until_failure() -> Iterator[tuple[bytes, int]]:
            try:
                for data in blobs:
                    yield data, len(data)
            except Exception as exc:  # raised once the objects before it are handed out: failures come in order
                failures.append(exc)

        groups = _grouped(until_failure(), HASH_GROUP_ITEMS, HASH_GROUP_BYTES)
        with generator_pool(HASHERS, "datamount-hash") as hashers:
            for group, digests in ordered_window(
                lambda group: hashers.submit(_sha256s, group), groups, max_in_flight=HASH_GROUPS_AHEAD
            ):
                yield from zip((data for data, _ in group), digests, strict=True)
        if failures:
            raise failures[0]

    def read_ranges(
        self, path: str, ranges: Iterable[tuple[int, int]], *, max_requests: int | None = None
    ) -> Iterator[bytes]:
        """Yield bytes ``[start, end)`` of the object at ``path`` for each range, in order, many in flight at once."""
        full = self.full_path(path)
        limit = max_requests or self.default_max_requests

        def fetch(item: tuple[int, int]) -> bytes:
            return self.read_range(path, *item)

        async def afetch(item: tuple[int, int]) -> bytes:
            if item[0] >= item[1]:
                return b""  # s3fs turns an empty range into a request for the whole object
            self.tally.add("requests")
            try:
                return await self.fs._cat_file(full, start=item[0], end=item[1])
            except Exception as exc:
                raise self._translate(exc, "read", path) from exc

        with self._submitter(fetch, afetch, limit) as submit:
            for _, data in ordered_window(submit, ranges, max_in_flight=limit):
                yield data

    def _read_group(self, group: list[tuple[str, int]]) -> tuple[list[bytes], BaseException | None]:
        """The group's objects up to the first failure, and that failure (raised after them, in order)."""
        return each_until_failure(self._read_one, group)

    def _read_one(self, item: tuple[str, int]) -> bytes:
        return self.read(item[0])

    async def _aread_one(self, item: tuple[str, int]) -> bytes:
        path, size = item
        full = self.full_path(path)
        self.tally.add("requests")
        try:
            return await self._cat_object(full, size)
        except Exception as exc:
            raise self._translate(exc, "read", path) from exc

    async def _cat_object(self, full: str, size: int) -> bytes:
        """The whole object at ``full``, said to have ``size`` bytes (0: not known); a client that reads an object of
        known size more cheaply uses it."""
        return await self.fs._cat_file(full)

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> IO[bytes]:
        """A file object on ``path``, for readers that stream (binary modes only)."""
        if "b" not in mode:
            raise ValueError(f"only binary modes are supported, got {mode!r}")
        full = self.full_path(path)
        with self._errors("open", path):
            return self.fs.open(full, mode, **kwargs)

    def sha256(self, path: str) -> str:
        """The hex sha256 of the object at ``path``, computed while streaming it."""
        return self.checksums(path)[0]

    def checksums(self, path: str) -> tuple[str, str]:
        """The hex sha256 and xxh3-64 of the object at ``path``, computed while streaming it once."""
        digest, fast = hashlib.sha256(), xxhash.xxh3_64()
        with self._errors("read", path), self._open_for_hashing(self.full_path(path)) as stream:
            while chunk := stream.read(HASH_CHUNK):
                digest.update(chunk)
                fast.update(chunk)
        return digest.hexdigest(), fast.hexdigest()

    def _open_for_hashing(self, full: str) -> IO[bytes]:
        return self.fs.open(full, "rb", block_size=HASH_CHUNK)

    # -- writing -------------------------------------------------------------------------------------------------

    def write(self, path: str, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` to ``path`` atomically: readers see the old object or the new one, never a part."""
        full = self.full_path(path)
        with self._errors("write", path):
            self._before_write(full)
            if self.atomic_put:
                self.fs.pipe_file(full, bytes(data))
            else:
                with self._temporary(full) as tmp:
                    self.fs.pipe_file(tmp, bytes(data))
                    self._replace(tmp, full)

    def create(self, path: str, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` to ``path`` only if nothing is there yet, atomically.

        Of several writers creating one path at once, one succeeds and the others get :class:`ObjectExistsError`
        (exclusively so where :attr:`exclusive_create` is true: ``O_EXCL``-style links on file systems, conditional
        writes on object stores). Versions of datasets are committed this way.
        """
        full = self.full_path(path)
        with self._errors("create", path):
            self._before_write(full)
            self._create(full, bytes(data))

    def _create(self, full: str, data: bytes) -> None:
        """The best a generic fsspec filesystem offers: look, then write."""
        if self.fs.exists(full):
            raise FileExistsError(full)
        with self._temporary(full) as tmp:
            self.fs.pipe_file(tmp, data)
            self._replace(tmp, full)

    def make_durable(self, paths: Iterable[str]) -> None:
        """Make the objects at ``paths``, and their names, survive a crash of the machine.

        Writes do not wait for the disk one by one: the files of a version are made durable together, right before
        its manifest is created (:func:`datamount.datasets.catalog.commit`). On object stores and HDFS a finished
        write is as durable as the service makes it, and this does nothing. ``paths`` are read as they come (a
        version's may be millions): never held at once.
        """
        checked = (clean_relpath(path) for path in paths)
        self._make_durable(checked)
        for _ in checked:  # what the backend did not look at is checked all the same
            pass

    def _make_durable(self, paths: Iterator[str]) -> None:
        """Make the objects at the (checked) store paths ``paths`` durable; a backend that touches them resolves
        them with :meth:`full_path`, a bounded number at a time (nothing to do unless a backend says otherwise)."""

    def remove_stale_temporaries(self, prefix: str, *, older_than: float) -> int:
        """Remove the temporary objects under ``prefix`` that writers left more than ``older_than`` seconds ago
        (killed before they could rename them); return how many. Writers that are still running are left alone."""
        full = self.full_path(prefix, allow_root=True)
        with self._errors("list", prefix):
            try:
                entries = self.fs.find(full, detail=True, withdirs=False)
            except FileNotFoundError:
                return 0
        infos = entries.values() if isinstance(entries, dict) else entries
        deadline = time.time() - older_than
        stale = [
            info["name"]
            for info in infos
            if posixpath.basename(info["name"]).startswith(TEMP_PREFIX) and _modified(info) < deadline
        ]
        with self._errors(f"remove {len(stale)} temporary objects from", prefix):
            for name in stale:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.rm_file(name)
        return len(stale)

    def put_file(self, local_path: str | os.PathLike[str], path: str) -> None:
        """Copy the local file ``local_path`` to ``path`` atomically."""
        full = self.full_path(path)
        with self._errors("upload", path):
            self._before_write(full)
            self._put_one_sync(os.fspath(local_path), full)

    def put_many(
        self,
        items: Iterable[PutItem],
        *,
        max_requests: int | None = None,
        on_done: Callable[[str, int], None] | None = None,
    ) -> int:
        """Copy many local files in, concurrently; return the bytes sent.

        Parameters
        ----------
        items
            ``(local_path, store_path)`` pairs, or ``(local_path, store_path, sha256[, xxh3])``: then the bytes are
            hashed in the same read that sends them (with xxh3-64 when it is given, else sha256), and a file whose
            bytes no longer have that checksum (it changed since it was hashed) is an :class:`IntegrityError` and is
            not stored.
        max_requests
            Uploads in flight at most (default :attr:`default_max_requests`).
        on_done
            Called in the caller's thread as ``on_done(store_path, size)`` after each file is stored (for progress).
        """
        limit = max_requests or self.default_max_requests
        prepared = self._prepare_puts(items)
        total = 0
        if self._is_async:
            with self._submitter(self._put_one, self._aput_one, limit) as submit:
                for upload, size in ordered_window(submit, prepared, max_in_flight=limit):
                    total += size
                    if on_done is not None:
                        on_done(upload.path, size)
            return total
        # Threads: a task copies a group of files, so that the hand-off cost is paid once per group.
        groups = _grouped(((item, 0) for item in prepared), PUT_GROUP_ITEMS, 0)
        with self._submitter(self._put_group, self._aput_one, limit) as submit:
            for _, (done, failure) in ordered_window(submit, groups, max_in_flight=limit):
                for path, size in done:
                    total += size
                    if on_done is not None:
                        on_done(path, size)
                if failure is not None:
                    raise failure
        return total

    def put_many_by_content(
        self,
        files: Iterable[tuple[str, int]],
        address: Callable[[str], str],
        *,
        staging: str,
        present: Mapping[str, int] | None = None,
        max_requests: int | None = None,
    ) -> Iterator[StoredFile]:
        """Store each local file under the path ``address(sha256)`` of its bytes, reading each file once: hashed
        (sha256 and xxh3-64) as it is read and written to a temporary name in the folder ``staging``, then linked
        into place. A file of at most a few MiB is hashed before anything is written, and not written at all when
        ``present`` (store path -> size, e.g. a listing) or the store already has an object of that name and size.

        ``files`` are ``(local_path, size)`` pairs (the size a hint for grouping); one :class:`StoredFile` is
        yielded per file, in order, with at most ``max_requests`` files (default :attr:`default_max_requests`)
        being stored at once. The objects are durable once :meth:`make_durable` has been called on them.
        Only where :attr:`names_after_writing` is true.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot name an object after writing it")

    def _put_group(
        self, group: builtins.list[tuple[_Upload, int]]
    ) -> tuple[builtins.list[tuple[str, int]], BaseException | None]:
        """The group's files up to the first failure (as ``(store_path, size)``), and that failure."""
        return each_until_failure(lambda pair: (pair[0].path, self._put_one(pair[0])), group)

    def _prepare_puts(self, items: Iterable[PutItem]) -> Iterator[_Upload]:
        made: set[str] = set()
        for item in items:
            local, path = item[0], item[1]
            full = self.full_path(path)
            parent = posixpath.dirname(full)
            if parent not in made:
                with self._errors("upload", path):
                    self._before_write(full)
                made.add(parent)
            yield _Upload(os.fspath(local), path, full, *item[2:])

    def _put_one(self, item: _Upload) -> int:
        with self._errors("upload", item.path):
            if item.sha256 is None:
                self._put_one_sync(item.local, item.full)
                return os.path.getsize(item.local)
            return self._put_checked_sync(item)

    async def _aput_one(self, item: _Upload) -> int:
        try:
            if item.sha256 is None:
                size = os.path.getsize(item.local)
                await self.fs._put_file(item.local, item.full)
                return size
            if os.path.getsize(item.local) > CHECKED_IN_MEMORY:
                return await asyncio.to_thread(self._put_checked_sync, item)
            data = await asyncio.to_thread(_read_checked, item)
            await self.fs._pipe_file(item.full, data, **self._checksum_options(item.sha256))
            return len(data)
        except Exception as exc:
            raise self._translate(exc, "upload", item.path) from exc

    def _put_checked_sync(self, item: _Upload) -> int:
        """Send one file whose bytes must have ``item.sha256``, hashed in the read that sends them; nothing is
        stored when they do not."""
        if self.atomic_put and os.path.getsize(item.local) <= CHECKED_IN_MEMORY:
            data = _read_checked(item)
            self.fs.pipe_file(item.full, data, **self._checksum_options(item.sha256))
            return len(data)
        if self.atomic_put:
            # An object store sends a checked copy: its bytes cannot change any more while they go.
            with tempfile.TemporaryDirectory(prefix="datamount-upload-") as scratch:
                copy = os.path.join(scratch, "checked")
                with open(copy, "wb") as out:
                    size = _copy_checked(item, out.write)
                self.fs.put_file(copy, item.full)
            return size
        with self._temporary(item.full) as tmp:
            with self.fs.open(tmp, "wb") as out:
                size = _copy_checked(item, out.write)
            self._replace(tmp, item.full)
        return size

    def _checksum_options(self, sha256: str) -> dict[str, Any]:
        """Options of ``pipe_file`` that let the server check the bytes it receives (none unless it can)."""
        return {}

    def _put_one_sync(self, local: str, full: str) -> None:
        if self.atomic_put:
            self.fs.put_file(local, full)
        else:
            with self._temporary(full) as tmp:
                self.fs.put_file(local, tmp)
                self._replace(tmp, full)

    def _replace(self, tmp: str, full: str) -> None:
        """Move the finished temporary object ``tmp`` to ``full``, replacing what is there."""
        self.fs.mv(tmp, full)

    def _before_write(self, full: str) -> None:
        """Prepare for a write to ``full`` (make its folder where folders exist)."""
        if self.needs_dirs:
            self.fs.makedirs(posixpath.dirname(full), exist_ok=True)

    @contextlib.contextmanager
    def _temporary(self, full: str) -> Iterator[str]:
        tmp = posixpath.join(
            posixpath.dirname(full), f"{TEMP_PREFIX}{posixpath.basename(full)}.{uuid.uuid4().hex[:12]}"
        )
        try:
            yield tmp
        except BaseException:
            with contextlib.suppress(Exception):
                self.fs.rm_file(tmp)
            raise

    # -- listing and removal -------------------------------------------------------------------------------------

    def list(self, prefix: str = "", *, recursive: bool = True) -> dict[str, int]:
        """Map each object under ``prefix`` (store-relative path) to its size; ``{}`` when there is none.

        Objects being written (temporary names) are left out. With ``recursive=False`` only the direct children
        that are objects are listed.
        """
        full = self.full_path(prefix, allow_root=True)
        with self._errors("list", prefix):
            if recursive:
                entries = self.fs.find(full, detail=True, withdirs=False)
                infos = entries.values() if isinstance(entries, dict) else entries
            else:
                try:
                    infos = self.fs.ls(full, detail=True)
                except FileNotFoundError:
                    return {}
        listing = {}
        for info in infos:
            if info.get("type") == "directory":
                continue
            rel = self._relative(info["name"])
            if posixpath.basename(rel).startswith(TEMP_PREFIX):
                continue
            listing[rel] = int(info.get("size") or 0)
        return dict(sorted(listing.items()))

    def list_folders(self, prefix: str = "") -> builtins.list[str]:
        """The folders directly under ``prefix`` (store-relative paths), sorted; ``[]`` when there is none."""
        full = self.full_path(prefix, allow_root=True)
        with self._errors("list", prefix):
            try:
                entries = self.fs.ls(full, detail=True)
            except FileNotFoundError:
                return []
        return sorted(self._relative(entry["name"]) for entry in entries if entry.get("type") == "directory")

    def exists(self, path: str) -> bool:
        """Whether an object or folder exists at ``path``."""
        full = self.full_path(path, allow_root=True)
        with self._errors("check", path):
            return bool(self.fs.exists(full))

    def info(self, path: str) -> ObjectInfo:
        """Size and kind of ``path``; :class:`ObjectNotFoundError` when it does not exist."""
        full = self.full_path(path, allow_root=True)
        with self._errors("stat", path):
            raw = self.fs.info(full)
        return ObjectInfo(path=path, size=int(raw.get("size") or 0), is_dir=raw.get("type") == "directory")

    def remove(self, path: str, *, recursive: bool = False, missing_ok: bool = False) -> None:
        """Remove the object at ``path`` (with ``recursive``, everything below it too)."""
        full = self.full_path(path, allow_root=recursive)
        with self._errors("remove", path):
            # Object stores delete a missing key silently; the contract is the same on every backend.
            if not self.fs.exists(full):
                if missing_ok:
                    return
                raise FileNotFoundError(full)
            self.fs.rm(full, recursive=recursive)

    def remove_many(self, paths: Iterable[str]) -> None:
        """Remove many objects at once (bulk deletes where the backend has them); missing ones are ignored."""
        full = [self.full_path(path) for path in paths]
        with self._errors(f"remove {len(full)} objects from", ""):
            if not self._is_async:  # local-like filesystems refuse to remove a missing path; a stat is cheap there
                full = [path for path in full if self.fs.exists(path)]
            if full:
                self.fs.rm(full)

    def remove_empty_folder(self, path: str) -> None:
        """Remove the folder at ``path`` if it holds nothing (a folder that is not empty, or not there, stays as it
        is; on stores without folders there is nothing to do). Never takes anything written meanwhile with it, and
        never fails: a folder written into between the look and the removal is refused by the file system as not
        empty, each backend in its own words (HDFS: an error of its client), and only tidiness is lost."""
        if not self.needs_dirs:
            return
        full = self.full_path(path)
        try:
            with self._errors("remove", path):
                if not self.fs.ls(full):
                    self.fs.rmdir(full)
        except (DatamountError, OSError):
            return  # left in place, to be removed by the next tidy-up that finds it empty

    # -- concurrency and errors ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _submitter(
        self,
        call: Callable[[T], R],
        acall: Callable[[T], Awaitable[R]],
        workers: int,
    ) -> Iterator[Callable[[T], Future[R]]]:
        """A function that starts one operation and returns its future: on fsspec's event loop for async
        filesystems (many requests from one thread), else on a thread pool that is joined on exit."""
        if self._is_async:
            loop = self.fs.loop
            yield lambda item: asyncio.run_coroutine_threadsafe(acall(item), loop)  # type: ignore[arg-type]
        else:
            with generator_pool(workers, "datamount-io") as pool:
                yield lambda item: pool.submit(call, item)

    @contextlib.contextmanager
    def _errors(self, op: str, path: str) -> Iterator[None]:
        try:
            yield
        except DatamountError:
            raise
        except Exception as exc:
            raise self._translate(exc, op, path) from exc

    def _translate(self, exc: BaseException, op: str, path: str) -> BaseException:
        """The datamount error that tells a user what went wrong with ``op`` on ``path``."""
        if isinstance(exc, DatamountError):
            return exc
        exc = _unwrapped(exc)
        failure = self._classify(exc) or _classify_builtin(exc)
        where = self.url_for(path) if path else self.url
        reason = redact.scrub(failure.reason, self._secrets)
        return failure.kind(f"cannot {op} {where}: {reason}")

    def _classify(self, exc: BaseException) -> Failure | None:
        """Backend-specific reading of ``exc``; ``None`` falls back to the built-in exception kinds."""
        return None


@dataclass(frozen=True)
class _Upload:
    """A local file to send: where it is, where it goes (store-relative and full), and the sha256 it must have (and
    its xxh3-64, which is what the copy checks when given)."""

    local: str
    path: str
    full: str
    sha256: str | None = None
    xxh3: str = ""


def _read_checked(item: _Upload) -> bytes:
    return read_checked(item.local, item.sha256 or "", item.xxh3)


def _copy_checked(item: _Upload, write: Callable[[bytes], object]) -> int:
    """Copy ``item``'s file through ``write``, hashing it in the same read; return its size."""
    hasher, expected, checksum = copy_check(item.sha256 or "", item.xxh3)
    size = 0
    with open(item.local, "rb") as source:
        while chunk := source.read(HASH_CHUNK):
            hasher.update(chunk)
            write(chunk)
            size += len(chunk)
    require_unchanged(item.local, hasher.hexdigest(), expected, checksum=checksum)
    return size


def each_until_failure(function: Callable[[T], R], items: Iterable[T]) -> tuple[list[R], BaseException | None]:
    """``function`` of each item, in order, up to the first that fails, and that failure: a thread's share of a
    batch, whose failure its caller raises after the results before it, so that failures come in order."""
    results = []
    for item in items:
        try:
            results.append(function(item))
        except Exception as exc:
            return results, exc
    return results, None


def _sha256s(group: list[tuple[bytes, int]]) -> list[str]:
    return [hashlib.sha256(data).hexdigest() for data, _ in group]


def _grouped(items: Iterable[tuple[T, int]], max_items: int, max_bytes: int) -> Iterator[list[tuple[T, int]]]:
    """``(item, size)`` pairs in groups of at most ``max_items`` and, when ``max_bytes``, about that many bytes."""
    group: list[tuple[T, int]] = []
    group_bytes = 0
    for item in items:
        if group and (len(group) >= max_items or (max_bytes and group_bytes + item[1] > max_bytes)):
            yield group
            group, group_bytes = [], 0
        group.append(item)
        group_bytes += item[1]
    if group:
        yield group


def _modified(info: Mapping[str, Any]) -> float:
    """When a listed object was last written, in seconds since the epoch (0 when the backend does not say)."""
    value = info.get("mtime", info.get("modification_time", info.get("LastModified", info.get("updated", 0))))
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        return 0.0
    number = float(value or 0)
    return number / 1000 if number > 1e11 else number  # HDFS gives milliseconds


def _unwrapped(exc: BaseException) -> BaseException:
    """The failure to report for ``exc``: fsspec's sync calls turn any asyncio timeout (a client's read timeout)
    into a bare ``FSTimeoutError`` raised from it."""
    from fsspec.exceptions import FSTimeoutError

    if isinstance(exc, FSTimeoutError) and exc.__cause__ is not None:
        return exc.__cause__
    return exc


def _classify_builtin(exc: BaseException) -> Failure:
    text = short_reason(exc)
    if isinstance(exc, FileNotFoundError):
        return Failure(ObjectNotFoundError, "not found")
    if isinstance(exc, OSError) and exc.errno == errno.ESTALE:
        # A network file system (GlusterFS, NFS) says the file named was removed or replaced on its server after the
        # kernel looked it up again: it is not there any more.
        return Failure(ObjectNotFoundError, "not found (removed meanwhile: stale file handle)")
    if isinstance(exc, FileExistsError):
        return Failure(ObjectExistsError, "it already exists")
    if isinstance(exc, PermissionError):
        return Failure(StorePermissionError, f"permission denied ({text})")
    if isinstance(exc, (ConnectionError, TimeoutError)) or (
        isinstance(exc, OSError) and exc.errno in UNREACHABLE_ERRNOS
    ):
        return Failure(StoreUnreachableError, f"the store did not answer ({text})")
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return Failure(StoreIOError, "no space left on the device")
    if isinstance(exc, IsADirectoryError):
        return Failure(StoreIOError, "is a folder, not an object")
    return Failure(StoreIOError, text)


def short_reason(exc: BaseException) -> str:
    """One line naming an exception and its message."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    return f"{name}: {text}" if text else name
