"""The bytes of a mounted version's files: fetched once, checked, and kept in memory under a byte budget.

A file's bytes are served only after they were checked against the manifest: an object's and a packed row's
against the file's sha256, the list against the list's, a shard against the shard's. The files of a version without
a list (rows shown as files) are checked against the size and xxh3-64 of their bytes when the mount was made, their
rows by the shards' page CRCs as any reader's. A damaged file is an :class:`~datamount.storage.IntegrityError`; the
mount turns it into ``EIO`` for that file alone.

Files are fetched by *unit*: an object, the list, a shard, a packed version's row group (whose rows are the files
of consecutive list rows, decoded together and kept while their neighbours are read), or the rows of a file made of
several (a split's file). Units are fetched in a pool of
threads, so that the mount reads ahead (:meth:`Contents.prefetch`) while a file is read.

A version packed after its upload has both: on a remote store, a file read on its own comes from its object (one
small request), and the files of a read-ahead window from their row groups where the window holds at least half of a
group's bytes (a reader going through the list: one request for a group's files rather than one per file), or where
the version's shards all fit in memory (each group is then fetched once). A row group's bytes are its share of its
shard's, by rows: known from the manifest alone, whatever the rows.

A row group's files are checked against each row's file: from every row's entry (a version whose tree was built
whole), or from its row index (an indexed version with objects, a part of it at a time). An indexed version packed
straight into shards has no row index: each of its files is checked against its own entry as it is served.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from datamount.datasets import layout
from datamount.datasets.errors import MissingPartError
from datamount.datasets.manifest import FileEntry, Kind, Manifest
from datamount.datasets.row_folders import encoder_of, shows_rows
from datamount.datasets.row_index import RowFile
from datamount.datasets.rows import ShardRows, closing, missing_list, missing_object, missing_shard
from datamount.datasets.tree import Content, group_of
from datamount.datasets.tree_bytes import LIST_READ_AHEAD, TreeBytes
from datamount.storage import IntegrityError, ObjectNotFoundError, Store
from datamount.storage.cache import ContentCache
from datamount.storage.checksums import matches

log = logging.getLogger("datamount.mount")

#: Bytes of checked files the mount keeps in memory by default.
DEFAULT_MEMORY = 256 << 20
#: Bytes fetched ahead of each reader, at most (half of it at least, once it reads on).
DEFAULT_READ_AHEAD = 32 << 20
#: Requests in flight at most: to a remote store, and to local disk.
REMOTE_REQUESTS = 32
LOCAL_REQUESTS = 4
#: A version with objects and shards: the files of a window come from a row group when they are at least this share
#: of its bytes (else each from its object).
GROUP_SHARE = 0.5

Unit = tuple[str, Any]


class RowFiles(Protocol):
    """Each row's file, in row order (a :class:`~datamount.datasets.row_index.RowIndex` is one)."""

    def __len__(self) -> int: ...

    def files(self, start: int, stop: int) -> Iterator[RowFile | FileEntry]:
        """The files of rows ``start`` to ``stop - 1``, in order."""
        ...


class ListedRowFiles:
    """Each row's file from a list of every row's entry (a tree built whole has it)."""

    def __init__(self, entries: Sequence[FileEntry]) -> None:
        self.entries = entries

    def __len__(self) -> int:
        return len(self.entries)

    def files(self, start: int, stop: int) -> Iterator[RowFile | FileEntry]:
        return iter(self.entries[start:stop])


