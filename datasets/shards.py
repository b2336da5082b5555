"""Reading a packed dataset version: its Parquet shards in order, or one row by its index."""

from __future__ import annotations

import bisect
import hashlib
import io
import itertools
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from datamount.datasets import catalog
from datamount.datasets.arrow_values import column_decoder
from datamount.datasets.manifest import Manifest, ShardEntry
from datamount.storage import IntegrityError, Store
from datamount.storage.cache import ContentCache

#: Ranged GETs a remote shard is fetched with, and how large each is; a shard of up to two chunks is one GET.
FETCH_CHUNK = 16 << 20
FETCH_REQUESTS = 8


class ShardSource:
    """The samples of a packed version, shard after shard, the next shard fetched while this one is read.

    Local stores memory-map their shards. Remote shards are fetched whole with parallel ranged GETs and checked
    against their sha256, into memory or, with a :class:`ContentCache`, into the local cache (so that the next
    epoch reads locally). At most two shards are held at once: the one being read and the next.
    """

    def __init__(self, store: Store, manifest: Manifest, *, cache: ContentCache | None = None) -> None:
        self.store = store
        self.manifest = manifest
        self.cache = cache
        self._folder = catalog.dataset_folder(manifest.name)
        self._columns = list(manifest.columns)
        self._starts = list(itertools.accumulate((s.rows for s in manifest.shards), initial=0))
        self._footers: dict[str, pq.FileMetaData] = {}

    def samples(self) -> Iterator[tuple[Any, ...]]:
        """Every row, in order, as a tuple in the list's column order."""
        shards = self.manifest.shards
        if not shards:
            return
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="datamount-shard") as prefetcher:
            upcoming: Future[pa.NativeFile] = prefetcher.submit(self._open, shards[0])
            try:
                for position in range(len(shards)):
                    current = upcoming.result()
                    if position + 1 < len(shards):
                        upcoming = prefetcher.submit(self._open, shards[position + 1])
                    yield from self._rows_of(current)
            finally:
                upcoming.cancel()

    def _rows_of(self, source: pa.NativeFile) -> Iterator[tuple[Any, ...]]:
        parquet = pq.ParquetFile(source)
        groups = parquet.num_row_groups
        if groups == 0:
            return
        # Arrow decodes without holding the GIL: decode the next row group while this one becomes Python objects.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="datamount-decode") as decoder:
            upcoming = decoder.submit(parquet.read_row_group, 0, columns=self._columns)
            try:
                for group in range(groups):
                    table = upcoming.result()
                    if group + 1 < groups:
                        upcoming = decoder.submit(parquet.read_row_group, group + 1, columns=self._columns)
                    yield from _decoded_rows(table)
            finally:
                upcoming.cancel()

    def _open(self, shard: ShardEntry) -> pa.NativeFile:
        path = f"{self._folder}/{shard.path}"
        local = self.store.local_path(path)
        if local is not None:
            return pa.memory_map(local)
        if self.cache is not None:
            local = self.cache.get(shard.sha256, shard.size, lambda out: self._download(path, shard, out), name=path)
            return pa.memory_map(str(local))
        chunks = list(self._fetch(path, shard))
        # One GET's bytes go to Arrow as they are; only a shard fetched in pieces is joined (one copy).
        return pa.BufferReader(chunks[0] if len(chunks) == 1 else b"".join(chunks))

    def _download(self, path: str, shard: ShardEntry, out: BinaryIO) -> None:
        for chunk in self._fetch(path, shard):
            out.write(chunk)

    def _fetch(self, path: str, shard: ShardEntry) -> Iterator[bytes]:
        """The shard's bytes in order, checked against its sha256 once all have come (raising IntegrityError)."""
        digest = hashlib.sha256()
        # Parallel ranged GETs pay off for large shards; a small one is a single GET (some servers copy the whole
        # object for every ranged request).
        size = FETCH_CHUNK if shard.size > 2 * FETCH_CHUNK else max(shard.size, 1)
        ranges = [(start, min(start + size, shard.size)) for start in range(0, shard.size, size)]
        pieces = list(self.store.read_ranges(path, ranges, max_requests=FETCH_REQUESTS))
        for piece in pieces:
            digest.update(piece)
        if digest.hexdigest() != shard.sha256:
            raise IntegrityError(
                f"shard {self.store.url_for(path)} does not match the sha256 in {self.manifest.ref}'s manifest"
            )
        yield from pieces

    def row_groups(self) -> list[range]:
        """The row range of every row group of the version, in order: the natural units of a sharded read."""
        ranges = []
        for shard_start, shard in zip(self._starts, self.manifest.shards, strict=False):
            for start, stop in itertools.pairwise(itertools.accumulate(shard.row_groups, initial=shard_start)):
                ranges.append(range(start, stop))
        return ranges

    def rows(self, start: int, stop: int) -> Iterator[tuple[Any, ...]]:
        """Rows ``start`` to ``stop - 1`` in order, reading only the row groups that hold them."""
        start, stop = max(start, 0), min(stop, self.manifest.rows)
        while start < stop:
            number = bisect.bisect_right(self._starts, start) - 1
            shard = self.manifest.shards[number]
            group_starts = list(itertools.accumulate(shard.row_groups, initial=self._starts[number]))
            group = bisect.bisect_right(group_starts, start) - 1
            end = min(stop, group_starts[group + 1])
            table = self._read_group(shard, group)
            yield from _decoded_rows(table.slice(start - group_starts[group], end - start))
            start = end

    def row(self, index: int) -> tuple[Any, ...]:
        """Row ``index`` of the version, reading only the footer and the one row group that holds it."""
        if not 0 <= index < self.manifest.rows:
            raise IndexError(f"row {index} is out of range: {self.manifest.ref} has {self.manifest.rows} rows")
        number = bisect.bisect_right(self._starts, index) - 1
        shard = self.manifest.shards[number]
        offset = index - self._starts[number]
        starts = list(itertools.accumulate(shard.row_groups, initial=0))
        group = bisect.bisect_right(starts, offset) - 1
        table = self._read_group(shard, group)
        return next(_decoded_rows(table.slice(offset - starts[group], 1)))

    def _read_group(self, shard: ShardEntry, group: int) -> pa.Table:
        """Row group ``group`` of ``shard``: from the file on a local store or in the cache (a remote shard is then
        fetched whole, once, and checked against its sha256), else with one ranged read."""
        path = f"{self._folder}/{shard.path}"
        if self.store.local_path(path) is not None or self.cache is not None:
            return pq.ParquetFile(self._open(shard)).read_row_group(group, columns=self._columns)
        footer = self._footer(path, shard)
        start, end = _group_range(footer, group)
        sparse = _SparseFile(
            shard.size, {start: self.store.read_range(path, start, end)}, name=self.store.url_for(path)
        )
        return pq.ParquetFile(sparse, metadata=footer).read_row_group(group, columns=self._columns)

    def _footer(self, path: str, shard: ShardEntry) -> pq.FileMetaData:
        """A shard's Parquet footer: two ranged reads the first time, then kept."""
        if path not in self._footers:
            tail = self.store.read_range(path, shard.size - 8, shard.size)
            length = int.from_bytes(tail[:4], "little")
            if tail[4:] != b"PAR1" or length + 12 > shard.size:
                raise IntegrityError(f"{self.store.url_for(path)} is not a Parquet file (its last bytes are wrong)")
            raw = self.store.read_range(path, shard.size - 8 - length, shard.size)
            self._footers[path] = pq.read_metadata(pa.BufferReader(raw))
        return self._footers[path]


