"""Writing a version's file entries as the parts a format-6 manifest lists (:mod:`datamount.datasets.file_parts`).

The entries are read once, in whatever order the writer gives them, and sorted by path in bounded memory: runs of
:data:`RUN_ROWS` entries are sorted in memory and, when there is more than one, spilled to temporary Arrow files and
merged (runs that follow each other in order, as a writer that sorted its files gives them, are read one after the
other). Nothing is kept per entry beyond one run and one part.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import io
import itertools
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from datamount.datasets import layout
from datamount.datasets.file_entry import FileEntry
from datamount.datasets.file_parts import ROWS_PER_PART, FilePart
from datamount.storage import ObjectExistsError, Store

#: Entries sorted in memory at once (about 90 MB of Python tuples); more are spilled to disk and merged.
RUN_ROWS = 1 << 18
#: Entries read at once from a spilled run while merging: the merge holds one such batch per run.
_MERGE_BATCH = 4096

_PART_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("sha256", pa.binary(32), nullable=False),
        pa.field("xxh3", pa.binary(8)),
    ]
)
_RUN_SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64()), ("sha256", pa.string()), ("xxh3", pa.string())])


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
        return [_store_part(store, folder, batch) for batch in _batches(ordered, rows_per_part)]


def _batches(entries: Iterator[FileEntry], size: int) -> Iterator[list[FileEntry]]:
    while batch := list(itertools.islice(entries, size)):
        yield batch


def _sorted_by_path(entries: Iterable[FileEntry], spill: Path, run_rows: int) -> Iterator[FileEntry]:
    """``entries`` sorted by path, holding at most one run of ``run_rows`` of them in memory."""
    runs: list[Path] = []
    in_order = True  # every run after the one before it: read them one after the other, no merge
    last = ""
    for run in _batches(iter(entries), run_rows):
        run.sort(key=_path_of)
        in_order = in_order and (not runs or run[0].path > last)
        last = run[-1].path
        if not runs and len(run) < run_rows:  # the only run: no disk
            yield from run
            return
        runs.append(_spill(run, spill / f"run-{len(runs)}.arrow"))
    readers = [_read_run(path) for path in runs]
    yield from itertools.chain(*readers) if in_order else heapq.merge(*readers, key=_path_of)


def _path_of(entry: FileEntry) -> str:
    return entry.path


def _unique(entries: Iterator[FileEntry]) -> Iterator[FileEntry]:
    previous = None
    for entry in entries:
        if entry.path == previous:
            raise ValueError(f"two file entries have the path {entry.path!r}")
        previous = entry.path
        yield entry


def _spill(run: list[FileEntry], path: Path) -> Path:
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, _RUN_SCHEMA, options=options) as writer:
        for start in range(0, len(run), _MERGE_BATCH):
            columns = [pa.array(column) for column in zip(*run[start : start + _MERGE_BATCH], strict=True)]
            writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=_RUN_SCHEMA))
    return path


def _read_run(path: Path) -> Iterator[FileEntry]:
    with pa.OSFile(str(path), "rb") as source:
        reader = pa.ipc.open_file(source)
        for number in range(reader.num_record_batches):
            batch = reader.get_batch(number)
            yield from map(FileEntry._make, zip(*(column.to_pylist() for column in batch.columns), strict=True))


def encode_part(entries: list[FileEntry]) -> bytes:
    """The Parquet bytes of a part holding ``entries``."""
    xxh3 = [bytes.fromhex(entry.xxh3) if entry.xxh3 else None for entry in entries]
    table = pa.Table.from_arrays(
        [
            pa.array([entry.path for entry in entries], pa.string()),
            pa.array([entry.size for entry in entries], pa.int64()),
            pa.array([bytes.fromhex(entry.sha256) for entry in entries], pa.binary(32)),
            pa.array(xxh3, pa.binary(8)),
        ],
        schema=_PART_SCHEMA,
    )
    out = io.BytesIO()
    pq.write_table(
        table,
        out,
        compression="zstd",
        use_dictionary=False,
        column_encoding={"path": "DELTA_BYTE_ARRAY", "size": "DELTA_BINARY_PACKED"},
        write_statistics=False,
        store_schema=False,
    )
    return out.getvalue()


def _store_part(store: Store, folder: str, entries: list[FileEntry]) -> FilePart:
    data = encode_part(entries)
    sha256 = hashlib.sha256(data).hexdigest()
    key = layout.file_part_key(sha256)
    with contextlib.suppress(ObjectExistsError):  # named by its content: the same part, stored by an earlier commit
        store.create(f"{folder}/{key}", data)
    return FilePart(key, len(entries), len(data), sha256, sum(entry.size for entry in entries), entries[0].path)
