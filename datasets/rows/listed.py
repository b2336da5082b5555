"""Rows of an unpacked version, from its normalised list: text rows as they are, image rows with their objects."""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import pyarrow as pa

from datamount.datasets import layout
from datamount.datasets.errors import DatasetNotFoundError
from datamount.datasets.list_blocks import ListBlocks
from datamount.datasets.manifest import FileEntry, Manifest, collector_paused
from datamount.datasets.repairs import object_repair
from datamount.datasets.row_index import RowIndex
from datamount.datasets.rows.chain import close_iterator
from datamount.datasets.rows.missing import missing_list, missing_object, objects_read
from datamount.datasets.rows.source import DEFAULT_ROWS_PER_SPAN, Piece, Row, clip, line_spans, out_of_range
from datamount.datasets.shard_writer import column, list_fields
from datamount.storage import IntegrityError, ObjectNotFoundError, Store
from datamount.storage.checksums import checked_by, matches
from datamount.storage.counters import RunningCount, Tally
from datamount.storage.store import DEFAULT_MAX_BYTES_IN_FLIGHT

Line = tuple[str, ...]

#: Bytes read from the start of a list to find the rows a window near its start asks for, while the whole list is not
#: needed: the first page of a million-row text version (``datamount ui``) in milliseconds rather than the seconds
#: its whole list takes to decode (2.8 s for 38 MB here).
HEAD_BYTES = 1 << 20
#: Blocks of a list read at once, ahead of a pass (:class:`ListRows`).
BLOCKS_IN_FLIGHT = 8
#: Blocks kept for single rows read one after another (:meth:`ListRows.row`).
RECENT_BLOCKS = 4


def list_rows(raw: bytes) -> list[Line]:
    """The rows of (part of) a normalised list."""
    with collector_paused():
        return [tuple(line.split("\t")) for line in raw.decode("utf-8").split("\n") if line]


def parse_lines(raw: bytes) -> tuple[list[Line], list[int]]:
    """The rows of (part of) a normalised list, and where each row's line starts in ``raw``."""
    starts, position = [], 0
    for line in raw.split(b"\n"):
        if line:
            starts.append(position)
        position += len(line) + 1
    return list_rows(raw), starts


def read_lines(store: Store, manifest: Manifest) -> list[Line]:
    """The rows of a version's normalised list (checked against its blocks' xxh3-64, where the manifest has them)."""
    path = layout.list_path(manifest)
    raw = store.read(path)
    if manifest.list_blocks is not None:
        manifest.list_blocks.check_whole(raw, store.url_for(path))
    return list_rows(raw)


class ObjectLocation(NamedTuple):
    """Where a row's file is stored, and what its bytes must be (its xxh3-64, or its sha256 for a file whose entry
    has none)."""

    path: str
    size: int
    sha256: str
    xxh3: str


def row_files(manifest: Manifest, lines: list[Line]) -> list[FileEntry]:
    """For each row of an image version, its file's manifest entry (no new object per row: a version of a million
    rows finds them in a fraction of a second)."""
    files = {entry.path: entry for entry in manifest.files}
    try:
        return [files[line[0]] for line in lines]
    except KeyError as missing:
        raise DatasetNotFoundError(f"{manifest.ref}: the manifest has no file for {missing.args[0]!r}") from None


def object_location(manifest: Manifest, entry: FileEntry) -> ObjectLocation:
    """The object that holds the file of ``entry``."""
    return ObjectLocation(layout.object_path(manifest.name, entry.sha256), entry.size, entry.sha256, entry.xxh3)


def object_locations(manifest: Manifest, lines: list[Line]) -> list[ObjectLocation]:
    """For each row of an image version, the object that holds its file."""
    return [object_location(manifest, entry) for entry in row_files(manifest, lines)]


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
        problem = f"does not match its {checked_by(location.xxh3)}"
    raise damaged_object(store, manifest, row, location, problem)


