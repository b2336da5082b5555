"""Writing a version's file entries as the parts a format-6 manifest lists (:mod:`datamount.datasets.file_parts`),
and an image version's indexes by path and by row (format 7, :mod:`datamount.datasets.row_index`).

The entries are read once, in whatever order the writer gives them, and sorted by path in bounded memory: runs of
:data:`RUN_ROWS` entries are made Arrow tables and sorted by Arrow; when there is more than one, they are spilled to
temporary Arrow files and merged, a batch of each at a time (runs that follow each other in order, as a writer that
sorted its files gives them, are read one after the other). Nothing is kept per entry beyond one run and one batch
of each run: about 100 bytes an entry, so 110 MB for a run, and 1.5 MB for each run's batch.

An image version's list gives each row's path: its ``(path, row)`` pairs are sorted by path the same way (in runs
of :data:`PAIR_RUN_ROWS`) and joined with the sorted entries, a batch of entries at a time (each entry gets the first
row that names it; a path no entry has is refused). Each row's file then goes to its place in a temporary file of
fixed-width records (49 bytes a row, on disk, not in memory), which is read in row order into the row index's parts.

Memory freed by a sort's copies, and by each window of the list, is handed back to the system as it is freed: Arrow's
allocator would keep it for reuse, on top of what the interpreter keeps from the list's check, and an upload's peak
grew by it (tests/datasets/test_upload_memory.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import mmap
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datamount.datasets import layout, list_windows
from datamount.datasets.file_entry import FileEntry, collector_paused
from datamount.datasets.file_parts import ROWS_PER_PART, FilePart
from datamount.storage import ObjectExistsError, Store

#: Entries sorted in memory at once, as Arrow columns; more are spilled to disk and merged.
RUN_ROWS = 1 << 20
#: A list's ``(path, row)`` pairs sorted in memory at once (about 25 bytes a pair, three copies while sorted).
PAIR_RUN_ROWS = 1 << 18
#: Entries made Arrow columns at once from the writer's entries (the Python objects held meanwhile).
_CONVERT_ROWS = 1 << 16
#: Entries read at once from each spilled run while merging.
_MERGE_ROWS = 1 << 14
#: Spilled runs merged at once: more are merged in groups of this many into longer runs first, so that a merge
#: holds this many batches whatever the number of rows.
MERGE_FAN_IN = 32

SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("sha256", pa.binary(32)),  # null for a file held only in shards (format 8)
        pa.field("xxh3", pa.binary(8)),
    ]
)
#: A list row's path and number, sorted by path to be joined with the entries.
PAIR_SCHEMA = pa.schema([pa.field("path", pa.string(), nullable=False), pa.field("row", pa.int64(), nullable=False)])
#: The row index's parts (:mod:`datamount.datasets.row_index`).
ROW_SCHEMA = pa.schema(
    [
        pa.field("size", pa.int64(), nullable=False),
        pa.field("sha256", pa.binary(32), nullable=False),
        pa.field("xxh3", pa.binary(8)),
    ]
)
_BY_PATH = [("path", "ascending")]
#: One row's file in the temporary file the row index is gathered in: its size, sha256, xxh3-64 and whether it has
#: one (and whether the row was given at all).
_ROW_RECORD = np.dtype([("size", "<i8"), ("sha256", "V32"), ("xxh3", "V8"), ("given", "u1")])
_HAS_XXH3, _GIVEN = 1, 2
#: What an entry no row names has as its first row while the pairs are read.
_NO_ROW = np.iinfo(np.int64).max
_NEWLINE, _TAB = ord("\n"), ord("\t")


def write_file_parts(
    store: Store,
    name: str,
    entries: Iterable[FileEntry],
    *,
    rows_per_part: int = ROWS_PER_PART,
    run_rows: int = RUN_ROWS,
) -> list[FilePart]:
    """Store ``entries`` (iterated once) as parts of dataset ``name`` of ``rows_per_part`` entries, sorted by path
    (``run_rows`` at a time in memory); the parts, in order.

    Two entries with one path are a :class:`ValueError`: a version has one file per path."""
    folder = layout.dataset_folder(name)
    with tempfile.TemporaryDirectory(prefix="datamount-entries-") as spill:
        ordered = _unique(_sorted_by_path(_entry_tables(entries), Path(spill), run_rows, SCHEMA))
        return [_store_part(store, folder, part) for part in _cut(ordered, rows_per_part)]


def write_indexes(
    store: Store,
    name: str,
    entries: Iterable[FileEntry],
    pairs: Iterable[pa.Table],
    rows: int,
    *,
    by_row: bool,
    rows_per_part: int = 0,
    run_rows: int = RUN_ROWS,
    pair_run_rows: int = PAIR_RUN_ROWS,
) -> tuple[list[FilePart], list[FilePart]]:
    """Store an image version's indexes in dataset ``name``: its ``entries`` sorted by path, each with the first row
    that names it (as :func:`write_file_parts`), and, ``by_row``, the row index of its ``rows`` list rows, given as
    ``pairs`` (tables of :data:`PAIR_SCHEMA`, each row once); the parts of each, in order.

    A row whose path no entry has, or a row not given, is a :class:`ValueError` naming it. ``rows_per_part``: 0 for
    :data:`~datamount.datasets.file_parts.ROWS_PER_PART`; ``run_rows`` entries and ``pair_run_rows`` pairs are
    sorted in memory at once."""
    rows_per_part = rows_per_part or ROWS_PER_PART
    folder = layout.dataset_folder(name)
    with tempfile.TemporaryDirectory(prefix="datamount-indexes-") as spill:
        ordered = _unique(_sorted_by_path(_entry_tables(entries), Path(spill) / "entries", run_rows, SCHEMA))
        sorted_pairs = _sorted_by_path(iter(pairs), Path(spill) / "pairs", pair_run_rows, PAIR_SCHEMA)
        records = _RowRecords.opened(Path(spill) / "rows.bin", rows) if by_row else contextlib.nullcontext()
        with records as gathered:
            joined = _joined(ordered, sorted_pairs, gathered)
            path_parts = [_store_part(store, folder, part) for part in _cut(joined, rows_per_part)]
            if gathered is None:
                return path_parts, []
            row_parts = [_store_part(store, folder, part) for part in gathered.parts(rows_per_part)]
            return path_parts, row_parts


def list_pairs(store: Store, path: str, size: int, rows: int) -> Iterator[pa.Table]:
    """Each row's path and number in the normalised list of ``rows`` rows at ``path`` (``size`` bytes), as tables
    of :data:`PAIR_SCHEMA`, read a window at a time (:mod:`datamount.datasets.list_windows`: no Python object per
    row); a list that has not ``rows`` rows is a :class:`ValueError`."""
    row = 0
    for lines in list_windows.whole_lines(list_windows.read_windows(store, path, size)):
        if lines[-1] != _NEWLINE:
            raise ValueError(f"its list {store.url_for(path)} does not end with a line's end")
        paths = _first_fields(lines)
        pa.default_memory_pool().release_unused()
        yield pa.Table.from_arrays([paths, pa.array(np.arange(row, row + len(paths)))], schema=PAIR_SCHEMA)
        row += len(paths)
    if row != rows:
        raise ValueError(f"its list {store.url_for(path)} has {row:,} rows, not {rows:,}")


def _first_fields(lines: memoryview) -> pa.Array:
    """The first field (up to a tab, or the line's end) of each line of ``lines`` (whole lines of a normalised list,
    none empty)."""
    raw = np.frombuffer(lines, np.uint8)
    ends = np.flatnonzero(raw == _NEWLINE)
    starts = np.concatenate(([0], ends[:-1] + 1))
    tabs = np.flatnonzero(raw == _TAB)
    first_tab = tabs[np.minimum(np.searchsorted(tabs, starts), len(tabs) - 1)] if len(tabs) else ends
    stops = np.where((first_tab >= starts) & (first_tab < ends), first_tab, ends)
    try:
        return list_windows.strings_at(lines, starts, stops)
    except pa.ArrowInvalid as exc:
        raise ValueError(f"a path of its list is not UTF-8 ({exc})") from None


def entry_table(entries: Sequence[FileEntry]) -> pa.Table:
    """``entries`` as a table of the parts' columns."""
    if not entries:
        return SCHEMA.empty_table()
    with collector_paused():  # four tuples as long as the entries, no cycles: see collector_paused
        paths, sizes, digests, checks = zip(*entries, strict=True)
    return pa.Table.from_arrays(
        [pa.array(paths, pa.string()), pa.array(sizes, pa.int64()), _binary(digests, 32), _binary(checks, 8)],
        schema=SCHEMA,
    )