class Contents:
    """Checked bytes of the files of ``manifest``'s version, from ``store`` (remote objects and shards through
    ``cache`` when given). ``row_files``: each row's file, where each row is one (an image version's: a built
    tree's entry of each row, :class:`ListedRowFiles`, or an indexed version's row index; an indexed version packed
    straight into shards has none, and each of its rows is a file all the same)."""

    def __init__(
        self,
        store: Store,
        manifest: Manifest,
        *,
        row_files: RowFiles | None = None,
        cache: ContentCache | None = None,
        memory: int = DEFAULT_MEMORY,
    ) -> None:
        self.store = store
        self.manifest = manifest
        self.cache = cache
        self.memory = memory
        self._remote = store.local_path() is None
        self._pool = ThreadPoolExecutor(REMOTE_REQUESTS if self._remote else LOCAL_REQUESTS, "datamount-mount")
        # Reentrant: a future that is done already runs its callback (which takes the lock) at once.
        self._lock = threading.RLock()
        self._held: OrderedDict[Unit, Any] = OrderedDict()
        self._held_bytes = 0
        self._loading: dict[Unit, Future[Any]] = {}
        #: Held (or coming) units of one file that was served: the first to leave memory.
        self._spent: set[Unit] = set()
        #: Objects, shards and the list, fetched whole and checked (``datasets/tree_bytes.py``).
        self._bytes = TreeBytes(store, manifest, cache=cache)
        #: A row's file's bytes (an image version's own, a version without a list's in its dataset's form).
        self._encode = encoder_of(manifest)
        by_rows = manifest.shards and (manifest.kind is Kind.IMAGE or shows_rows(manifest))
        self._rows = ShardRows(store, manifest, cache=cache) if by_rows else None
        rows = len(self._rows) if self._rows is not None else 0
        #: What each row of a row group is checked against (none: each file against its entry, as it is served).
        self._checks = row_files if row_files is not None and len(row_files) == rows else None
        # Row groups are units where each row is a file (not for files of several rows each).
        each_row_a_file = self._checks is not None or (manifest.indexed and manifest.kind is Kind.IMAGE)
        self._spans = self._rows.spans() if self._rows is not None and rows and each_row_a_file else []
        self._group_starts = [span.start for span in self._spans]
        self._group_bytes = _group_bytes(manifest, self._spans)
        #: Whether a file with an object may also come from its row group (a version packed after its upload, on a
        #: remote store: a local store's objects cost no request each).
        self._either = self._rows is not None and manifest.objects and manifest.has_list and self._remote
        self._fits = sum(shard.size for shard in manifest.shards) <= memory
        #: Units fetched so far, by kind (``object``, ``group``, ...): what :meth:`summary` reports.
        self.fetched: Counter[str] = Counter()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ----------------------------------------------------------------------------------------------- serving

    def get(self, content: Content) -> bytes:
        """The file's bytes, checked (waiting for them when they are being fetched)."""
        return self.file_of(content, self.fetch(content).result())

    def fetch(self, content: Content) -> Future[Any]:
        """The value of a unit holding the file, to serve it: a future done already when one is held, else one that
        is done when it has come. A unit of this file alone (an object, the list, a shard) is the first to leave
        memory from now on: the kernel keeps the file's pages, and the files fetched ahead are still to be read."""
        return self._begin([content], serving=True)[0]

    def by_ranges(self, content: Content) -> bool:
        """Whether the file is served by ranges (:meth:`run_of`), never held whole: a list longer than
        :data:`~datamount.datasets.tree_bytes.RANGED_LIST_BYTES` whose blocks of lines the manifest records."""
        return content.kind == "list" and self._bytes.ranged(content)

    def run_of(self, content: Content, start: int, end: int) -> tuple[int, bytes]:
        """Bytes ``start`` to ``end - 1`` of a file served by ranges and :data:`LIST_READ_AHEAD` bytes after them,
        in whole checked blocks: where they start, and the bytes (a blocking read: call it in a thread)."""
        try:
            run = self._bytes.list_blocks(start, end, ahead=LIST_READ_AHEAD, name=self.manifest.ref)
        except ObjectNotFoundError as missing:
            raise self._missing(content, missing) from missing
        with self._lock:
            self.fetched["list-run"] += 1
        return run

    def file_of(self, content: Content, unit: Any) -> bytes:
        """The file's bytes in the value of a unit holding it (a row group's value is the files of its rows): checked
        against the file's entry here where the group's rows were not each checked as it came."""
        if not isinstance(unit, list):
            return unit
        data: bytes = unit[content.row - self._group_starts[group_of(self._group_starts, content.row)]]
        if self._checks is None:
            entry = content.entry
            if entry is None or not matches(data, entry.sha256, entry.xxh3):
                raise _damaged_row(self.manifest, content.row)
        return data

    def prefetch(self, contents: Iterable[Content]) -> None:
        """Start fetching units holding these files (those neither held nor on their way). A remote store's objects
        are fetched together, many requests in flight, as a reader fetches them."""
        self._begin(list(contents))

    def coming(self, content: Content) -> Future[Any] | None:
        """The future of a unit holding the file that is held (done) or on its way; none is started."""
        with self._lock:
            return self._present(content)[1]

    def is_coming(self, content: Content) -> bool:
        """Whether a unit holding the file is held or on its way."""
        return any(unit in self._held or unit in self._loading for unit in self._units(content))

    def summary(self) -> str:
        """What was fetched, e.g. ``fetched 3 row group(s), 12 object(s)``."""
        names = {
            "object": "object(s)",
            "group": "row group(s)",
            "rows": "file(s) of rows",
            "shard": "shard(s)",
            "list": "list",
            "list-run": "run(s) of the list's blocks",
        }
        return "fetched " + (", ".join(f"{n} {names[kind]}" for kind, n in sorted(self.fetched.items())) or "nothing")

    def unit_of(self, content: Content) -> tuple[Unit, int]:
        """The unit the file is fetched with, and its bytes (a row group's for a packed row)."""
        unit = self._unit(content)
        return unit, self._group_bytes[unit[1]] if unit[0] == "group" else content.size

    @property
    def held_bytes(self) -> int:
        return self._held_bytes

    # -------------------------------------------------------------------------------------------------- units

    def _unit(self, content: Content) -> Unit:
        """The unit the file is fetched with when it is read on its own."""
        if content.kind == "row":
            return self._group_unit(content)
        if content.kind == "object":
            assert content.entry is not None
            return ("object", content.entry.sha256)
        if content.kind == "shard":
            assert content.shard is not None
            return ("shard", content.shard.sha256)
        if content.kind == "rows":
            return ("rows", content.row)
        return ("list", None)

    def _group_unit(self, content: Content) -> Unit:
        return ("group", group_of(self._group_starts, content.row))

    def _units(self, content: Content) -> list[Unit]:
        """Every unit that holds the file: its own, and its row group in a version that also has objects."""
        unit = self._unit(content)
        if content.kind == "object" and self._either:
            return [unit, self._group_unit(content)]
        return [unit]

    def _begin(self, contents: list[Content], *, serving: bool = False) -> list[Future[Any]]:
        """For each file, a future of a unit holding it: one held (done), one on its way, or one started now. A
        file with both an object and a row group comes from the group when that is worth fetching for ``contents``
        (:meth:`_dense_groups`); a remote store's objects started here are fetched together. ``serving``: the files
        are handed out now (:meth:`fetch`)."""
        futures: list[Future[Any]] = []
        together: list[tuple[Unit, Content, Future[Any]]] = []
        dense = self._dense_groups(contents)
        with self._lock:
            for content in contents:
                unit, future = self._present(content)
                if future is None:
                    unit = self._unit(content)
                    if content.kind == "object" and self._either and self._group_unit(content) in dense:
                        unit = self._group_unit(content)
                    if unit[0] == "object" and self._remote and not self._in_cache(content):
                        future = Future()
                        self._loading[unit] = future
                        self.fetched["object"] += 1
                        future.add_done_callback(functools.partial(self._arrived, unit))
                        together.append((unit, content, future))
                    else:
                        future = self._start(unit, content)
                if serving and unit[0] != "group":
                    self._spent.add(unit)
                    if unit in self._held:
                        self._held.move_to_end(unit, last=False)
                futures.append(future)
        if together:
            self._pool.submit(self._fetch_objects, together)
        return futures

    def _present(self, content: Content) -> tuple[Unit, Future[Any] | None]:
        """A unit holding the file that is held (its future done already) or on its way; no future when there is
        none (called under the lock). A held unit not yet served moves to the end of those leaving memory last."""
        units = self._units(content)
        for unit in units:
            held = self._held.get(unit)
            if held is not None:
                if unit not in self._spent:
                    self._held.move_to_end(unit)
                done: Future[Any] = Future()
                done.set_result(held)
                return unit, done
        loading = next((unit for unit in units if unit in self._loading), None)
        return (units[0], None) if loading is None else (loading, self._loading[loading])

    def _dense_groups(self, contents: list[Content]) -> set[Unit]:
        """The row groups worth fetching for ``contents`` (files of a version with objects and shards): those of
        which they hold at least :data:`GROUP_SHARE` of the bytes, or, for a read-ahead window of a version whose
        row groups all fit in memory (each is then fetched once), every group they touch."""
        if not self._either:
            return set()
        wanted: Counter[Unit] = Counter()
        for content in contents:
            if content.kind == "object":
                wanted[self._group_unit(content)] += content.size
        if len(contents) > 1 and self._fits:
            return set(wanted)
        return {unit for unit, size in wanted.items() if size >= GROUP_SHARE * self._group_bytes[unit[1]]}

    def _start(self, unit: Unit, content: Content) -> Future[Any]:
        """Fetch ``unit`` in the pool (called under the lock); its result goes into memory when it comes."""
        future = self._pool.submit(self._fetch, unit, content)
        self._loading[unit] = future
        self.fetched[unit[0]] += 1
        future.add_done_callback(functools.partial(self._arrived, unit))
        return future

    def _arrived(self, unit: Unit, future: Future[Any]) -> None:
        """Keep a unit that came in memory, and drop what is over the budget: units already served first (at the
        front), then the least recently used."""
        with self._lock:
            self._loading.pop(unit, None)
            if future.cancelled() or future.exception() is not None:
                self._spent.discard(unit)
                return  # a failure is not kept: the next open tries again
            value = future.result()
            self._held[unit] = value
            if unit in self._spent:
                self._held.move_to_end(unit, last=False)
            self._held_bytes += _size(value)
            while self._held_bytes > self.memory and len(self._held) > 1:
                dropped_unit, dropped = self._held.popitem(last=False)
                self._spent.discard(dropped_unit)
                self._held_bytes -= _size(dropped)

    def _fetch(self, unit: Unit, content: Content) -> Any:
        kind = unit[0]
        if kind == "group":
            return self._fetch_group(unit[1])
        try:
            return self._fetch_part(kind, content)
        except MissingPartError:
            raise
        except ObjectNotFoundError as missing:
            raise self._missing(content, missing) from missing

    def _fetch_part(self, kind: str, content: Content) -> bytes:
        """A unit of one part (an object, a shard, the list), checked as every front end of the tree checks it."""
        if kind == "rows":
            return self._fetch_rows(content)
        return self._bytes.read(content, name=self.manifest.ref)

    def _missing(self, content: Content, missing: ObjectNotFoundError) -> MissingPartError:
        """The part of ``content`` not found, named as a reader names it (``datasets/rows/missing.py``)."""
        if content.kind == "shard" and content.shard is not None:
            return missing_shard(self.store, self.manifest, content.shard, missing)
        if content.entry is not None:
            path = layout.object_path(self.manifest.name, content.entry.sha256)
            return missing_object(self.store, self.manifest, content.row, path, missing)
        return missing_list(self.store, self.manifest, missing)

    def _fetch_objects(self, together: list[tuple[Unit, Content, Future[Any]]]) -> None:
        """Fetch the objects of ``together`` with one window of reads, each checked and handed to its future as it
        comes; after a failure (which is that object's alone) the rest are fetched again."""
        while together:
            entries = [content.entry for _, content, _ in together if content.entry is not None]
            paths = [layout.object_path(self.manifest.name, entry.sha256) for entry in entries]
            done = 0
            sizes = [entry.size for entry in entries]
            try:
                if all(entry.xxh3 for entry in entries):
                    hashed = ((data, None) for data in self.store.read_many(paths, sizes=sizes))
                else:  # files from before format 4: their sha256s computed by the store as they arrive
                    hashed = self.store.read_many_hashed(paths, sizes=sizes)
                for (_, _, future), entry, path, (data, digest) in zip(together, entries, paths, hashed, strict=False):
                    done += 1
                    try:
                        future.set_result(self._matching(path, data, entry.size, entry.sha256, entry.xxh3, digest))
                    except IntegrityError as exc:
                        future.set_exception(exc)
                    if self.cache is not None and future.exception() is None:
                        self._keep(entry, path, data)
            except Exception as exc:
                if done < len(together):
                    failed = exc
                    if isinstance(exc, ObjectNotFoundError) and not isinstance(exc, MissingPartError):
                        failed = self._missing(together[done][1], exc)
                    together[done][2].set_exception(failed)
                done += 1
            together = together[done:]

    def _keep(self, entry: FileEntry, path: str, data: bytes) -> None:
        """Put a checked object into the content cache for later mounts; a cache that cannot take it (a full disk)
        costs only that."""
        assert self.cache is not None
        try:
            self.cache.get(entry.sha256, entry.size, lambda out: out.write(data), name=path)
        except OSError as exc:
            log.warning("the content cache %s did not take %s: %s", self.cache.directory, path, exc)

    def _in_cache(self, content: Content) -> bool:
        entry = content.entry
        return self.cache is not None and entry is not None and self.cache.path_for(entry.sha256).exists()

    def _matching(
        self, path: str, data: bytes, size: int, sha256: str, fast: str = "", digest: str | None = None
    ) -> bytes:
        """``data``, the object at ``path``, if it has ``size`` bytes and that xxh3-64 (``fast``, when given) or
        sha256; else an IntegrityError."""
        if len(data) != size or not matches(data, sha256, fast, digest=digest):
            got = f"{len(data):,} bytes" if len(data) != size else "other bytes"
            raise IntegrityError(f"{self.store.url_for(path)} holds {got} than its manifest records (a damaged copy)")
        return data

    def _fetch_group(self, group: int) -> list[bytes]:
        """The files of one row group of a packed image version, checked by its pages' CRCs and row count, and each
        against its file's checksum."""
        assert self._rows is not None
        span = self._rows.spans()[group]
        with closing(self._rows.rows(span.start, span.stop)) as rows:
            files = [self._encode(row) for row in itertools.islice(rows, len(span))]
        if self._checks is not None:
            for row, data, file in zip(span, files, self._checks.files(span.start, span.stop), strict=True):
                if not matches(data, file.sha256, file.xxh3):
                    raise _damaged_row(self.manifest, row)
        return files

    def _fetch_rows(self, content: Content) -> bytes:
        """A file made of rows ``content.row`` to ``content.stop - 1``, checked against its size and xxh3-64."""
        assert self._rows is not None and content.entry is not None
        with closing(self._rows.rows(content.row, content.stop)) as rows:
            data = b"".join(map(self._encode, rows))
        if len(data) != content.size or not matches(data, "", content.entry.xxh3):
            raise IntegrityError(
                f"{self.manifest.ref}, rows {content.row} to {content.stop - 1}: their bytes are not those read when "
                "the version was mounted (a damaged shard)"
            )
        return data


def _size(value: Any) -> int:
    return sum(map(len, value)) if isinstance(value, list) else len(value)


def _group_bytes(manifest: Manifest, spans: list[range]) -> list[int]:
    """The bytes of each row group of ``spans`` (every group of the version's shards, in order, or none): its
    share of its shard's bytes, by rows."""
    if not spans:
        return []
    shares = (shard.size * rows // max(shard.rows, 1) for shard in manifest.shards for rows in shard.row_groups)
    return [max(share, 1) for share in shares]


def _damaged_row(manifest: Manifest, row: int) -> IntegrityError:
    return IntegrityError(
        f"{manifest.ref}, row {row}: the bytes in its shard do not match the file's checksum (a damaged shard)"
    )