def _decoded_rows(table: pa.Table) -> Iterator[tuple[Any, ...]]:
    """A table's rows as tuples: numpy arrays for tensor columns, Python values for the others."""
    decoders = [column_decoder(field, writable=False) for field in table.schema]
    for batch in table.to_batches():
        columns = [decode(batch.column(index)) for index, decode in enumerate(decoders)]
        yield from zip(*columns, strict=True)


def _group_range(footer: pq.FileMetaData, group: int) -> tuple[int, int]:
    """The byte range of row group ``group``'s column chunks."""
    meta = footer.row_group(group)
    starts, ends = [], []
    for column in range(meta.num_columns):
        chunk = meta.column(column)
        first = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        starts.append(first)
        ends.append(first + chunk.total_compressed_size)
    return min(starts), max(ends)


class _SparseFile(io.RawIOBase):
    """A read-only file of ``size`` bytes of which only some ranges are known; reading elsewhere is an error."""

    def __init__(self, size: int, pieces: dict[int, bytes], *, name: str) -> None:
        self._size = size
        self._pieces = sorted(pieces.items())
        self._position = 0
        self._name = name

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = base + offset
        return self._position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._size - self._position)
        for start, data in self._pieces:
            if start <= self._position and self._position + want <= start + len(data):
                begin = self._position - start
                view[:want] = data[begin : begin + want]
                self._position += want
                return want
        raise OSError(f"{self._name}: bytes {self._position}..{self._position + want} were not fetched")
