"""A split of a version, read through the version's own row source: a contiguous range of its rows (the public
datasets, written split after split), or the rows a seeded hash puts in it (``upload --split train=0.9,val=0.1``).

Row splits are decided row by row: row ``i`` (0-based, in list order) has the key ``u = (z >> 11) / 2**53`` where
``z`` is the ``(i + 1)``-th output of SplitMix64 started from the split seed; it is in the split whose
``[low, high)`` share of ``[0, 1)`` (the fractions, in the order given) holds ``u``. Any language can compute it;
nothing but the seed and the fractions is stored.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np

from datamount.datasets.errors import DatasetNotFoundError
from datamount.datasets.manifest import SPLITS_KEY, Manifest
from datamount.datasets.rows.source import Piece, Row, RowSource, clip, out_of_range

if TYPE_CHECKING:
    import pyarrow as pa


def open_split(source: RowSource, split: str) -> RowSource:
    """The rows of split ``split`` of ``source``'s version, numbered from 0."""
    info = source.manifest.extra.get(SPLITS_KEY, {}).get(split)
    if info is not None and "share" in info:
        return RowSplitRows(source, split)
    return SplitRows(source, split)


class SplitRows:
    """The rows of one split of ``source``'s version, numbered from 0 (a split is a contiguous range of rows)."""

    def __init__(self, source: RowSource, split: str) -> None:
        self.source = source
        self.store = source.store
        self.split = split
        self.layout = source.layout
        self.zero_copy = source.zero_copy
        start, stop, self.manifest = split_bounds(source.manifest, split)
        self.start, self.stop = clip(start, stop, len(source))

    def __len__(self) -> int:
        return self.stop - self.start

    def spans(self) -> list[range]:
        return [
            range(max(span.start, self.start) - self.start, min(span.stop, self.stop) - self.start)
            for span in self.source.spans()
            if span.start < self.stop and span.stop > self.start
        ]

    def rows(self, start: int, stop: int) -> Iterator[Row]:
        start, stop = clip(start, stop, len(self))
        return self.source.rows(self.start + start, self.start + stop)

    def row(self, index: int) -> Row:
        if not 0 <= index < len(self):
            raise out_of_range(index, self.manifest, len(self))
        return self.source.row(self.start + index)

    def pieces(self, pieces: Iterable[Piece]) -> Iterator[Row]:
        return self.source.pieces(_shifted(piece, self.start) for piece in pieces)

    def tables(self, pieces: Iterable[Piece]) -> Iterator[pa.Table]:
        return self.source.tables(_shifted(piece, self.start) for piece in pieces)

    def counts(self) -> dict[str, float]:
        return self.source.counts()


def _shifted(piece: Piece, offset: int) -> Piece:
    rows = piece.rows
    moved = range(rows.start + offset, rows.stop + offset) if isinstance(rows, range) else [r + offset for r in rows]
    return Piece(range(piece.span.start + offset, piece.span.stop + offset), moved)


def split_bounds(manifest: Manifest, split: str) -> tuple[int, int, Manifest]:
    """Where split ``split`` lies in ``manifest``'s rows (``start, stop``), and the manifest narrowed to it (its
    shards and rows)."""
    splits = manifest.extra.get(SPLITS_KEY, {})
    if split not in splits:
        held = ", ".join(splits) or "none"
        raise DatasetNotFoundError(f"{manifest.ref} has no {split!r} split (it holds: {held})")
    first, stop = splits[split]["shards"]
    start = sum(shard.rows for shard in manifest.shards[:first])
    rows = int(splits[split]["rows"])
    return start, start + rows, dataclasses.replace(manifest, shards=manifest.shards[first:stop], rows=rows)


# ------------------------------------------------------------------------------------------------ row splits