def _binary(values: Sequence[str], width: int) -> pa.Array:
    """Hex digests as a fixed-width binary column, decoded in one call (``""``: a null)."""
    text = "".join(values)
    if not text:
        return pa.nulls(len(values), pa.binary(width))
    if len(text) == 2 * width * len(values):
        raw = bytes.fromhex(text)
        return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(values), [None, pa.py_buffer(raw)])
    return pa.array([bytes.fromhex(value) if value else None for value in values], pa.binary(width))


def _entry_tables(entries: Iterable[FileEntry]) -> Iterator[pa.Table]:
    """``entries`` as tables of :data:`SCHEMA`, :data:`_CONVERT_ROWS` at a time."""
    given = iter(entries)
    while chunk := list(itertools.islice(given, _CONVERT_ROWS)):
        yield entry_table(chunk)


def _sorted_by_path(tables: Iterator[pa.Table], spill: Path, run_rows: int, schema: pa.Schema) -> Iterator[pa.Table]:
    """The rows of ``tables`` (of ``schema``) sorted by path (:func:`sorted_tables`)."""
    return sorted_tables(tables, spill, run_rows, schema, _BY_PATH)


def sorted_tables(
    tables: Iterator[pa.Table],
    spill: Path,
    run_rows: int,
    schema: pa.Schema,
    sort_keys: Sequence[tuple[str, str]],
) -> Iterator[pa.Table]:
    """The rows of ``tables`` (of ``schema``) sorted by ``sort_keys`` (ascending columns, as Arrow's
    ``sort_indices`` takes them: strings in byte order), as tables, holding at most one run of ``run_rows`` of them
    in memory (more are spilled to the folder ``spill``). Every row of ``tables`` is read before the first table is
    given."""
    runs: list[Path] = []
    in_order = True  # every run after the one before it: read them one after the other, no merge
    last: list[Any] = []
    spill.mkdir(exist_ok=True)
    for run in _runs(tables, run_rows, sort_keys):
        in_order = in_order and (not runs or _key_at(run, 0, sort_keys) > last)
        last = _key_at(run, run.num_rows - 1, sort_keys)
        if not runs and run.num_rows < run_rows:  # the only run: no disk
            yield run
            return
        runs.append(_spill(run, spill / f"run-{len(runs)}.arrow", schema))
    if in_order:
        for path in runs:
            yield from _read_run(path)
        return
    while len(runs) > MERGE_FAN_IN:
        groups = [runs[start : start + MERGE_FAN_IN] for start in range(0, len(runs), MERGE_FAN_IN)]
        runs = [
            _merged_run(group, spill / f"merged-{len(runs)}-{i}.arrow", schema, sort_keys)
            for i, group in enumerate(groups)
        ]
    yield from _merged([_read_run(path) for path in runs], sort_keys)