def damaged_object(
    store: Store, manifest: Manifest, row: int, location: ObjectLocation, problem: str
) -> IntegrityError:
    """The error for row ``row``'s object, whose bytes ``problem`` (``does not match its sha256``): the dataset, the
    row, the object's URL and what puts it back."""
    return IntegrityError(
        f"{manifest.ref}, row {row}: the object {store.url_for(location.path)} {problem}: the store holds a damaged "
        f"copy ({object_repair(manifest)})"
    )


class ListRows:
    """The rows of a text version: its list's lines. A list longer than :data:`HEAD_BYTES` whose blocks the manifest
    records (:class:`~datamount.datasets.list_blocks.ListBlocks`) is read a block at a time, each checked, a few
    blocks ahead of a pass: memory does not grow with rows. Any other list is read whole, once (rows near its start
    from its first :data:`HEAD_BYTES` alone while no other row is asked for)."""

    def __init__(self, store: Store, manifest: Manifest, *, rows_per_span: int = DEFAULT_ROWS_PER_SPAN) -> None:
        if rows_per_span < 1:
            raise ValueError(f"rows_per_span must be at least 1, not {rows_per_span}")
        self.store = store
        self.manifest = manifest
        self.split = ""
        self.layout = f"lines:{rows_per_span}"
        self.zero_copy = False  # each read's own bytes: copied by no one, and not views
        self.rows_per_span = rows_per_span
        self.tally = Tally()
        #: The blocks read last for single rows (:meth:`row`), by number.
        self._recent: dict[int, list[Line]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_recent"] = {}
        return state

    @functools.cached_property
    def _lines(self) -> list[Line]:
        """The list's lines, read on first use (spans and lengths need only the manifest), checked block by block
        where the manifest records its blocks."""
        try:
            return read_lines(self.store, self.manifest)
        except ObjectNotFoundError as missing:
            raise missing_list(self.store, self.manifest, missing) from missing

    @property
    def _blocks(self) -> ListBlocks | None:
        """The list's blocks, when it is read a block at a time."""
        blocks = self.manifest.list_blocks
        return blocks if blocks is not None and self.manifest.list_size > HEAD_BYTES else None

    def __len__(self) -> int:
        return self.manifest.rows

    def spans(self) -> list[range]:
        return line_spans(len(self), self.rows_per_span)

    @functools.cached_property
    def _head(self) -> list[Line]:
        """The complete lines of the list's first :data:`HEAD_BYTES` (every line, for a list no larger)."""
        try:
            raw = self.store.read_range(layout.list_path(self.manifest), 0, min(HEAD_BYTES, self.manifest.list_size))
        except ObjectNotFoundError as missing:
            raise missing_list(self.store, self.manifest, missing) from missing
        if len(raw) < self.manifest.list_size:
            return list_rows(raw[: raw.rfind(b"\n") + 1])
        if self.manifest.list_blocks is not None:
            self.manifest.list_blocks.check_whole(raw, self.store.url_for(layout.list_path(self.manifest)))
        return list_rows(raw)

    def _lines_to(self, stop: int) -> list[Line]:
        """Lines holding at least the first ``stop``: the list's head while they are in it and the whole list has not
        been read, else the whole list."""
        # A line is at least 2 bytes: past HEAD_BYTES // 2 rows, the head cannot hold them.
        if "_lines" not in self.__dict__ and stop <= HEAD_BYTES // 2 and len(self._head) >= stop:
            return self._head
        return self._lines

    def rows(self, start: int, stop: int) -> Iterator[Row]:
        start, stop = clip(start, stop, len(self))
        blocks = self._blocks
        if blocks is None:
            return iter(self._lines_to(stop)[start:stop])
        return self._rows_of_blocks(blocks, start, stop)

    def row(self, index: int) -> Row:
        if not 0 <= index < len(self):
            raise out_of_range(index, self.manifest, len(self))
        blocks = self._blocks
        if blocks is None:
            return self._lines_to(index + 1)[index]
        block = index // blocks.lines
        lines = self._recent.get(block)
        if lines is None:
            _, lines = next(self._read_blocks(blocks, [block]))
            if len(self._recent) >= RECENT_BLOCKS:
                del self._recent[next(iter(self._recent))]
            self._recent[block] = lines
        return lines[index % blocks.lines]

    def pieces(self, pieces: Iterable[Piece]) -> Iterator[Row]:
        blocks = self._blocks
        if blocks is None:
            return (self._lines[row] for piece in pieces for row in piece.rows)
        return self._pieces_of_blocks(blocks, pieces)

    def tables(self, pieces: Iterable[Piece]) -> Iterator[pa.Table]:
        """The rows of each piece (:meth:`pieces`, read and checked as a pass reads them) as an Arrow table."""
        schema = pa.schema(list_fields(self.manifest.kind, self.manifest.columns))
        wanted, taken = itertools.tee(pieces)
        rows = self.pieces(wanted)
        try:
            for piece in taken:
                values = list(zip(*itertools.islice(rows, len(piece.rows)), strict=True)) or [()] * len(schema)
                yield pa.table([column(v, f.type) for v, f in zip(values, schema, strict=True)], schema=schema)
        finally:
            close_iterator(rows)

    def counts(self) -> dict[str, float]:
        return self.tally.snapshot()

    def _rows_of_blocks(self, blocks: ListBlocks, start: int, stop: int) -> Iterator[Row]:
        for block, lines in self._read_blocks(blocks, blocks.covering(start, stop)):
            first = block * blocks.lines
            yield from lines[max(start - first, 0) : stop - first]

    def _pieces_of_blocks(self, blocks: ListBlocks, pieces: Iterable[Piece]) -> Iterator[Row]:
        """The rows of each piece from the blocks that cover its span, read ahead of the piece being taken."""
        wanted, taken = itertools.tee(pieces)
        needed = (block for piece in wanted for block in blocks.covering(piece.span.start, piece.span.stop))
        fetched = self._read_blocks(blocks, needed)
        per = blocks.lines
        for piece in taken:
            held = dict(itertools.islice(fetched, len(blocks.covering(piece.span.start, piece.span.stop))))
            for row in piece.rows:
                yield held[row // per][row % per]

    def _read_blocks(self, blocks: ListBlocks, numbers: Iterable[int]) -> Iterator[tuple[int, list[Line]]]:
        """Blocks ``numbers`` of the list, in order, each checked, :data:`BLOCKS_IN_FLIGHT` read at once."""
        path = layout.list_path(self.manifest)
        for_ranges, for_numbers = itertools.tee(numbers)
        ranges = (blocks.byte_range(block, self.manifest.list_size) for block in for_ranges)
        read = self.store.read_ranges(path, ranges, max_requests=BLOCKS_IN_FLIGHT)
        try:
            for block, raw in zip(for_numbers, read, strict=True):
                blocks.check(block, raw, self.store.url_for(path))
                yield block, list_rows(raw)
        except ObjectNotFoundError as missing:
            raise missing_list(self.store, self.manifest, missing) from missing


class ObjectRows(ListRows):
    """The rows of an unpacked image version: each file's bytes, read from its object with many reads in flight
    (at most ``max_requests`` requests and ``max_bytes`` bytes), then its labels.

    Each row's object is found in the version's row index (format 7, :mod:`datamount.datasets.row_index`), a part at a
    time, and its labels in its list's block: opening a version, its first sample and row ``i`` cost the same
    whatever its rows. A version from before format 7 finds them from its whole list and every file's entry.

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
        self._hashing: bool | None = None  # see _sha256_only

    @property
    def _index(self) -> RowIndex | None:
        """The version's row index, when it has one."""
        index = self.manifest.row_parts
        return index if index is not None and len(index) == len(self) else None

    @functools.cached_property
    def _files(self) -> list[FileEntry]:
        """Each row's file, from the whole list, for a version without a row index (found on first use)."""
        return row_files(self.manifest, self._lines)

    def _location(self, row: int) -> ObjectLocation:
        """Where row ``row``'s file is."""
        index = self._index
        if index is None:
            return object_location(self.manifest, self._files[row])
        file = index.file(row)
        return ObjectLocation(layout.object_path(self.manifest.name, file.sha256), file.size, file.sha256, file.xxh3)

    def rows(self, start: int, stop: int) -> Iterator[Row]:
        start, stop = clip(start, stop, len(self))
        if self._index is None:
            return self._read(range(start, stop), None)
        return self._read(range(start, stop), self._lines_between(start, stop))

    def _lines_between(self, start: int, stop: int) -> Iterator[Line]:
        """The lines of rows ``start`` to ``stop - 1``, read when the first is taken (inside the pass: a part not
        found is explained as the pass explains it)."""
        yield from ListRows.rows(self, start, stop)

    def _lines_of(self, pieces: Iterable[Piece]) -> Iterator[Line]:
        """The lines of ``pieces``' rows, read when the first is taken."""
        yield from ListRows.pieces(self, pieces)

    def row(self, index: int) -> Row:
        if not 0 <= index < len(self):
            raise out_of_range(index, self.manifest, len(self))
        location = self._location(index)
        line = super().row(index) if self._index is not None else self._lines[index]
        try:
            data = self.store.read(location.path)
        except ObjectNotFoundError as missing:
            raise missing_object(self.store, self.manifest, index, location.path, missing) from missing
        checked = check_object(self.store, self.manifest, index, location, data)
        self.tally.add("bytes_verified", len(checked))
        return (checked, *line[1:])

    def pieces(self, pieces: Iterable[Piece]) -> Iterator[Row]:
        if self._index is None:
            return self._read((row for piece in pieces for row in piece.rows), None)
        wanted, taken = itertools.tee(pieces)
        return self._read((row for piece in wanted for row in piece.rows), self._lines_of(taken))

    def _sha256_only(self, first_row: int) -> bool:
        """Whether the files have no xxh3-64 (a version from before format 4, or copied from one): then the store
        computes each object's sha256 as it arrives, on threads of its own. Decided once, by the file of the first
        row read when the rows are indexed (the part of the row index it is in is read for that row anyway), by
        every entry when not; a file of another kind is still checked, by :func:`check_object`."""
        if self._hashing is None:
            index = self._index
            self._hashing = (
                not index.file(first_row).xxh3 if index is not None else any(not entry.xxh3 for entry in self._files)
            )
        return self._hashing

    def _read(self, rows: Iterable[int], lines: Iterator[Line] | None) -> Iterator[Row]:
        """Rows ``rows`` in that order (their ``lines``, in the same order, or from the whole list when not given),
        one window of reads in flight across all of them, each object checked before its row is yielded (with
        ``verify``, against its xxh3-64, or its sha256 as the store computed it)."""
        manifest = self.manifest
        rows = iter(rows)
        first = next(rows, None)
        if first is None:
            return
        rows = itertools.chain([first], rows)
        located = ((row, self._location(row)) for row in rows)
        for_paths, for_sizes, for_checks = itertools.tee(located, 3)
        paths = (location.path for _, location in for_paths)
        sizes = (location.size for _, location in for_sizes)
        every_line = self._lines if lines is None else None
        # Objects checked by size alone are not counted. Each object's count is an addition, not a lock, and the
        # reports made while the pass runs see it (datamount.storage.counters.RunningCount).
        counting = self.tally.running("bytes_verified") if self.verify else contextlib.nullcontext(RunningCount(""))
        with counting as verified:
            hashing = self.verify and self._sha256_only(first)
            reads = self.store.read_many_hashed if hashing else self.store.read_many
            blobs = reads(paths, sizes=sizes, max_requests=self.max_requests, max_bytes=self.max_bytes)
            for row, location, read in objects_read(self.store, manifest, for_checks, blobs):
                data, digest = read if hashing else (read, None)
                checked = check_object(self.store, manifest, row, location, data, hashed=self.verify, digest=digest)
                verified.value += len(checked)
                line = every_line[row] if every_line is not None else next(lines)  # type: ignore[arg-type]
                yield (checked, *line[1:])
