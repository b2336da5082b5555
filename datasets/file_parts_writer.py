"""Writing a version's file entries as the parts a format-6 manifest lists (:mod:`datamount.datasets.file_parts`).

The entries are read once, in whatever order the writer gives them, and sorted by path in bounded memory: runs of
:data:`RUN_ROWS` entries are made Arrow tables and sorted by Arrow; when there is more than one, they are spilled to
temporary Arrow files and merged, a batch of each at a time (runs that follow each other in order, as a writer that
sorted its files gives them, are read one after the other). Nothing is kept per entry beyond one run and one batch
of each run: about 100 bytes an entry, so 110 MB for a run, and 1.5 MB for each run's batch.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datamount.datasets import layout
from datamount.datasets.file_entry import FileEntry, collector_paused
from datamount.datasets.file_parts import ROWS_PER_PART, FilePart
from datamount.storage import ObjectExistsError, Store

#: Entries sorted in memory at once, as Arrow columns; more are spilled to disk and merged.
RUN_ROWS = 1 << 20
#: Entries made Arrow columns at once from the writer's entries (the Python objects held meanwhile).
_CONVERT_ROWS = 1 << 16
#: Entries read at once from each spilled run while merging.
_MERGE_ROWS = 1 << 14

SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("sha256", pa.binary(32), nullable=False),
        pa.field("xxh3", pa.binary(8)),
    ]
)
_BY_PATH = [("path", "ascending")]


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
        ordered = _unique(_sorted_by_path(entries, Path(spill), run_rows))
        return [_store_part(store, folder, part) for part in _cut(ordered, rows_per_part)]


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


def _sorted_by_path(entries: Iterable[FileEntry], spill: Path, run_rows: int) -> Iterator[pa.Table]:
    """``entries`` sorted by path, as tables, holding at most one run of ``run_rows`` of them in memory."""
    runs: list[Path] = []
    in_order = True  # every run after the one before it: read them one after the other, no merge
    last = ""
    for run in _runs(iter(entries), run_rows):
        paths = run.column("path")
        in_order = in_order and (not runs or paths[0].as_py() > last)
        last = paths[-1].as_py()
        if not runs and run.num_rows < run_rows:  # the only run: no disk
            yield run
            return
        runs.append(_spill(run, spill / f"run-{len(runs)}.arrow"))
    if in_order:
        for path in runs:
            yield from _read_run(path)
    else:
        yield from _merged([_read_run(path) for path in runs])


def _runs(entries: Iterator[FileEntry], run_rows: int) -> Iterator[pa.Table]:
    while True:
        pieces = []
        rows = 0
        while rows < run_rows and (chunk := list(itertools.islice(entries, min(_CONVERT_ROWS, run_rows - rows)))):
            pieces.append(entry_table(chunk))
            rows += len(chunk)
        if not rows:
            return
        run = pa.concat_tables(pieces).combine_chunks()
        yield run.take(pc.sort_indices(run, sort_keys=_BY_PATH))
        if rows < run_rows:
            return


def _spill(run: pa.Table, path: Path) -> Path:
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, SCHEMA, options=options) as writer:
        writer.write_table(run, max_chunksize=_MERGE_ROWS)
    return path


def _read_run(path: Path) -> Iterator[pa.Table]:
    with pa.OSFile(str(path), "rb") as source:
        reader = pa.ipc.open_file(source)
        for number in range(reader.num_record_batches):
            yield pa.Table.from_batches([reader.get_batch(number)])


def _merged(runs: list[Iterator[pa.Table]]) -> Iterator[pa.Table]:
    """Sorted runs merged, a batch of each at a time: each round takes from every run the rows up to the smallest
    last path of their batches (all of one batch, at least), and sorts those."""
    pending = {number: next(run) for number, run in enumerate(runs)}
    while pending:
        bound = min(batch.column("path")[-1].as_py() for batch in pending.values())
        taken = []
        for number, batch in list(pending.items()):
            count = pc.sum(pc.less_equal(batch.column("path"), bound)).as_py() or 0
            taken.append(batch.slice(0, count))
            if count < batch.num_rows:
                pending[number] = batch.slice(count)
            elif (following := next(runs[number], None)) is not None:
                pending[number] = following
            else:
                del pending[number]
        rows = pa.concat_tables(taken)
        yield rows.take(pc.sort_indices(rows, sort_keys=_BY_PATH))


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


def encode_part(table: pa.Table) -> bytes:
    """The Parquet bytes of a part holding ``table``'s entries."""
    out = io.BytesIO()
    pq.write_table(
        table.combine_chunks(),
        out,
        compression="zstd",
        use_dictionary=False,
        column_encoding={"path": "DELTA_BYTE_ARRAY", "size": "DELTA_BINARY_PACKED"},
        write_statistics=False,
        store_schema=False,
    )
    return out.getvalue()


def _store_part(store: Store, folder: str, table: pa.Table) -> FilePart:
    data = encode_part(table)
    sha256 = hashlib.sha256(data).hexdigest()
    key = layout.file_part_key(sha256)
    with contextlib.suppress(ObjectExistsError):  # named by its content: the same part, stored by an earlier commit
        store.create(f"{folder}/{key}", data)
    files_size = pc.sum(table.column("size")).as_py() or 0
    return FilePart(key, table.num_rows, len(data), sha256, files_size, table.column("path")[0].as_py())