def _merged_run(group: list[Path], path: Path, schema: pa.Schema, sort_keys: Sequence[tuple[str, str]]) -> Path:
    """Spilled runs merged into one, spilled to ``path``; the runs are removed."""
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema, options=options) as writer:
        for table in _merged([_read_run(run) for run in group], sort_keys):
            writer.write_table(table, max_chunksize=_MERGE_ROWS)
    for run in group:
        run.unlink()
    return path


def _key_at(table: pa.Table, index: int, sort_keys: Sequence[tuple[str, str]]) -> list[Any]:
    """The sort key of row ``index`` of ``table``, as Python values: Python compares strings by code point, which
    is the order of their UTF-8 bytes, the order Arrow sorts them in."""
    return [table.column(name)[index].as_py() for name, _ in sort_keys]


def _runs(tables: Iterator[pa.Table], run_rows: int, sort_keys: Sequence[tuple[str, str]]) -> Iterator[pa.Table]:
    """The rows of ``tables`` in runs of ``run_rows`` (the last one shorter), each sorted by ``sort_keys``."""
    return (_ordered(run, sort_keys) for run in _cut(tables, run_rows))


def _ordered(table: pa.Table, sort_keys: Sequence[tuple[str, str]]) -> pa.Table:
    table = table.combine_chunks()
    ordered = table.take(pc.sort_indices(table, sort_keys=sort_keys))
    del table
    pa.default_memory_pool().release_unused()  # a run's copies, freed: kept by the allocator, they add up to 100 MB
    return ordered


