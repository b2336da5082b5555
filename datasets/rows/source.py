"""The row-source protocol: how a version's rows are read, whatever its layout."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from datamount.datasets.manifest import Manifest
from datamount.storage import Store

if TYPE_CHECKING:
    import pyarrow as pa

#: A row: the version's columns in list order (an image's exact bytes first, then its labels; text columns; any
#: Arrow values of a table, tensors as numpy arrays).
Row = tuple[Any, ...]

#: Rows in one span of an unpacked version (a packed version's spans are its row groups).
DEFAULT_ROWS_PER_SPAN = 1024


@dataclass(frozen=True)
class Piece:
    """Rows to read from one span, in the order they are wanted (row numbers of the source)."""

    span: range
    rows: Sequence[int]


class RowSource(Protocol):
    """The rows of one dataset version, or of a part of it (a split).

    Rows are numbered from 0 to ``len(source) - 1``. A source is picklable, so that worker processes can take it.
    """

    store: Store
    #: The version read (narrowed to its split, for a split).
    manifest: Manifest
    #: The split read (``""``: the whole version).
    split: str
    #: How the rows are cut into spans (``"row-groups"``, ``"lines:N"``): a reader's saved position means the same
    #: only under the same layout.
    layout: str
    #: Whether binary values are read-only memoryviews into decoded data rather than new ``bytes`` (a packed
    #: version read with ``zero_copy``); what a reader yields, so a reader's saved state records it.
    zero_copy: bool

    def __len__(self) -> int: ...

    def spans(self) -> list[range]:
        """Consecutive row ranges that cover every row: the natural units of work (a packed version's row groups,
        each read with one request; runs of list lines otherwise)."""
        ...

    def rows(self, start: int, stop: int) -> Iterator[Row]:
        """Rows ``start`` to ``stop - 1`` in order (clipped to the source); ``rows(0, len(source))`` is a pass."""
        ...

    def row(self, index: int) -> Row:
        """Row ``index`` alone (random access); ``IndexError`` outside ``0 .. len - 1``."""
        ...

    def pieces(self, pieces: Iterable[Piece]) -> Iterator[Row]:
        """The rows of each piece, piece after piece, each in its order; pieces are read ahead while rows are
        taken."""
        ...

    def tables(self, pieces: Iterable[Piece]) -> Iterator[pa.Table]:
        """The rows of each piece as one Arrow table, in the piece's order, read and checked as :meth:`pieces` reads
        them: the version's columns with its shards' types (an image's bytes ``binary``, a list's other columns
        ``string``), for front ends that hand rows on as Arrow (``datamount.ray``)."""
        ...

    def counts(self) -> dict[str, float]:
        """What reading the source has done in this process, beyond its store's requests: ``bytes_verified`` (bytes
        checked against a checksum as they were read) and, with a cache, ``cache_hits``."""
        ...


def selected_columns(manifest: Manifest, columns: Sequence[str] | None) -> list[str]:
    """The version's columns a reader asked for (``None``: all of them), in the order asked; a name the version has
    not, or one asked twice, is a ``ValueError`` naming the columns it has."""
    if columns is None:
        return list(manifest.columns)
    if isinstance(columns, str) or not all(isinstance(name, str) for name in columns):
        raise TypeError(f"columns must be a list of column names, got {columns!r}")
    chosen = list(columns)
    unknown = [name for name in chosen if name not in manifest.columns]
    if unknown or not chosen or len(set(chosen)) != len(chosen):
        problem = f"has no column {unknown[0]!r}" if unknown else "needs one or more columns, each named once"
        raise ValueError(f"columns={chosen!r}: {manifest.ref} {problem} (its columns: {', '.join(manifest.columns)})")
    return chosen


def clip(start: int, stop: int, rows: int) -> tuple[int, int]:
    """``[start, stop)`` clipped to ``[0, rows)``: an empty range, never a slice from the end."""
    start = min(max(start, 0), rows)
    return start, max(min(stop, rows), start)


def line_spans(rows: int, rows_per_span: int) -> list[range]:
    """``rows`` cut into runs of ``rows_per_span``."""
    return [range(start, min(start + rows_per_span, rows)) for start in range(0, rows, rows_per_span)]


def out_of_range(index: int, manifest: Manifest, rows: int) -> IndexError:
    return IndexError(f"row {index} is out of range: {manifest.ref} has {rows} rows")


@contextlib.contextmanager
def closing(rows: Iterator[Row]) -> Iterator[Iterator[Row]]:
    """``rows``, closed when the block ends (if it can be: a generator's ``finally`` blocks run at once)."""
    try:
        yield rows
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()
