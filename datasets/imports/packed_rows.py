"""Rows packed as litdata and MosaicML MDS pack them, shared by :mod:`.litdata` and :mod:`.mds`.

Both lay a chunk (litdata) or shard (MDS) out as ``uint32 rows``, ``uint32 offsets[rows + 1]`` (where each row starts
in the file, and where the last ends), then the rows. A row is a header of ``uint32`` sizes, one for each field whose
size the format records there (litdata: every field; MDS: the fields of no fixed size), then each field's bytes in
order. The rule checked here: the offsets start where the format says, never go back, and end where the file does;
a row's header sizes, with the fixed ones, add up to the row's bytes. Anything else is a :class:`RowError` naming
the row, which the format turns into a :class:`~.source.SourceError` naming its shard.
"""

from __future__ import annotations

import io
import json
import posixpath
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any, Protocol

import numpy as np
import pyarrow as pa

from datamount.datasets.imports.location import Location
from datamount.datasets.imports.source import BATCH_ROWS, SourceError
from datamount.storage import ObjectNotFoundError, Store

#: Bytes of rows in one batch, at most (a single larger row is a batch of its own): memory follows the batch.
BATCH_BYTES = 32 << 20
_UINT32 = np.dtype("<u4")


class RowError(ValueError):
    """Row ``row`` (of the rows given, from 0) is wrong: ``reason`` says how."""

    def __init__(self, row: int, reason: str) -> None:
        self.row, self.reason = row, reason
        super().__init__(f"row {row}: {reason}")


@dataclass(frozen=True)
class Column:
    """A field of the rows: its Arrow field, its fixed size in bytes (``None``: the row's header gives it), and
    whether the row's header holds its size (litdata's does for every field, MDS's for the variable ones only).

    The Arrow type decides how the bytes are read: ``binary`` as they are, ``string`` as UTF-8 (checked), ``bool``
    one byte (not 0: true), a fixed-size number little-endian; a number of no fixed size is its decimal text."""

    field: pa.Field
    width: int | None
    sized: bool


def folder_of(location: Location, index: str, tool: str) -> str:
    """The folder of a source named by its folder or by its ``index`` file: a prefix of ``location.store``'s paths
    (``""``, or ``"sub/"``)."""
    if not location.names:
        return ""
    if len(location.names) == 1 and posixpath.basename(location.names[0]) == index:
        folder = posixpath.dirname(location.names[0])
        return f"{folder}/" if folder else ""
    raise SourceError(location.where, location.names[0], f"a {tool} source is the folder of its {index}, or that file")


def read_index(store: Store, path: str, where: str) -> dict[str, Any]:
    """The JSON object in the index file at ``path``; a :class:`SourceError` where there is none or it does not
    read."""
    name = posixpath.basename(path)
    try:
        index = json.loads(store.read(path))
    except ObjectNotFoundError as error:
        raise SourceError(where, name, "no such file: the folder holds no dataset of this format") from error
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SourceError(where, name, f"not JSON: {error}") from error
    if not isinstance(index, dict):
        raise SourceError(where, name, "not a JSON object")
    return index


def inside(prefix: str, name: str, where: str) -> str:
    """The path in the store of the file an index names ``name``, in the source's folder ``prefix``; refused
    where it is not a plain path inside that folder."""
    parts = name.split("/")
    if not name or name.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise SourceError(where, name, "the index names a file outside its folder")
    return prefix + name


class Damaged(ValueError):
    """A file's bytes could not be read past byte ``at`` (of what it decompresses to, where it is compressed)."""

    def __init__(self, at: int, reason: str) -> None:
        self.at, self.reason = at, reason
        super().__init__(f"byte {at}: {reason}")


class Bytes(Protocol):
    """A file's bytes, by range: ``[start, end)``, shorter where the file ends first."""

    def read(self, start: int, end: int) -> bytes: ...


class Ranges:
    """The bytes of an object in a store, each range read when asked for (no order)."""

    def __init__(self, store: Store, path: str) -> None:
        self.store, self.path = store, path

    def read(self, start: int, end: int) -> bytes:
        return self.store.read_range(self.path, start, end)