def _spill(run: pa.Table, path: Path, schema: pa.Schema) -> Path:
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema, options=options) as writer:
        writer.write_table(run, max_chunksize=_MERGE_ROWS)
    return path


def _read_run(path: Path) -> Iterator[pa.Table]:
    with pa.OSFile(str(path), "rb") as source:
        reader = pa.ipc.open_file(source)
        for number in range(reader.num_record_batches):
            yield pa.Table.from_batches([reader.get_batch(number)])


def _merged(runs: list[Iterator[pa.Table]], sort_keys: Sequence[tuple[str, str]]) -> Iterator[pa.Table]:
    """Sorted runs merged, a batch of each at a time: each round takes from every run the rows up to the smallest
    last key of their batches (all of one batch, at least), and sorts those."""
    pending = {number: next(run) for number, run in enumerate(runs)}
    while pending:
        bound = min(_key_at(batch, batch.num_rows - 1, sort_keys) for batch in pending.values())
        taken = []
        for number, batch in list(pending.items()):
            count = pc.sum(_at_most(batch, bound, sort_keys)).as_py() or 0
            taken.append(batch.slice(0, count))
            if count < batch.num_rows:
                pending[number] = batch.slice(count)
            elif (following := next(runs[number], None)) is not None:
                pending[number] = following
            else:
                del pending[number]
        rows = pa.concat_tables(taken)
        yield rows.take(pc.sort_indices(rows, sort_keys=sort_keys))


def _at_most(batch: pa.Table, bound: Sequence[Any], sort_keys: Sequence[tuple[str, str]]) -> pa.ChunkedArray:
    """Whether each row's sort key is ``bound`` or before it, compared column after column: runs hold rows of one
    key too, and a merge that took them by their first column alone would put them out of order."""
    names = [name for name, _ in sort_keys]
    found = pc.less_equal(batch.column(names[-1]), bound[-1])
    for name, value in zip(reversed(names[:-1]), reversed(bound[:-1]), strict=True):
        column = batch.column(name)
        found = pc.or_(pc.less(column, value), pc.and_(pc.equal(column, value), found))
    return found


