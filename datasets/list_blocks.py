"""Where each block of a normalised list's lines starts, and the block's xxh3-64: a row is found, and its bytes
checked, by reading its block alone, however long the list.

A version's list is cut into blocks of :data:`LINES_PER_BLOCK` lines as the upload writes it; the manifest records
each block's first byte and checksum (:class:`ListBlocks`, about 30 bytes of JSON per block: 3 MB for 10^8 rows).
A reader of a text version then reads row ``i`` with one ranged read of ``i``'s block, and a pass span by span, rather
than the whole list first (10^8 rows of text are gigabytes).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

import xxhash

from datamount.storage import IntegrityError

#: Lines in each block (the last block may hold fewer): a reader's default span of an unpacked version.
LINES_PER_BLOCK = 1024


@dataclass(frozen=True)
class ListBlocks:
    """The blocks of a list of ``rows`` lines: block ``b`` holds lines ``b * lines`` to ``(b + 1) * lines - 1`` and
    starts at byte ``offsets[b]``; ``xxh3[b]`` is the xxh3-64 of its bytes."""

    lines: int
    offsets: list[int] = field(default_factory=list)
    xxh3: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.lines < 1 or len(self.offsets) != len(self.xxh3):
            raise ValueError(f"list blocks of {self.lines} lines, {len(self.offsets)} offsets, {len(self.xxh3)} xxh3")

    def __len__(self) -> int:
        return len(self.offsets)

    def covering(self, start: int, stop: int) -> range:
        """The blocks that hold rows ``start`` to ``stop - 1``."""
        if stop <= start:
            return range(0)
        return range(start // self.lines, (stop - 1) // self.lines + 1)

    def holding(self, start: int, end: int) -> range:
        """The blocks that hold bytes ``start`` to ``end - 1``."""
        if end <= start:
            return range(0)
        return range(bisect.bisect_right(self.offsets, start) - 1, bisect.bisect_left(self.offsets, end))

    def byte_range(self, block: int, list_size: int) -> tuple[int, int]:
        """Bytes ``[start, end)`` of ``block`` in a list of ``list_size`` bytes."""
        end = self.offsets[block + 1] if block + 1 < len(self.offsets) else list_size
        return self.offsets[block], end

    def check(self, block: int, data: bytes | memoryview, where: str) -> None:
        """Check ``data``, block ``block`` of the list at ``where``, against the block's xxh3-64: an
        :class:`IntegrityError` names the list and the block's rows."""
        if xxhash.xxh3_64_hexdigest(data) != self.xxh3[block]:
            first = block * self.lines
            raise IntegrityError(
                f"{where}: rows {first} to {first + self.lines - 1} (bytes {self.offsets[block]:,} on) do not match "
                "their xxh3-64: the store holds a damaged copy of the list"
            )

    def check_whole(self, raw: bytes, where: str) -> None:
        """Check the whole list ``raw`` (read from ``where``) block by block: an :class:`IntegrityError` names the
        first damaged block's rows."""
        view = memoryview(raw)
        for block in range(len(self)):
            start, end = self.byte_range(block, len(raw))
            self.check(block, view[start:end], where)


class ListBlocksWriter:
    """Cuts lines, given in order as they are written, into blocks of ``lines`` lines and records each block's first
    byte and xxh3-64; :meth:`finish` gives the :class:`ListBlocks`."""

    def __init__(self, lines: int = LINES_PER_BLOCK) -> None:
        self._lines = lines
        self._offsets: list[int] = []
        self._xxh3: list[str] = []
        self._hasher = xxhash.xxh3_64()
        self._in_block = 0
        self._position = 0

    def add(self, lines: Sequence[bytes]) -> list[bytes]:
        """Record ``lines`` (each ending with its newline); returns them joined, in a few pieces, to be written."""
        pieces, index = [], 0
        while index < len(lines):
            taken = min(self._lines - self._in_block, len(lines) - index)
            piece = b"".join(lines[index : index + taken])
            if not self._in_block:
                self._offsets.append(self._position)
                self._hasher.reset()
            self._hasher.update(piece)
            self._position += len(piece)
            self._in_block += taken
            index += taken
            if self._in_block == self._lines:
                self._xxh3.append(self._hasher.hexdigest())
                self._in_block = 0
            pieces.append(piece)
        return pieces

    def finish(self) -> ListBlocks:
        if self._in_block:
            self._xxh3.append(self._hasher.hexdigest())
            self._in_block = 0
        return ListBlocks(self._lines, list(self._offsets), list(self._xxh3))


def blocks_of(raw: bytes, lines: int = LINES_PER_BLOCK) -> ListBlocks:
    """The blocks of the whole normalised list ``raw`` (what :class:`ListBlocksWriter` records as it is written)."""
    writer = ListBlocksWriter(lines)
    writer.add(raw.splitlines(keepends=True))
    return writer.finish()
