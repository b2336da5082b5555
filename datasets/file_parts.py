"""A version's file entries kept out of its manifest's JSON: Parquet parts that the manifest lists (format 6).

The rule: a manifest of format 6 names its files' entries by the parts that hold them, each part by its path, rows,
size and sha256, and the first path it holds. The entries are sorted by path across the parts, so that

- the manifest's JSON is a few hundred bytes per part of :data:`ROWS_PER_PART` entries whatever the number of
  files (``info``, ``ls`` and opening a version read it alone);
- entry ``i`` is in the part whose rows cover ``i``, and the entry of a path in the last part whose first path is
  not after it (the index by path, built by the commit's sort): either is found reading that part alone;
- a part is named by its sha256 (``entries/SHA256.parquet`` in the dataset folder), created exclusively, never
  written over, and checked against its size and sha256 whenever it is read; it is written before the manifest that
  names it, by the commit (:mod:`datamount.datasets.file_parts_writer`);
- a manifest sent to another process carries the parts' names and the store, not the entries: the process reads
  the parts it needs, from the local content cache when the sequence reads through one (``datamount://``'s).

Each part is a Parquet file of four columns: ``path`` (string, delta-encoded: sorted paths share their prefixes),
``size`` (int64), ``sha256`` (32 bytes; null for a file held only in shards, from format 8) and ``xxh3`` (8 bytes,
null for a file without one), zstd-compressed; from format 7, ``row`` (int64) too.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Self

from datamount.datasets.errors import ManifestError, MissingPartError
from datamount.datasets.file_entry import EntrySequence, FileEntry, collector_paused
from datamount.storage import IntegrityError, ObjectNotFoundError, Store
from datamount.storage.cache import ContentCache

#: Where a format-6 manifest lists the parts of its files' entries (instead of ``files``).
FILE_PARTS_KEY = "file_parts"
#: Entries per part: a part is about 1.4 MB for 32,768 files of an image version (42 bytes each, most of them its
#: sha256), read, checked and decoded in tens of ms; the manifest's JSON grows by about 290 bytes a part.
ROWS_PER_PART = 1 << 15
#: Parts kept decoded by one sequence, for a reader that asks for entries near each other.
_PARTS_KEPT = 2
#: Entries decoded at once by :meth:`FileParts.entries_from`: the first run, and the longest.
_FIRST_RUN, _LONGEST_RUN = 16, 4096


@dataclass(frozen=True)
class FilePart:
    """One part of a version's file entries: its path in the dataset folder, its entries (``rows``), its size and
    sha256, the total size of the files it names (``files_size``) and the first path it holds."""

    path: str
    rows: int
    size: int
    sha256: str
    files_size: int
    first: str


class StoredParts:
    """Parquet parts of a version's index kept in ``store`` (the dataset's folder ``folder``), each read, checked
    against its size and sha256, and decoded when it is first used (the last few used are kept decoded)."""

    #: What the parts hold, for errors: "file entries", "row index".
    holds = "file entries"

    def __init__(
        self,
        store: Store | None,
        folder: str,
        parts: Sequence[FilePart],
        where: str,
        cache: ContentCache | None = None,
        kept: int = _PARTS_KEPT,
    ) -> None:
        self.store = store
        #: Where the parts are kept once read (by sha256), for other processes to find them without the store.
        self.cache = cache
        self.folder = folder
        self.parts = list(parts)
        self._where = where
        self._starts = [0]
        for part in self.parts:
            self._starts.append(self._starts[-1] + part.rows)
        self._kept: OrderedDict[int, Any] = OrderedDict()
        #: Parts kept decoded, the last used (a part of 32,768 entries is about 2.5 MB decoded).
        self._keep = kept
        self._lock = threading.Lock()

    def cached_in(self, cache: ContentCache | None) -> Self:
        """These parts, read through ``cache`` (as they are, with none)."""
        if cache is None:
            return self
        return type(self)(self.store, self.folder, self.parts, self._where, cache, self._keep)

    def keeping(self, parts: int) -> Self:
        """These parts, the last ``parts`` used kept decoded (for a reader that comes back to them at random)."""
        return type(self)(self.store, self.folder, self.parts, self._where, self.cache, parts)

    def stored_in(self, store: Store, folder: str) -> bool:
        """Whether these parts are in ``store``'s dataset folder ``folder`` already."""
        return self.store is not None and self.store.url == store.url and self.folder == folder

    def __len__(self) -> int:
        return self._starts[-1]

    def _part_of(self, position: int) -> tuple[Any, int]:
        """The decoded part that holds ``position``, and ``position`` within it."""
        number = bisect.bisect_right(self._starts, position) - 1
        return self._part(number), position - self._starts[number]

    def _part(self, number: int) -> Any:
        """Part ``number``, read, checked and decoded (the last few used are kept)."""
        with self._lock:
            kept = self._kept.get(number)
            if kept is not None:
                self._kept.move_to_end(number)
                return kept
        part = self._read(self.parts[number])
        with self._lock:
            self._kept[number] = part
            while len(self._kept) > self._keep:
                self._kept.popitem(last=False)
        return part

    def _read(self, part: FilePart) -> Any:
        if self.store is None:
            raise ManifestError(f"{self._where} keeps its {self.holds} in parts in its store; read it with the store")
        path = f"{self.folder}/{part.path}"
        url = self.store.url_for(path)
        try:
            data = self._fetch(self.store, path, part)
        except ObjectNotFoundError as exc:
            raise MissingPartError(f"{self._where}: the part of its {self.holds} {url} is missing", exc) from exc
        decoded = self._decode(data, url)
        if len(decoded) != part.rows:
            raise ManifestError(f"{self._where}: {url} has {len(decoded)} rows of {self.holds}, not {part.rows}")
        return decoded

    def _decode(self, data: bytes, url: str) -> Any:
        """The part ``data`` (read from ``url``) decoded: a subclass's."""
        raise NotImplementedError

    def _fetch(self, store: Store, path: str, part: FilePart) -> bytes:
        """A part's bytes, checked against its size and sha256: from the cache when there is one (fetched into it
        from the store when not there, and again over a copy damaged since), else from the store."""

        def intact(data: bytes) -> bool:
            return len(data) == part.size and hashlib.sha256(data).hexdigest() == part.sha256

        if self.cache is not None:
            fill = lambda out: out.write(store.read(path))  # noqa: E731
            return self.cache.read(part.sha256, part.size, fill, check=intact, name=path)
        data = store.read(path)
        if not intact(data):
            raise IntegrityError(
                f"{self._where}: the part of its {self.holds} {store.url_for(path)} does not match its size and "
                "sha256: the store holds a damaged copy"
            )
        return data

    def __reduce__(self) -> tuple[Any, ...]:
        # The parts' names and the store: the process that gets it reads the parts it needs.
        return (type(self), (self.store, self.folder, self.parts, self._where, self.cache, self._keep))