def _unique(tables: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """The sorted ``tables``, checked to name each path once."""
    previous: str | None = None
    for table in tables:
        if not table.num_rows:
            continue
        paths = table.column("path").combine_chunks()
        if paths[0].as_py() == previous:
            raise ValueError(f"two file entries have the path {previous!r}")
        repeated = pc.equal(paths.slice(1), paths.slice(0, len(paths) - 1))
        if pc.any(repeated).as_py():
            at = pc.index(repeated, True).as_py()
            raise ValueError(f"two file entries have the path {paths[at].as_py()!r}")
        previous = paths[-1].as_py()
        yield table


def _cut(tables: Iterator[pa.Table], rows: int) -> Iterator[pa.Table]:
    """The rows of ``tables`` in tables of ``rows`` (the last one shorter)."""
    held: list[pa.Table] = []
    count = 0
    for table in tables:
        held.append(table)
        count += table.num_rows
        while count >= rows:
            joined = pa.concat_tables(held)
            yield joined.slice(0, rows)
            held, count = [joined.slice(rows)], count - rows
    if count:
        yield pa.concat_tables(held)


def _joined(entries: Iterator[pa.Table], pairs: Iterator[pa.Table], gathered: _RowRecords | None) -> Iterator[pa.Table]:
    """The sorted ``entries`` with a ``row`` column, each entry's first row among the sorted ``pairs`` (null for an
    entry no row names); each pair's entry's file put in ``gathered`` at its row. Entries and pairs are taken
    :data:`_MERGE_ROWS` at a time, however many rows name one file."""
    waiting = _Pairs(pairs)
    for whole in entries:
        for start in range(0, whole.num_rows, _MERGE_ROWS):
            table = whole.slice(start, _MERGE_ROWS)
            paths = table.column("path")
            firsts = np.full(table.num_rows, _NO_ROW, np.int64)
            for chunk in waiting.up_to(paths[-1].as_py()):
                at = pc.index_in(chunk.column("path"), value_set=paths)
                if at.null_count:
                    unknown = chunk.column("path").filter(pc.is_null(at))[0].as_py()
                    raise ValueError(f"the list names {unknown!r}, which has no file entry")
                if gathered is not None:
                    gathered.put(chunk.column("row"), table.take(at))
                least = chunk.group_by("path").aggregate([("row", "min")])
                where = pc.index_in(least.column("path"), value_set=paths).to_numpy()
                firsts[where] = np.minimum(firsts[where], least.column("row_min").to_numpy())
            yield table.append_column("row", pa.array(firsts, mask=firsts == _NO_ROW))
    waiting.check_done()


class _Pairs:
    """The sorted ``(path, row)`` pairs, handed out up to a path at a time, in chunks of :data:`_MERGE_ROWS`."""

    def __init__(self, pairs: Iterator[pa.Table]) -> None:
        self._pairs = pairs
        self._held = PAIR_SCHEMA.empty_table()

    def up_to(self, last: str) -> Iterator[pa.Table]:
        """The pairs whose path is ``last`` or sorts before it (and after those taken before)."""
        while True:
            if not self._held.num_rows:
                following = next(self._pairs, None)
                if following is None:
                    return
                self._held = following
                continue
            count = pc.sum(pc.less_equal(self._held.column("path"), last)).as_py() or 0
            for start in range(0, count, _MERGE_ROWS):
                yield self._held.slice(start, min(_MERGE_ROWS, count - start))
            if count < self._held.num_rows:
                self._held = self._held.slice(count)
                return
            self._held = PAIR_SCHEMA.empty_table()

    def check_done(self) -> None:
        """Refuse a pair left over: its path sorts after every entry's."""
        for left in itertools.chain([self._held], self._pairs):
            if left.num_rows:
                raise ValueError(f"the list names {left.column('path')[0].as_py()!r}, which has no file entry")


class _RowRecords:
    """Each row's file, put at its row in a temporary file of fixed-width records, then read in row order.

    The file is mapped; the pages written are handed back to the kernel after each put (they stay in the file, not
    in this process's memory), so a put touches only the pages its rows fall in."""

    def __init__(self, mapped: mmap.mmap, rows: int) -> None:
        self._rows = rows
        self._mapped = mapped
        self._records = np.frombuffer(mapped, dtype=_ROW_RECORD, count=rows)

    @classmethod
    @contextlib.contextmanager
    def opened(cls, path: Path, rows: int) -> Iterator[_RowRecords]:
        """The records of ``rows`` rows, in a new file at ``path``, unmapped on leaving."""
        with path.open("w+b") as file:
            file.truncate(max(rows, 1) * _ROW_RECORD.itemsize)
            mapped = mmap.mmap(file.fileno(), 0)
        records = cls(mapped, rows)
        try:
            yield records
        finally:
            del records._records
            mapped.close()

    def put(self, rows: pa.ChunkedArray, files: pa.Table) -> None:
        at = rows.to_numpy()
        if len(at) and (at.min() < 0 or at.max() >= self._rows):
            raise ValueError(f"a list row numbered {int(at.max() if at.max() >= self._rows else at.min())}")
        records = self._records
        records["size"][at] = files.column("size").to_numpy()
        records["sha256"][at] = _fixed(files.column("sha256"), 32)
        checks = files.column("xxh3").combine_chunks()
        flags = np.full(len(at), _GIVEN, np.uint8)
        if checks.null_count < len(checks):
            valid = checks.is_valid().to_numpy(zero_copy_only=False)
            records["xxh3"][at] = _fixed(checks, 8)
            flags |= valid.astype(np.uint8) * _HAS_XXH3
        records["given"][at] = flags
        self._mapped.madvise(mmap.MADV_DONTNEED)

    def parts(self, rows_per_part: int) -> Iterator[pa.Table]:
        """The rows' files in row order, as tables of :data:`ROW_SCHEMA` of ``rows_per_part`` rows."""
        for start in range(0, self._rows, rows_per_part):
            chunk = np.asarray(self._records[start : start + rows_per_part])
            given = chunk["given"]
            if not (given & _GIVEN).all():
                raise ValueError(f"list row {start + int(np.argmin(given & _GIVEN))} has no file entry")
            has = (given & _HAS_XXH3).astype(bool)
            digests = pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(32), len(chunk), [None, pa.py_buffer(chunk["sha256"].tobytes())]
            )
            checks = pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(8), len(chunk), [None, pa.py_buffer(chunk["xxh3"].tobytes())]
            )
            checks = pc.if_else(pa.array(has), checks, pa.nulls(len(chunk), pa.binary(8)))
            table = pa.Table.from_arrays([pa.array(chunk["size"]), digests, checks], schema=ROW_SCHEMA)
            del chunk, given
            self._mapped.madvise(mmap.MADV_DONTNEED)
            yield table


