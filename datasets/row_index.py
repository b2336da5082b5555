"""Each row's file of an unpacked image version, in row order: the row index (format 7).

The rule: a row of an image version is found, with what its bytes must be, by reading one part of an index, never by
reading every row's entry. Two indexes, both Parquet parts named by their sha256 in the dataset's
``versions/entries/`` folder, written by the commit in bounded memory (:mod:`datamount.datasets.file_parts_writer`)
and checked against their size and sha256 whenever they are read:

- **by path**: the file entries themselves (:class:`~datamount.datasets.file_parts.FileParts`), sorted by path, each
  with the first list row that names it (``row``): one path, or the paths under one folder, is a binary search over
  the parts' first paths plus one part read;
- **by row**: for a version whose files are stored as objects, each list row's file's ``size``, ``sha256`` (which
  names its object) and ``xxh3`` (which every read checks), :data:`~datamount.datasets.file_parts.ROWS_PER_PART`
  rows a part (:class:`RowIndex`): row ``i`` is in part ``i // ROWS_PER_PART``. A list that names a file several
  times has a row for each. A packed version needs none: its rows are found from its shards' entries.

Row ``i``'s path and labels are its list's line, read a block at a time
(:class:`~datamount.datasets.list_blocks.ListBlocks`); with the row index, a reader opens a version of any number of
rows and reads its first sample, or row ``i``, from one list block and one part.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from datamount.datasets.errors import ManifestError
from datamount.datasets.file_entry import collector_paused
from datamount.datasets.file_parts import StoredParts

#: Where a format-7 manifest lists its row index's parts.
ROW_PARTS_KEY = "row_parts"


class RowFile(NamedTuple):
    """What one row's file is: its size, the sha256 that names its object, and its xxh3-64 (empty for a file
    uploaded before format 4, whose reads check the sha256)."""

    size: int
    sha256: str
    xxh3: str


class RowIndex(StoredParts):
    """The row index of an unpacked image version (see the module's rule): ``len`` from the manifest alone, a row's
    file read from the one part that holds it."""

    holds = "row index"

    def file(self, row: int) -> RowFile:
        """Row ``row``'s file (``0 <= row < len(self)``)."""
        part, index = self._part_of(row)
        return part.files[index]

    def files(self, start: int, stop: int) -> Iterator[RowFile]:
        """The files of rows ``start`` to ``stop - 1``, in order, a part at a time."""
        row = start
        while row < stop:
            part, index = self._part_of(row)
            taken = part.files[index : index + stop - row]
            yield from taken
            row += len(taken)

    def _decode(self, data: bytes, url: str) -> _RowPart:
        return _RowPart(data, url)

    def __eq__(self, other: object) -> bool:
        return self.parts == other.parts if isinstance(other, RowIndex) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RowIndex({len(self)} rows in {len(self.parts)} parts of {self._where})"


class _RowPart:
    """One part of a row index, each row's file made once when the part is read (a pass takes every one)."""

    __slots__ = ("files",)

    def __init__(self, data: bytes, url: str) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from datamount.datasets.file_parts import _hex_values

        try:
            table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
            sizes = table.column("size").combine_chunks()
            digests = table.column("sha256").combine_chunks()
            checks = table.column("xxh3").combine_chunks()
        except (pa.ArrowException, KeyError) as exc:
            raise ManifestError(f"the part of a row index {url} is damaged: {exc}") from exc
        if digests.null_count:
            raise ManifestError(f"the part of a row index {url} is damaged: a row's file has no sha256")
        with collector_paused():
            columns = (sizes.to_pylist(), _hex_values(digests), _hex_values(checks))
            self.files = list(map(RowFile._make, zip(*columns, strict=True)))

    def __len__(self) -> int:
        return len(self.files)