#: A split's name: what a file or a column could be called.
SPLIT_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def split_keys(seed: int, rows: int) -> np.ndarray:
    """Each row's key in ``[0, 1)``: SplitMix64's ``(i + 1)``-th output from ``seed``, top 53 bits."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed % 2**64) + (np.arange(1, rows + 1, dtype=np.uint64) * _GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return (z >> np.uint64(11)).astype(np.float64) / float(2**53)


def row_splits(fractions: Mapping[str, float], seed: int, rows: int) -> dict[str, dict[str, object]]:
    """What the manifest records of splits ``fractions`` (``{name: fraction}``, adding up to 1) of ``rows`` rows:
    ``{name: {"rows", "share": [low, high], "seed"}}``."""
    if not fractions:
        raise ValueError("give at least one split, e.g. train=0.9,val=0.1")
    for name, fraction in fractions.items():
        if not SPLIT_NAME.fullmatch(name):
            raise ValueError(f"split name {name!r}: use lowercase letters, digits, '_', '-', '.' (e.g. train, val)")
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise ValueError(f"split {name}: the fraction must be a number in (0, 1], got {fraction!r}")
    total = math.fsum(fractions.values())
    if abs(total - 1) > 1e-9:
        raise ValueError(f"the split fractions add up to {total:g}, not 1: {dict(fractions)}")
    bounds = [0.0, *np.cumsum(list(fractions.values())).tolist()]
    bounds[-1] = 1.0
    counts = np.bincount(np.searchsorted(bounds, split_keys(seed, rows), side="right") - 1, minlength=len(fractions))
    return {
        name: {"rows": int(counts[index]), "share": [bounds[index], bounds[index + 1]], "seed": int(seed)}
        for index, name in enumerate(fractions)
    }


def parse_fractions(text: str) -> dict[str, float]:
    """``"train=0.9,val=0.1"`` as ``{"train": 0.9, "val": 0.1}``."""
    fractions: dict[str, float] = {}
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        name, equals, value = part.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not equals or not 0 < number <= 1:
            raise ValueError(f"--split {text!r}: write NAME=FRACTION pairs, e.g. train=0.9,val=0.1 (got {part!r})")
        if name.strip() in fractions:
            raise ValueError(f"--split {text!r}: split {name.strip()!r} given twice")
        fractions[name.strip()] = number
    return fractions


class RowSplitRows:
    """The rows of one row split of ``source``'s version (the rows whose key falls in the split's share), numbered
    from 0 in list order."""

    def __init__(self, source: RowSource, split: str) -> None:
        splits = source.manifest.extra.get(SPLITS_KEY, {})
        if split not in splits:
            held = ", ".join(splits) or "none"
            raise DatasetNotFoundError(f"{source.manifest.ref} has no {split!r} split (it holds: {held})")
        info = splits[split]
        low, high = info["share"]
        keys = split_keys(int(info["seed"]), len(source))
        self.index = np.flatnonzero((keys >= low) & (keys < high))
        if len(self.index) != int(info["rows"]):
            raise DatasetNotFoundError(
                f"{source.manifest.ref}: split {split!r} should hold {info['rows']} rows and holds {len(self.index)}"
            )
        self.source = source
        self.store = source.store
        self.split = split
        self.layout = source.layout
        self.zero_copy = source.zero_copy
        self.manifest = dataclasses.replace(source.manifest, rows=len(self.index))
        self._numbers = self.index.tolist()
        self._source_spans = source.spans()
        self._source_starts = [span.start for span in self._source_spans]
        self._spans = []  # each source span narrowed to this split's rows, where it has any
        for span in self._source_spans:
            low, high = bisect.bisect_left(self._numbers, span.start), bisect.bisect_left(self._numbers, span.stop)
            if low < high:
                self._spans.append(range(low, high))

    def __len__(self) -> int:
        return len(self._numbers)

    def spans(self) -> list[range]:
        """The source's spans, each narrowed to this split's rows (a run of consecutive split rows)."""
        return list(self._spans)

    def rows(self, start: int, stop: int) -> Iterator[Row]:
        start, stop = clip(start, stop, len(self))
        wanted = (span for span in self.spans() if span.start < stop and span.stop > start)
        return self.pieces(Piece(span, range(max(span.start, start), min(span.stop, stop))) for span in wanted)

    def row(self, index: int) -> Row:
        if not 0 <= index < len(self):
            raise out_of_range(index, self.manifest, len(self))
        return self.source.row(self._numbers[index])

    def pieces(self, pieces: Iterable[Piece]) -> Iterator[Row]:
        return self.source.pieces(self._in_source(piece) for piece in pieces)

    def tables(self, pieces: Iterable[Piece]) -> Iterator[pa.Table]:
        return self.source.tables(self._in_source(piece) for piece in pieces)

    def counts(self) -> dict[str, float]:
        return self.source.counts()

    def _in_source(self, piece: Piece) -> Piece:
        numbers = self._numbers
        first = numbers[piece.span.start]
        span = self._source_spans[bisect.bisect_right(self._source_starts, first) - 1]
        return Piece(span, [numbers[row] for row in piece.rows])
