"""What the pages show, read through the catalog and the row sources: nothing is read by a path taken from a request.

A request names a store by its key (:mod:`datamount.ui.stores`) and a version by a reference that
:func:`~datamount.datasets.parse_ref` checks (a dataset name can name nothing but a dataset); the catalog finds its
manifest, :func:`~datamount.datasets.open_rows` its rows, and every byte shown has been checked on the way, as it
is for any reader: a damaged object is a row marked damaged, never its bytes. Nothing here writes, not even a
cache.

A version never changes, and is kept by its identity, its manifest's sha256, never by ``name@N``: what is read of it
is kept for the next request under that identity (its manifest, its row source for the versions shown lately, the
values of the pages shown lately under a byte budget, their thumbnails, diffs). A request by name resolves the name
in the store each time (a page view: one read of the manifest); a request that carries the identity it was made for
(the links of a page: ``m=``) is answered from what is kept for that identity, and when nothing is, only if the name
still resolves to it: a version removed, or a number given again, is a 404 naming it, never another version's bytes.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from datamount.datasets import DatasetNotFoundError, Manifest, catalog, open_rows
from datamount.datasets.names import DatasetRef, validate_name
from datamount.datasets.rows import RowSource, closing, read_lines
from datamount.storage import IntegrityError, ObjectNotFoundError, Store
from datamount.storage.arguments import whole_number_text
from datamount.ui.stores import StoreShelf
from datamount.ui.values import Cell, cell, thumbnail

#: Bytes of values kept from the pages shown lately (their images are then served without reading them again).
VALUE_BYTES = 256 << 20
#: Versions whose row sources stay open (a text version's source holds its list in memory).
OPEN_SOURCES = 4
#: A histogram of a version with no list counts the labels of at most this many rows (read through its shards).
HISTOGRAM_ROWS = 200_000
#: Labels a histogram shows one by one; the rest are counted together.
HISTOGRAM_BARS = 60
#: Threads making a page's thumbnails.
THUMBNAIL_THREADS = max(1, min(4, os.cpu_count() or 1))
#: What the thumbnail cache holds for a value that is not an image Pillow reads.
_NO_THUMBNAIL = (b"", "")

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Recent(Generic[K, V]):
    """The values used lately, at most ``count`` of them and ``size(value)`` adding up to at most ``budget``."""

    def __init__(self, count: int, budget: int = 0, size: Callable[[V], int] = lambda value: 0) -> None:
        self._items: collections.OrderedDict[K, V] = collections.OrderedDict()
        self._count, self._budget, self._size, self._held = count, budget, size, 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> V:
        size = self._size(value)
        if self._budget and size > self._budget // 4:
            return value  # too large to keep: it would push out everything else
        with self._lock:
            if key in self._items:
                self._held -= self._size(self._items.pop(key))
            self._items[key] = value
            self._held += size
            while len(self._items) > self._count or (self._budget and self._held > self._budget):
                self._held -= self._size(self._items.popitem(last=False)[1])
        return value


@dataclass(frozen=True)
class PageRow:
    """One row of a page: its number, its values as shown, or why it cannot be shown (``problem``, the reader's
    message; ``state``: ``damaged`` or ``missing``)."""

    index: int
    cells: list[Cell] = field(default_factory=list)
    problem: str | None = None
    state: str = ""


@dataclass(frozen=True)
class Page:
    """Rows ``start`` to ``stop - 1`` of a version."""

    manifest: Manifest
    start: int
    stop: int
    rows: list[PageRow]


@dataclass(frozen=True)
class Histogram:
    """How many rows have each value of a version's column ``column``: ``bars`` (value, rows) in the order shown;
    ``others`` (values, rows) counted together; ``counted`` rows of ``manifest.rows`` (fewer when capped)."""

    manifest: Manifest
    column: int
    bars: list[tuple[str, int]]
    others: tuple[int, int]
    counted: int


@dataclass
class _OpenSource:
    source: RowSource
    lock: threading.Lock = field(default_factory=threading.Lock)


class Browser:
    """Reads what the pages show from the stores of ``shelf``; safe to use from many threads at once."""

    def __init__(self, shelf: StoreShelf, *, value_bytes: int = VALUE_BYTES, open_sources: int = OPEN_SOURCES) -> None:
        self.shelf = shelf
        #: Every key is ``(store key, manifest sha256, ...)``.
        self._manifests: _Recent[tuple[str, str], Manifest] = _Recent(256)
        self._sources: _Recent[tuple[str, str], _OpenSource] = _Recent(open_sources)
        self._values: _Recent[tuple[str, str, int, int], Any] = _Recent(1 << 20, value_bytes, _value_size)
        self._thumbnails: _Recent[tuple[str, str, int, int], tuple[bytes, str] | None] = _Recent(
            4096, value_bytes // 8, lambda found: len(found[0]) if found else 0
        )
        self._diffs: _Recent[tuple[str, str, str], Any] = _Recent(8)
        self._opening = threading.Lock()

    def store(self, key: str) -> Store:
        """The store of ``key`` (:class:`KeyError` when the server was given none of that key)."""
        return self.shelf.open(key)

    def datasets(self, key: str) -> list[catalog.DatasetSummary]:
        """Every dataset of the store, user datasets first, each with its latest version."""
        return list(catalog.summaries(self.store(key)))

    def versions(self, key: str, name: str) -> list[Manifest]:
        """Every committed version of dataset ``name``, newest first."""
        store = self.store(key)
        found = catalog.versions(store, validate_name(name))
        if not found:
            raise catalog.no_dataset(store, name)
        return [self.manifest(key, DatasetRef(name, version)) for version in reversed(found)]

    def manifest(self, key: str, ref: DatasetRef, identity: str | None = None) -> Manifest:
        """The manifest of version ``ref`` (``name@N``): the one whose sha256 is ``identity`` when given (kept from an
        earlier request, else read and compared: a :class:`DatasetNotFoundError` when ``ref`` is no longer it),
        else the one ``ref`` resolves to in the store now."""
        if ref.version is None:
            raise ValueError(f"name a version: {ref}@N")
        if identity is not None:
            kept = self._manifests.get((key, identity))
            if kept is not None and kept.ref == str(ref):
                return kept
        found = catalog.resolve(self.store(key), ref, public_fallback=False)
        if identity is not None and found.manifest_sha256 != identity:
            raise DatasetNotFoundError(
                f"{ref} is not the version this link was made for (its manifest's sha256 was {identity[:16]}…, "
                f"it is {found.manifest_sha256[:16]}… now): that version was removed"
            )
        kept = self._manifests.get((key, found.manifest_sha256))
        if kept is not None and kept.ref == found.ref:
            return kept  # what was read of it, kept under its identity, serves this request too
        return self._manifests.put((key, found.manifest_sha256), found)

    def page(self, key: str, manifest: Manifest, start: int, size: int) -> Page:
        """Rows ``start`` to ``start + size - 1`` of version ``manifest`` (fewer at its end), each value checked as it
        is read; a row that is damaged or missing says so and the page goes on."""
        opened = self._source(key, manifest)
        stop = min(start + size, len(opened.source))
        rows: list[PageRow] = []
        with opened.lock:
            position = start
            while position < stop:
                try:
                    with closing(opened.source.rows(position, stop)) as reading:
                        for values in reading:
                            rows.append(self._page_row(key, manifest, position, values))
                            position += 1
                except (IntegrityError, ObjectNotFoundError):
                    rows.append(self._row_alone(key, manifest, opened.source, position))
                    position += 1  # the rest of the page is read again from the next row
        self._make_thumbnails(key, manifest, rows)
        return Page(manifest, start, stop, rows)

    def rows(self, key: str, manifest: Manifest, indices: Iterable[int]) -> dict[int, PageRow]:
        """Rows ``indices`` of version ``manifest``, each read by itself (a diff's rows, far apart), as :meth:`page`
        shows them."""
        opened = self._source(key, manifest)
        with opened.lock:
            found = [self._row_alone(key, manifest, opened.source, index) for index in sorted(set(indices))]
        self._make_thumbnails(key, manifest, found)
        return {row.index: row for row in found}

    def _make_thumbnails(self, key: str, manifest: Manifest, rows: list[PageRow]) -> None:
        """Make the thumbnails of the images of ``rows`` now, on several cores at once (Pillow lets go of the GIL),
        rather than one by one as the browser asks for them (each then answered at once: :meth:`made_thumbnail`)."""
        identity = manifest.manifest_sha256
        wanted = [
            (key, identity, row.index, column)
            for row in rows
            for column, shown in enumerate(row.cells)
            if shown.kind == "image" and self._thumbnails.get((key, identity, row.index, column)) is None
        ]
        found = [(where, self._values.get(where)) for where in wanted]
        found = [(where, value) for where, value in found if isinstance(value, bytes)]
        if not found:
            return
        with ThreadPoolExecutor(THUMBNAIL_THREADS, thread_name_prefix="datamount-thumbnails") as making:
            for (where, _), made in zip(found, making.map(thumbnail, (value for _, value in found)), strict=True):
                self._thumbnails.put(where, made or _NO_THUMBNAIL)

    def _row_alone(self, key: str, manifest: Manifest, source: RowSource, index: int) -> PageRow:
        """Row ``index`` read by itself, after reading from it failed: the failure may have been a row read ahead of
        it, which is then read (and named) in its turn."""
        try:
            return self._page_row(key, manifest, index, source.row(index))
        except (IntegrityError, ObjectNotFoundError) as exc:
            return PageRow(index, problem=str(exc), state="damaged" if isinstance(exc, IntegrityError) else "missing")

    def _page_row(self, key: str, manifest: Manifest, index: int, values: tuple[Any, ...]) -> PageRow:
        for column, value in enumerate(values):
            if isinstance(value, (bytes, bytearray, memoryview, str)):
                self._values.put((key, manifest.manifest_sha256, index, column), _owned(value))
        return PageRow(index, [cell(value) for value in values])

    def value(self, key: str, manifest: Manifest, row: int, column: int) -> Any:
        """Column ``column`` of row ``row`` of version ``manifest``, checked (:class:`IndexError` outside it)."""
        if not 0 <= column < len(manifest.columns):
            raise IndexError(f"{manifest.ref} has no column {column}: it has {len(manifest.columns)}")
        found = self._values.get((key, manifest.manifest_sha256, row, column))
        if found is not None:
            return found
        opened = self._source(key, manifest)
        with opened.lock:
            values = opened.source.row(row)
        return self._values.put((key, manifest.manifest_sha256, row, column), _owned(values[column]))

    def thumbnail(self, key: str, manifest: Manifest, row: int, column: int) -> tuple[bytes, str] | None:
        """A small image of the image in column ``column`` of row ``row`` and its content type (None when it is not
        an image Pillow reads)."""
        cached = self._thumbnails.get((key, manifest.manifest_sha256, row, column))
        if cached is None:
            value = self.value(key, manifest, row, column)
            made = thumbnail(value) if isinstance(value, bytes) else None
            cached = self._thumbnails.put((key, manifest.manifest_sha256, row, column), made or _NO_THUMBNAIL)
        return None if cached is _NO_THUMBNAIL else cached

    def made_thumbnail(
        self, key: str, ref: DatasetRef, identity: str, row: int, column: int
    ) -> tuple[bytes, str] | None:
        """The thumbnail :meth:`thumbnail` gives of version ``ref`` whose manifest's sha256 is ``identity``, if it
        was made already (nothing is read)."""
        kept = self._manifests.get((key, identity))
        if kept is None or kept.ref != str(ref):
            return None
        cached = self._thumbnails.get((key, identity, row, column))
        return None if cached is _NO_THUMBNAIL else cached

    def histogram(self, key: str, manifest: Manifest, column: int) -> Histogram:
        """How many rows have each value of column ``column`` of version ``manifest`` (from its list when it has
        one, else from at most :data:`HISTOGRAM_ROWS` of its rows)."""
        if not 1 <= column < len(manifest.columns):
            raise IndexError(f"{manifest.ref} has no label column {column}: its columns are {manifest.columns}")
        store = self.store(key)
        counts: collections.Counter[str] = collections.Counter()
        if manifest.has_list:
            counts.update(line[column] if column < len(line) else "" for line in read_lines(store, manifest))
        else:
            source = open_rows(store, manifest, cache=False)
            with closing(source.rows(0, HISTOGRAM_ROWS)) as rows:
                counts.update(_label(values[column]) for values in rows)
        return _histogram(manifest, column, counts)

    def diff(self, key: str, a: Manifest, b: Manifest) -> Any:
        """The :class:`~datamount.datasets.diff.VersionDiff` of versions ``a`` and ``b`` (read from their manifests
        and lists alone)."""
        from datamount.datasets.diff import diff_manifests

        cached = self._diffs.get((key, a.manifest_sha256, b.manifest_sha256))
        if cached is not None:
            return cached
        return self._diffs.put((key, a.manifest_sha256, b.manifest_sha256), diff_manifests(self.store(key), a, b))

    def _source(self, key: str, manifest: Manifest) -> _OpenSource:
        with self._opening:
            opened = self._sources.get((key, manifest.manifest_sha256))
            if opened is None:
                source = open_rows(self.store(key), manifest, cache=False)
                opened = self._sources.put((key, manifest.manifest_sha256), _OpenSource(source))
            return opened


def _owned(value: Any) -> Any:
    """``value`` as bytes of its own when it is a view into a decoded row group (which it would keep alive)."""
    return bytes(value) if isinstance(value, (bytearray, memoryview)) else value


def _value_size(value: Any) -> int:
    return len(value) + 64 if isinstance(value, (bytes, str)) else 64


def _label(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _histogram(manifest: Manifest, column: int, counts: collections.Counter[str]) -> Histogram:
    """The bars of ``counts``: in the labels' order when there are few (numerically when they are numbers), else
    the most frequent first and the rest counted together."""
    counted = sum(counts.values())
    if len(counts) <= HISTOGRAM_BARS:
        numbers = {label: whole_number_text(label, signed=True) for label in counts}
        if None in numbers.values():
            bars = sorted(counts.items())
        else:
            bars = sorted(counts.items(), key=lambda item: numbers[item[0]] or 0)
        return Histogram(manifest, column, bars, (0, 0), counted)
    bars = counts.most_common(HISTOGRAM_BARS)
    shown = sum(rows for _, rows in bars)
    return Histogram(manifest, column, bars, (len(counts) - len(bars), counted - shown), counted)