class FileParts(StoredParts, EntrySequence):
    """The file entries of a format-6 manifest, read part by part from ``store`` (the dataset's folder ``folder``)
    when they are used: sorted by path; ``len`` and the files' total size from the manifest alone. From format 7
    (an image version with a list), each entry's part also records the first list row that names its path."""

    @functools.cached_property
    def _firsts(self) -> list[str]:
        """The first path of each part."""
        return [part.first for part in self.parts]

    def part_of_path(self, path: str) -> int:
        """The number of the part that may hold ``path``: the last whose first path is not after it (-1 when
        ``path`` sorts before every part)."""
        return bisect.bisect_right(self._firsts, path) - 1

    @property
    def files_size(self) -> int:
        """The total size of the files, from the manifest alone."""
        return sum(part.files_size for part in self.parts)

    def part_entries(self, number: int) -> list[FileEntry]:
        """The entries of part ``number``, read and checked."""
        return self._part(number).entries()

    def part_digests(self, number: int) -> tuple[Any, Any, Any, Any]:
        """The paths (strings), sizes, sha256s (32-byte values) and xxh3-64s (8-byte values; each null where not
        recorded) of part ``number``'s entries, as Arrow arrays: read and checked, no Python object per entry."""
        return self._part(number).digests()

    def _decode(self, data: bytes, url: str) -> _Part:
        return _Part(data, url)

    def stored_entry(self, path: str) -> FileEntry | None:
        """The entry of ``path``, read from the one part that may hold it; ``None`` when there is none."""
        found = self.located(path)
        return None if found is None else found[0]

    def located(self, path: str) -> tuple[FileEntry, int] | None:
        """The entry of ``path`` and the first list row that names it (-1 when the parts do not record it, before
        format 7), read from the one part that may hold it; ``None`` when there is none."""
        number = self.part_of_path(path)
        if number < 0:
            return None
        part = self._part(number)
        index = part.index(path)
        return None if index < 0 else (part.entry(index), part.row(index))

    def entries_from(self, path: str, stop: str | None = None) -> Iterator[tuple[FileEntry, int]]:
        """Each entry whose path is ``path`` or sorts after it, and before ``stop`` (when given), in order, with its
        first list row (as :meth:`located`): a part at a time, from the one that may hold ``path``; a part whose
        first path is ``stop`` or after it is not read.

        Entries are decoded in runs that double from :data:`_FIRST_RUN` to :data:`_LONGEST_RUN`: a caller that stops
        after a few (a folder's first name) decodes a few; a walk decodes whole runs at once, not one value at a
        time."""
        number = max(self.part_of_path(path), 0)
        run = _FIRST_RUN
        for current in range(number, len(self.parts)):
            if current > number and stop is not None and self._firsts[current] >= stop:
                return
            part = self._part(current)
            start = part.first_at_or_after(path) if current == number else 0
            end = len(part) if stop is None else part.first_at_or_after(stop)
            while start < end:
                yield from part.located_entries(start, min(start + run, end))
                start, run = start + run, min(2 * run, _LONGEST_RUN)

    def _entry_at(self, position: int) -> FileEntry:
        part, index = self._part_of(position)
        entry: FileEntry = part.entry(index)
        return entry

    def __iter__(self) -> Iterator[FileEntry]:
        for number in range(len(self.parts)):
            yield from self.part_entries(number)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FileParts) and self.parts == other.parts:
            return True
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FileParts({len(self)} entries in {len(self.parts)} parts of {self._where})"


