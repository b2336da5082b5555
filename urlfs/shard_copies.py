"""Shards read by ranges, each block copied once into the reader's own memory and checked there, then served from it.

A Parquet reader asks for many ranges of a shard (its footer twice, then its column chunks), several of them in one
block. Each block is read once per filesystem (straight from the file on a local store), checked against its
xxh3-64, marked in the shard's map of checked blocks, and never written again: every range is a slice of checked
memory, handed out without a copy (a ``memoryview``). The copy is private (an anonymous mapping, its pages made as
they are filled): a byte changed in the store after its block was checked never reaches a reader, and the memory
of a shard is the bytes read from it. The most recently used shards are kept, up to :data:`KEPT_BYTES`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import pyarrow as pa

from datamount.datasets.tree import Content
from datamount.datasets.tree_bytes import TreeBytes

#: Bytes of shards whose copies a version keeps (the most recently used; at least the one being read).
KEPT_BYTES = 512 << 20


class ShardCopy:
    """One shard's checked blocks, filled as ranges of them are asked for."""

    def __init__(self, content: Content, source: TreeBytes) -> None:
        shard = content.shard
        assert shard is not None and shard.blocks
        self.content = content
        self.source = source
        self.size = shard.size
        self.block_bytes = shard.block_bytes
        self._memory = memoryview(pa.allocate_buffer(max(1, shard.size))).cast("B")
        self._checked = bytearray(len(shard.blocks))
        self._lock = threading.Lock()

    def span(self, start: int, end: int, name: str) -> memoryview:
        """Bytes ``start`` to ``end - 1`` (within the shard), every block under them checked: the blocks not yet
        read are fetched (each run of them in one read) and checked first; ``name`` names the file in errors."""
        if start >= end:
            return self._memory[0:0]
        first, stop = start // self.block_bytes, -(-end // self.block_bytes)
        with self._lock:
            index = first
            while index < stop:
                if self._checked[index]:
                    index += 1
                    continue
                run = index + 1
                while run < stop and not self._checked[run]:
                    run += 1
                low, high = index * self.block_bytes, min(run * self.block_bytes, self.size)
                self.source.fill_blocks(self.content, index, run, self._memory[low:high], name=name)
                self._checked[index:run] = b"\1" * (run - index)
                index = run
        return self._memory[start:end]


class ShardCopies:
    """The copies of the shards of one version that a filesystem read, the most recently used first to stay."""

    def __init__(self, source: TreeBytes) -> None:
        self.source = source
        self._copies: OrderedDict[str, ShardCopy] = OrderedDict()
        self._lock = threading.Lock()

    def span(self, content: Content, start: int, end: int, name: str) -> memoryview:
        """Bytes ``start`` to ``end - 1`` of the shard ``content``, checked (see :meth:`ShardCopy.span`)."""
        shard = content.shard
        assert shard is not None
        with self._lock:
            copy = self._copies.get(shard.sha256)
            if copy is None:
                copy = self._copies[shard.sha256] = ShardCopy(content, self.source)
                kept = sum(each.size for each in self._copies.values())
                while kept > KEPT_BYTES and len(self._copies) > 1:
                    kept -= self._copies.popitem(last=False)[1].size
            self._copies.move_to_end(shard.sha256)
        return copy.span(min(start, shard.size), min(end, shard.size), name)