def _fixed(column: pa.ChunkedArray | pa.Array, width: int) -> np.ndarray:
    """A fixed-width binary column's values as an array of ``width``-byte values (a null's bytes are anything)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return np.frombuffer(array.buffers()[1], dtype=f"V{width}", count=len(array), offset=array.offset * width)


def encode_part(table: pa.Table) -> bytes:
    """The Parquet bytes of a part holding ``table`` (entries by path, or a row index's rows): paths
    delta-encoded (sorted paths share their prefixes), integers delta-packed, zstd."""
    integers = {name: "DELTA_BINARY_PACKED" for name in ("size", "row") if name in table.column_names}
    paths = {"path": "DELTA_BYTE_ARRAY"} if "path" in table.column_names else {}
    out = io.BytesIO()
    pq.write_table(
        table.combine_chunks(),
        out,
        compression="zstd",
        use_dictionary=False,
        column_encoding=paths | integers,
        write_statistics=False,
        store_schema=False,
    )
    return out.getvalue()


def _store_part(store: Store, folder: str, table: pa.Table) -> FilePart:
    """Store one part (named by its content) of entries by path (its ``first`` path is the part's first) or of a row
    index (``first`` is empty: rows are found by number)."""
    data = encode_part(table)
    sha256 = hashlib.sha256(data).hexdigest()
    key = layout.file_part_key(sha256)
    with contextlib.suppress(ObjectExistsError):  # named by its content: the same part, stored by an earlier commit
        store.create(f"{folder}/{key}", data)
    files_size = pc.sum(table.column("size")).as_py() or 0
    first = table.column("path")[0].as_py() if "path" in table.column_names else ""
    return FilePart(key, table.num_rows, len(data), sha256, files_size, first)
