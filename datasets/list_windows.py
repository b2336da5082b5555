"""A stored list read a window at a time and cut into whole lines and values by offsets: no Python object per line.

The rule: a window's lines are cut where numpy finds their line breaks and tabs; Arrow sees the window, without a
copy, as strings that alternate between the values wanted and what lies between them (each start and stop an offset,
in order), and takes the values into one array, checked as UTF-8. No kernel that grows its output runs per window
(Arrow's split kernels left a hundred megabytes of freed blocks behind at a million rows). Used by the commit's
index of a list's paths (:func:`datamount.datasets.file_parts_writer.list_pairs`) and by ``diff``
(:mod:`datamount.datasets.diff`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

from datamount.storage import Store

#: Bytes of a list read at once.
LIST_READ_BYTES = 1 << 20
#: Windows read ahead of the one being cut.
_IN_FLIGHT = 2


def read_windows(store: Store, path: str, size: int) -> Iterator[bytes]:
    """The object at ``path`` (``size`` bytes; 0 or less: not known, read whole), :data:`LIST_READ_BYTES` at a time."""
    if size <= 0:
        yield store.read(path)
        return
    ranges = [(start, min(start + LIST_READ_BYTES, size)) for start in range(0, size, LIST_READ_BYTES)]
    yield from store.read_ranges(path, ranges, max_requests=_IN_FLIGHT)


def whole_lines(windows: Iterable[bytes]) -> Iterator[memoryview]:
    """The bytes of ``windows`` in pieces of whole lines, each ending with its line break (a line cut by a window's
    end is carried into the next piece); bytes after the last line break come last, as they are (a piece that does
    not end with ``\\n``)."""
    carried = b""
    for window in windows:
        whole = carried + window
        cut = whole.rfind(b"\n") + 1
        carried = whole[cut:]
        if cut:
            yield memoryview(whole)[:cut]
    if carried:
        yield memoryview(carried)


def strings_at(lines: bytes | memoryview, starts: np.ndarray, stops: np.ndarray) -> pa.Array:
    """The strings at ``[starts[i], stops[i])`` of ``lines`` (offsets in order, each range after the one before it),
    as one string array; bytes that are not UTF-8 are a :class:`pyarrow.ArrowInvalid`."""
    bounds = np.empty(2 * len(starts) + 1, np.int64)
    bounds[0:-1:2], bounds[1:-1:2], bounds[-1] = starts, stops, len(lines)
    pieces = pa.LargeStringArray.from_buffers(len(bounds) - 1, pa.py_buffer(bounds), pa.py_buffer(lines))
    values = pieces.take(pa.array(np.arange(0, len(bounds) - 1, 2))).cast(pa.string())
    values.validate(full=True)
    return values