class _Part:
    """One part's entries as its columns: an entry is made when it is asked for, all of them for a pass."""

    __slots__ = ("_checks", "_digests", "_paths", "_rows", "_sizes")

    def __init__(self, data: bytes, url: str) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            # The asking thread, never Arrow's pools; ParquetFile, not read_table, which imports pyarrow.dataset and
            # pandas (0.4 s of a reader's first pass).
            table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
            self._paths = table.column("path").combine_chunks()
            self._sizes = table.column("size").combine_chunks()
            self._digests = table.column("sha256").combine_chunks()
            self._checks = table.column("xxh3").combine_chunks()
            self._rows = table.column("row").combine_chunks() if "row" in table.column_names else None
        except (pa.ArrowException, KeyError) as exc:
            raise ManifestError(f"the part of file entries {url} is damaged: {exc}") from exc

    def __len__(self) -> int:
        return len(self._sizes)

    def entry(self, index: int) -> FileEntry:
        check, digest = self._checks[index].as_py(), self._digests[index].as_py()
        path, size = self._paths[index].as_py(), self._sizes[index].as_py()
        return FileEntry(path, size, digest.hex() if digest else "", check.hex() if check else "")

    def row(self, index: int) -> int:
        """The first list row that names entry ``index``'s path (-1 when none does, or the part does not say)."""
        if self._rows is None:
            return -1
        row = self._rows[index].as_py()
        return -1 if row is None else int(row)

    def index(self, path: str) -> int:
        """Where ``path`` is among the part's sorted paths (-1 when it is not)."""
        at = self.first_at_or_after(path)
        return at if at < len(self) and self._paths[at].as_py() == path else -1

    def first_at_or_after(self, path: str) -> int:
        """The index of the first path that is ``path`` or sorts after it (the part's length when none does)."""
        low, high = 0, len(self)
        while low < high:  # the paths are sorted: a binary search reads log2(rows) of them
            middle = (low + high) // 2
            if self._paths[middle].as_py() < path:
                low = middle + 1
            else:
                high = middle
        return low

    def entries(self) -> list[FileEntry]:
        return self._entries(0, len(self))

    def digests(self) -> tuple[Any, Any, Any, Any]:
        return self._paths, self._sizes, self._digests, self._checks

    def located_entries(self, start: int, stop: int) -> list[tuple[FileEntry, int]]:
        """Entries ``start`` to ``stop`` (not included), each with its first list row (as :meth:`row`)."""
        entries = self._entries(start, stop)
        if self._rows is None:
            return [(entry, -1) for entry in entries]
        taken = self._rows.slice(start, stop - start)
        rows = taken.to_pylist()
        if taken.null_count:  # not Arrow's fill_null: its scalar from a Python int imports pandas (0.2 s, once)
            rows = [-1 if row is None else row for row in rows]
        return list(zip(entries, rows, strict=True))

    def _entries(self, start: int, stop: int) -> list[FileEntry]:
        """Entries ``start`` to ``stop`` (not included), each column decoded at once."""
        count = stop - start
        digests, checks = _hex_values(self._digests.slice(start, count)), _hex_values(self._checks.slice(start, count))
        with collector_paused():
            paths = self._paths.slice(start, count).to_pylist()
            sizes = self._sizes.slice(start, count).to_pylist()
            return list(map(FileEntry._make, zip(paths, sizes, digests, checks, strict=True)))


def _hex_text(column: Any, width: int) -> str:
    """The hex text of a fixed-width binary column without nulls, all values one after the other."""
    data = column.buffers()[1]
    return data.to_pybytes()[column.offset * width : (column.offset + len(column)) * width].hex()


def _hex_values(column: Any) -> list[str]:
    """Each value of a fixed-width binary column as hex (``""`` for a null)."""
    if column.null_count == len(column):
        return [""] * len(column)
    if column.null_count:
        return ["" if value is None else value.hex() for value in column.to_pylist()]
    step = 2 * column.type.byte_width
    text = _hex_text(column, column.type.byte_width)
    return [text[i : i + step] for i in range(0, len(text), step)]
