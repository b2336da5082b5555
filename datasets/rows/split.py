"""A split of a version: a contiguous range of its rows, read through the version's own row source."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

from datamount.datasets.errors import DatasetNotFoundError
from datamount.datasets.manifest import SPLITS_KEY, Manifest
from datamount.datasets.rows.source import Piece, Row, RowSource, clip, out_of_range


class SplitRows:
    """The rows of one split of ``source``'s version, numbered from 0 (a split is a contiguous range of rows)."""

    def __init__(self, source: RowSource, split: str) -> None:
        self.source = source
        self.store = source.store
        self.split = split
        self.layout = source.layout
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
