"""Per-row data of a list too large for memory, on local disk: an external sort and a file-entry spool.

The rule: what a writer keeps about a list's rows grows with the rows only on disk, in a temporary folder it owns.
Memory holds a bounded window: at most :data:`RUN_RECORDS` records waiting to be sorted, a block of each run being
merged, a block of a spool being read or written.
"""

from __future__ import annotations

import array
import heapq
import itertools
import os
import pickle
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO, Any

from datamount.datasets.file_entry import EntrySequence, FileEntry

#: Records sorted in memory before they are written out as a run: about 50 MB of short tuples of strings (a list's
#: checked paths; a commit's Arrow sorts come after, so this is what the upload holds beside them).
RUN_RECORDS = 1 << 18
#: Runs merged at once (each holds an open file and a block of records); more are merged in several rounds.
FAN_IN = 64
#: Records read or written at once from a run.
BLOCK_RECORDS = 4096

Record = tuple[Any, ...]


class ExternalSort:
    """Records (tuples of comparable values) sorted in bounded memory, whatever their number.

    :meth:`add` keeps up to ``run_records`` (default :data:`RUN_RECORDS`) in memory; then they are sorted and
    written to a run file in ``folder``. :meth:`sorted` merges the runs (``fan_in`` at a time, default
    :data:`FAN_IN`) and yields every record once, in order. Records compare as tuples, so a record's first values
    are its key and the later ones break ties.
    """

    def __init__(self, folder: str, *, run_records: int | None = None, fan_in: int | None = None) -> None:
        run_records = RUN_RECORDS if run_records is None else run_records
        fan_in = FAN_IN if fan_in is None else fan_in
        if run_records < 1 or fan_in < 2:
            raise ValueError(f"run_records must be >= 1 and fan_in >= 2, got {run_records} and {fan_in}")
        self._folder = folder
        self._run_records = run_records
        self._fan_in = fan_in
        self._pending: list[Record] = []
        self._runs: list[str] = []
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, record: Record) -> None:
        self._pending.append(record)
        self._count += 1
        if len(self._pending) >= self._run_records:
            self._pending.sort()
            self._runs.append(self._write_run(self._pending))
            self._pending = []

    def spill(self) -> None:
        """Write the records kept in memory out as a run (for a sort read only later, if at all)."""
        if self._pending:
            self._pending.sort()
            self._runs.append(self._write_run(self._pending))
            self._pending = []

    def sorted(self) -> Iterator[Record]:
        """Every record added, in order (the runs are removed as they are read: call it once)."""
        self._pending.sort()
        while len(self._runs) > self._fan_in:  # a round of merges that leaves fewer runs
            merged = [self._write_run(_merged(self._runs[: self._fan_in]))]
            self._runs = self._runs[self._fan_in :] + merged
        runs, self._runs = self._runs, []
        pending, self._pending = self._pending, []
        yield from heapq.merge(*(_read_run(path) for path in runs), pending)

    def _write_run(self, records: Iterable[Record]) -> str:
        handle, path = tempfile.mkstemp(prefix="run-", dir=self._folder)  # other sorts share the folder
        with os.fdopen(handle, "wb") as out:
            source = iter(records)
            while block := list(itertools.islice(source, BLOCK_RECORDS)):
                pickle.dump(block, out, protocol=pickle.HIGHEST_PROTOCOL)
        return path


def _merged(paths: list[str]) -> Iterator[Record]:
    return heapq.merge(*(_read_run(path) for path in paths))


def _read_run(path: str) -> Iterator[Record]:
    """The records of a run, a block at a time; the run's file is removed as soon as it is open (its space is freed
    when the reading ends, read to the end or not)."""
    with open(path, "rb") as run:
        os.unlink(path)
        while True:
            try:
                block = pickle.load(run)
            except EOFError:
                return
            yield from block


class FileSpool(EntrySequence):
    """File entries kept in a temporary file as they are appended: a ``Sequence[FileEntry]`` whose ``len``, ``[i]``
    and iteration read the disk, so that a version of any number of files is committed without a list of them.

    One line per entry (``path TAB size TAB sha256 TAB xxh3``: a ``.list`` path holds no TAB or line break) in
    ``folder``/``name``, and each line's end offset in a second file, so that entry ``i`` is two reads. Appends are
    buffered; reading flushes them.
    """

    def __init__(self, folder: str, name: str = "files") -> None:
        self._data_path = os.path.join(folder, f"{name}.tsv")
        self._ends_path = os.path.join(folder, f"{name}.ends")
        self._data: IO[bytes] = open(self._data_path, "w+b")  # noqa: SIM115 (open while the spool is)
        self._ends: IO[bytes] = open(self._ends_path, "w+b")  # noqa: SIM115
        self._pending_ends = array.array("Q")
        self._written = 0
        self._count = 0
        #: Whether an entry carries an xxh3-64 (what decides the manifest's format, which cannot read them all).
        self.any_xxh3 = False

    def append(self, entry: FileEntry) -> None:
        path, size, sha256, xxh3 = entry
        if "\t" in path or "\n" in path:
            raise ValueError(f"a spooled file's path holds no TAB or line break, got {path!r}")
        line = f"{path}\t{size}\t{sha256}\t{xxh3}\n".encode()
        self.any_xxh3 = self.any_xxh3 or bool(xxh3)
        self._data.write(line)
        self._written += len(line)
        self._pending_ends.append(self._written)
        self._count += 1
        if len(self._pending_ends) >= BLOCK_RECORDS:
            self._flush_ends()

    def extend(self, entries: Iterable[FileEntry]) -> None:
        for entry in entries:
            self.append(entry)

    def _flush_ends(self) -> None:
        self._pending_ends.tofile(self._ends)
        self._pending_ends = array.array("Q")

    def _flush(self) -> None:
        if self._pending_ends:
            self._flush_ends()
        self._data.flush()
        self._ends.flush()

    def __len__(self) -> int:
        return self._count

    def _entry_at(self, index: int) -> FileEntry:
        self._flush()
        ends = array.array("Q")
        ends.frombytes(os.pread(self._ends.fileno(), 16 if index else 8, 8 * (index - 1) if index else 0))
        start, end = (ends[0], ends[1]) if index else (0, ends[0])
        return _entry(os.pread(self._data.fileno(), end - start, start))

    def __iter__(self) -> Iterator[FileEntry]:
        self._flush()
        count = self._count  # what was appended by now
        with open(self._data_path, "rb") as lines:
            for line in itertools.islice(lines, count):
                yield _entry(line)

    def __repr__(self) -> str:
        return f"FileSpool({self._count} entries in {self._data_path})"

    def close(self) -> None:
        """Close the spool's files (the folder that holds them is its owner's to remove)."""
        self._data.close()
        self._ends.close()


def _entry(line: bytes) -> FileEntry:
    path, size, sha256, xxh3 = line.decode().rstrip("\n").split("\t")
    return FileEntry(path, int(size), sha256, xxh3)
