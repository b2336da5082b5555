"""Rows of an unpacked version, from its normalised list: text rows as they are, image rows with their objects."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from datamount.datasets import layout
from datamount.datasets.errors import DatasetNotFoundError
from datamount.datasets.manifest import Manifest
from datamount.datasets.rows.source import DEFAULT_ROWS_PER_SPAN, Piece, Row, clip, line_spans, out_of_range
from datamount.storage import IntegrityError, Store
from datamount.storage.checksums import matches
from datamount.storage.store import DEFAULT_MAX_BYTES_IN_FLIGHT

Line = tuple[str, ...]


def parse_lines(raw: bytes) -> tuple[list[Line], list[int]]:
    """The rows of (part of) a normalised list, and where each row's line starts in ``raw``."""
    rows, starts, position = [], [], 0
    for line in raw.split(b"\n"):
        if line:
            rows.append(tuple(line.decode("utf-8").split("\t")))
            starts.append(position)
        position += len(line) + 1
    return rows, starts


def read_lines(store: Store, manifest: Manifest) -> list[Line]:
    """The rows of a version's normalised list."""
    return parse_lines(store.read(layout.list_path(manifest)))[0]


class ObjectLocation(NamedTuple):
    """Where a row's file is stored, and what its bytes must be (its xxh3-64, or its sha256 for a file whose entry
    has none)."""

    path: str
    size: int
    sha256: str
    xxh3: str


def object_locations(manifest: Manifest, lines: list[Line]) -> list[ObjectLocation]:
    """For each row of an image version, the object that holds its file."""
    objects = {
        entry.path: ObjectLocation(
            layout.object_path(manifest.name, entry.sha256), entry.size, entry.sha256, entry.xxh3
        )
        for entry in manifest.files
    }
    missing = next((line[0] for line in lines if line[0] not in objects), None)
    if missing is not None:
        raise DatasetNotFoundError(f"{manifest.ref}: the manifest has no file for {missing!r}")
    return [objects[line[0]] for line in lines]


def check_object(
    store: Store,
    manifest: Manifest,
    row: int,
    location: ObjectLocation,
    data: bytes,
    *,
    hashed: bool = True,
    digest: str | None = None,
) -> bytes:
    """``data``, the object of row ``row``, if it has the size (and, ``hashed``, the checksum: its xxh3-64, or its
    sha256, given as ``digest`` when it was computed already) the manifest says; else an :class:`IntegrityError`
    naming the dataset, the row and the object."""
    if len(data) != location.size:
        problem = f"has {len(data):,} bytes, not {location.size:,}"
    elif not hashed or matches(data, location.sha256, location.xxh3, digest=digest):
        return data
    else:
        problem = f"does not match its {'xxh3-64' if location.xxh3 else 'sha256'}"
    raise IntegrityError(
        f"{manifest.ref}, row {row}: the object {store.url_for(location.path)} {problem}: the store holds a damaged "
        f"copy (datamount verify {manifest.ref} --repair --from LIST puts the right one back)"
    )


class ListRows:
    """The rows of a text version: its list's lines, held in memory."""

    def __init__(self, store: Store, manifest: Manifest, *, rows_per_span: int = DEFAULT_ROWS_PER_SPAN) -> None:
        if rows_per_span < 1:
            raise ValueError(f"rows_per_span must be at least 1, not {rows_per_span}")
        self.store = store
        self.manifest = manifest
        self.split = ""
        self.layout = f"lines:{rows_per_span}"
        self.rows_per_span = rows_per_span

    @functools.cached_property
    def _lines(self) -> list[Line]:
        """The list's lines, read on first use (spans and lengths need only the manifest)."""
        return read_lines(self.store, self.manifest)

    def __len__(self) -> int:
        return self.manifest.rows

    def spans(self) -> list[range]:
        return line_spans(len(self), self.rows_per_span)

    def rows(self, start: int, stop: int) -> Iterator[Row]:
        start, stop = clip(start, stop, len(self))
        return iter(self._lines[start:stop])

    def row(self, index: int) -> Row:
        if not 0 <= index < len(self):
            raise out_of_range(index, self.manifest, len(self))
        return self._lines[index]

    def pieces(self, pieces: Iterable[Piece]) -> Iterator[Row]:
        return (self._lines[row] for piece in pieces for row in piece.rows)


class ObjectRows(ListRows):
    """The rows of an unpacked image version: each file's bytes, read from its object with many reads in flight
    (at most ``max_requests`` requests and ``max_bytes`` bytes), then its labels.

    Every object's size is checked before its row is yielded, and (``verify``, the default) its xxh3-64 (its sha256
    in a version from before format 4): a damaged object is an :class:`IntegrityError`, never a sample.
    """

    def __init__(
        self,
        store: Store,
        manifest: Manifest,
        *,
        rows_per_span: int = DEFAULT_ROWS_PER_SPAN,
        max_requests: int | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES_IN_FLIGHT,
        verify: bool = True,
    ) -> None:
        super().__init__(store, manifest, rows_per_span=rows_per_span)
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.verify = verify

    @functools.cached_property
    def _located(self) -> list[ObjectLocation]:
        """Each row's object, found on first use."""
        return object_locations(self.manifest, self._lines)

    def rows(self, start: int, stop: int) -> Iterator[Row]:
        start, stop = clip(start, stop, len(self))
        return self._read(range(start, stop))

    def row(self, index: int) -> Row:
        labels = super().row(index)[1:]
        location = self._located[index]
        return (check_object(self.store, self.manifest, index, location, self.store.read(location.path)), *labels)

    def pieces(self, pieces: Iterable[Piece]) -> Iterator[Row]:
        return self._read(row for piece in pieces for row in piece.rows)

    @functools.cached_property
    def _sha256_only(self) -> bool:
        """Whether some file has no xxh3-64 (a version from before format 4): then the store computes each object's
        sha256 as it arrives, on threads of its own."""
        return any(not location.xxh3 for location in self._located)

    def _read(self, rows: Iterable[int]) -> Iterator[Row]:
        """Rows ``rows`` in that order, one window of reads in flight across all of them, each object checked before
        its row is yielded (with ``verify``, against its xxh3-64, or its sha256 as the store computed it)."""
        located, lines = self._located, self._lines
        rows_read, rows_yielded = itertools.tee(rows)
        for_paths, for_sizes = itertools.tee(located[row] for row in rows_read)
        paths = (location.path for location in for_paths)
        sizes = (location.size for location in for_sizes)
        if not (self.verify and self._sha256_only):
            blobs = self.store.read_many(paths, sizes=sizes, max_requests=self.max_requests, max_bytes=self.max_bytes)
            for row, data in zip(rows_yielded, blobs, strict=True):
                location = located[row]
                checked = check_object(self.store, self.manifest, row, location, data, hashed=self.verify)
                yield (checked, *lines[row][1:])
            return
        hashed = self.store.read_many_hashed(
            paths, sizes=sizes, max_requests=self.max_requests, max_bytes=self.max_bytes
        )
        for row, (data, digest) in zip(rows_yielded, hashed, strict=True):
            location = located[row]
            yield (check_object(self.store, self.manifest, row, location, data, digest=digest), *lines[row][1:])