class Memory:
    """Bytes held whole (a file decompressed in one piece)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, start: int, end: int) -> bytes:
        return self.data[start:end]


class Stream:
    """The bytes of a stream read front to back (an object in a store, or what it decompresses to): ranges are
    asked for in order, what lies between two is read and dropped. A stream that fails is :class:`Damaged` at the
    byte it reached."""

    PIECE = 1 << 20

    def __init__(self, source: Any) -> None:
        self.source, self.position = source, 0

    def read(self, start: int, end: int) -> bytes:
        if start < self.position:
            raise ValueError(f"a stream is read in order: byte {start} asked for after byte {self.position}")
        self._take(start - self.position, keep=False)
        return self._take(end - start, keep=True)

    def rest(self) -> int:
        """Read to the end; the bytes that were left."""
        before = self.position
        while self._take(self.PIECE, keep=False, whole=False):
            pass
        return self.position - before

    def _take(self, count: int, *, keep: bool, whole: bool = True) -> bytes:
        pieces = []
        while count > 0:
            try:
                piece = self.source.read(min(count, self.PIECE))
            except (OSError, pa.ArrowException) as error:
                raise Damaged(self.position, str(error)) from error
            if not piece:
                break
            self.position += len(piece)
            count -= len(piece)
            if keep or not whole:
                pieces.append(piece)
            if not whole:
                break
        return b"".join(pieces)


class Tally(io.RawIOBase):
    """A file read front to back through ``hashers``, its bytes counted (the compressed file under a
    decompressing stream)."""

    def __init__(self, source: IO[bytes], hashers: Iterable[Any] = ()) -> None:
        super().__init__()
        self.source, self.hashers, self.count = source, list(hashers), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.source.read(len(buffer))
        for hasher in self.hashers:
            hasher.update(data)
        self.count += len(data)
        buffer[: len(data)] = data
        return len(data)


def decompressing(source: IO[bytes] | io.RawIOBase, codec: str) -> pa.NativeFile:
    """What ``source`` decompresses to with Arrow's streaming ``codec`` (``zstd``, ``gzip``, ``bz2``,
    ``brotli``), read front to back."""
    return pa.CompressedInputStream(pa.PythonFile(source, mode="r"), codec)


def row_at(offsets: np.ndarray, first: int, byte: int) -> int:
    """The row, from ``first`` on, whose bytes hold byte ``byte`` (the last row where it is past them all)."""
    row = int(np.searchsorted(offsets, byte, side="right")) - 1
    return min(max(row, first), len(offsets) - 2)


def read_offsets(header: bytes, rows: int) -> np.ndarray:
    """The offsets table of a file whose first bytes are ``header`` and whose index records ``rows`` rows; a
    :class:`RowError` (row 0) where the file says another count or is too short to hold the table."""
    if len(header) < 4:
        raise RowError(0, f"the file has {len(header)} bytes: too short for its row count")
    (count,) = np.frombuffer(header, _UINT32, count=1)
    if int(count) != rows:
        raise RowError(0, f"the file holds {int(count)} rows, its index records {rows}")
    need = 4 + 4 * (rows + 1)
    if len(header) < need:
        raise RowError(0, f"the file has {len(header)} bytes: too short for its offsets table ({need})")
    return np.frombuffer(header, _UINT32, count=rows + 1, offset=4).astype(np.int64)


def check_offsets(offsets: np.ndarray, *, first: int, size: int) -> None:
    """That ``offsets`` start at ``first`` and never go back, within a file of ``size`` bytes: a :class:`RowError`
    naming the first row they place wrong (a row past ``size``: the file is truncated)."""
    if offsets[0] != first:
        raise RowError(0, f"the offsets table puts row 0 at byte {offsets[0]}, the header ends at byte {first}")
    back = np.flatnonzero(offsets[1:] < offsets[:-1])
    if back.size:
        row = int(back[0])
        raise RowError(row, f"the offsets table ends it at byte {offsets[row + 1]}, before it starts ({offsets[row]})")
    cut = np.flatnonzero(offsets[1:] > size)
    if cut.size:
        row = int(cut[0])
        raise RowError(row, f"it ends at byte {offsets[row + 1]}, the file has {size} bytes: truncated")


def spans(offsets: np.ndarray, first: int) -> Iterator[tuple[int, int]]:
    """Rows ``[a, b)`` from row ``first`` on, in batches of at most :data:`BATCH_ROWS` rows and
    :data:`BATCH_BYTES` bytes (a larger row alone)."""
    rows = len(offsets) - 1
    start = first
    while start < rows:
        fit = int(np.searchsorted(offsets, offsets[start] + BATCH_BYTES, side="right")) - 1
        stop = max(start + 1, min(fit, start + BATCH_ROWS, rows))
        yield start, stop
        start = stop


def split(block: bytes | memoryview, bounds: np.ndarray, columns: Sequence[Column]) -> list[pa.Array]:
    """The columns of the rows ``block[bounds[i]:bounds[i + 1]]``, one Arrow array each; a :class:`RowError`
    naming the first wrong row."""
    rows = len(bounds) - 1
    starts, lengths = bounds[:-1], np.diff(bounds)
    head = 4 * sum(column.sized for column in columns)
    short = np.flatnonzero(lengths < head)
    if short.size:
        row = int(short[0])
        raise RowError(row, f"it has {lengths[row]} bytes, less than its header of field sizes ({head})")
    data = np.frombuffer(block, np.uint8)
    words = data[starts[:, None] + np.arange(head)].view(_UINT32) if head else np.empty((rows, 0), _UINT32)
    sizes = np.empty((rows, len(columns)), np.int64)
    word = 0
    for at, column in enumerate(columns):
        if column.sized:
            sizes[:, at] = words[:, word]
            word += 1
            if column.width is not None and (sizes[:, at] != column.width).any():
                row = int(np.flatnonzero(sizes[:, at] != column.width)[0])
                raise RowError(row, f"field {column.field.name!r} has {sizes[row, at]} bytes, not {column.width}")
        elif column.width is not None:
            sizes[:, at] = column.width
        else:
            raise ValueError(f"field {column.field.name!r} has no fixed size and no size in its rows' header")
    total = head + sizes.sum(axis=1)
    wrong = np.flatnonzero(total != lengths)
    if wrong.size:
        row = int(wrong[0])
        raise RowError(row, f"its fields take {total[row]} bytes, its offsets give it {lengths[row]}")
    places = starts[:, None] + head + np.cumsum(sizes, axis=1) - sizes
    return [_array(data, block, places[:, at], sizes[:, at], column) for at, column in enumerate(columns)]


def _array(
    data: np.ndarray, block: bytes | memoryview, places: np.ndarray, sizes: np.ndarray, column: Column
) -> pa.Array:
    """One column's values from the bytes of its rows at ``places``, ``sizes`` long."""
    kind = column.field.type
    if pa.types.is_boolean(kind):
        return pa.array(data[places] != 0, pa.bool_())
    if column.width is not None and (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        letter = "f" if pa.types.is_floating(kind) else "i" if pa.types.is_signed_integer(kind) else "u"
        dtype = np.dtype(f"<{letter}{kind.bit_width // 8}")
        values = data[places[:, None] + np.arange(column.width)].view(dtype).reshape(len(places))
        return pa.array(values, kind)
    view = memoryview(block)
    joined = b"".join([view[place : place + size] for place, size in zip(places.tolist(), sizes.tolist(), strict=True)])
    ends = np.concatenate(([0], np.cumsum(sizes)))
    if ends[-1] >= 1 << 31:
        raise RowError(0, f"field {column.field.name!r} holds {ends[-1]} bytes in one batch, more than Arrow's 2 GiB")
    raw = pa.Array.from_buffers(
        pa.binary(), len(places), [None, pa.py_buffer(ends.astype(np.int32)), pa.py_buffer(joined)]
    )
    if pa.types.is_binary(kind):
        return raw
    try:
        text = raw.cast(pa.string())
        return text if pa.types.is_string(kind) else text.cast(kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        row = _first_unreadable(raw, kind)
        raise RowError(row, f"field {column.field.name!r} is not {kind}: {error}") from error


def _first_unreadable(raw: pa.Array, kind: pa.DataType) -> int:
    """The first row of ``raw`` (bytes) that does not cast to ``kind`` through UTF-8 text."""
    for row in range(len(raw)):
        try:
            text = raw.slice(row, 1).cast(pa.string())
            if not pa.types.is_string(kind):
                text.cast(kind)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return row
    return 0
