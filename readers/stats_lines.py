"""A line of the reader statistics file (``DATAMOUNT_STATS_FILE``, JSON lines, format 1, documented in
``docs/readers.md``): written here for the meter (:mod:`~datamount.readers.stats`), read here for the training page
(:mod:`datamount.ui.stats_file`), so that the two never disagree about what a line is.

A line holds one process's counters for one interval (the deltas since its previous line), which ends at its
``time`` and lasts ``interval_s``: the keys of :data:`LINE_KEYS`, in that order, one ``os.write`` each. A line that
is not such a record (not JSON, another format, a count missing, negative, not finite, or beyond 2**63) is refused
by :func:`parse_line` with what is wrong with it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The version of the lines (their ``"format"``).
LINE_FORMAT = 1
#: What the store, the cache and the row source count, as ``stats()`` and the lines name them.
COUNTERS = ("requests", "retries", "throttled_s", "cache_hits", "bytes_verified")
#: The counts of a line: its interval's samples, their bytes, the time waited and computing, and :data:`COUNTERS`.
LINE_COUNTERS = ("samples", "bytes", "waited_s", "compute_s", *COUNTERS)
#: The keys of a line, in their order.
LINE_KEYS = (
    "format",
    "time",
    "rank",
    "world_size",
    "worker",
    "dataset",
    "pass",
    "interval_s",
    *LINE_COUNTERS,
    "pass_s",
    "local",
    "final",
)
#: A count this little below zero is a difference of rounded times (``compute_s``), taken as zero.
ROUNDING = 1e-6
#: Every number of a line is below this in size (a 64-bit counter's range): a line beyond it is refused.
LARGEST = 2**63
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "time": (int, float),
    "rank": int,
    "world_size": int,
    "pass": int,
    "interval_s": (int, float),
    **dict.fromkeys(("samples", "bytes", "requests", "retries", "cache_hits", "bytes_verified"), int),
    **dict.fromkeys(("waited_s", "compute_s", "throttled_s"), (int, float)),
}


def encoded_line(record: Mapping[str, Any]) -> bytes:
    """``record`` (the keys of :data:`LINE_KEYS`) as the file's line: compact JSON and a newline."""
    return (json.dumps(record, separators=(",", ":")) + "\n").encode()


@dataclass(frozen=True)
class StatsLine:
    """One line of the file: ``counters`` are its interval's, by the names of the format."""

    time: float
    rank: int
    worker: int | None
    dataset: str
    pass_number: int
    interval_s: float
    final: bool
    counters: dict[str, float]
    #: Its pass read only folders on the reading machine (file reads: no requests, retries nor throttling).
    local: bool = False


def parse_line(text: str) -> StatsLine:
    """One line of the file (:class:`ValueError` saying what is wrong with it)."""
    record = json.loads(text)  # NaN and Infinity are read (json.dumps writes them), then refused by name
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    if record.get("format") != LINE_FORMAT:
        raise ValueError(f"format {_shown(record.get('format'))}, not {LINE_FORMAT}")
    for key, kind in _FIELDS.items():
        if not isinstance(record.get(key), kind) or isinstance(record.get(key), bool):
            raise ValueError(f"{key!r} is missing or not a number")
        _check_range(key, record[key])
    worker = record.get("worker")
    if worker is not None and (not isinstance(worker, int) or isinstance(worker, bool)):
        raise ValueError("'worker' is neither a number nor null")
    if worker is not None:
        _check_range("worker", worker)
    local = record.get("local", False)  # lines written before it was a key: counted as reading a remote store
    if not isinstance(local, bool):
        raise ValueError("'local' is neither true nor false")
    if record["interval_s"] < 0 or any(record[key] < -ROUNDING for key in LINE_COUNTERS):
        raise ValueError("a negative count")
    return StatsLine(
        time=float(record["time"]),
        rank=record["rank"],
        worker=worker,
        dataset=str(record.get("dataset", "")),
        pass_number=record["pass"],
        interval_s=float(record["interval_s"]),
        final=bool(record.get("final", False)),
        counters={key: max(float(record[key]), 0.0) for key in LINE_COUNTERS},
        local=local,
    )


def _check_range(key: str, value: float) -> None:
    if not -LARGEST < value < LARGEST:  # compared before any float(): 10**400 has none; NaN compares false
        raise ValueError(f"{key!r} is {_shown(value)}: not a finite number within ±2**63")


def _shown(value: Any) -> str:
    """``value`` as a message names it: at most 24 characters (a number of 400 digits is named by its length)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**24:
        return f"a number of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= 24 else text[:23] + "…"
