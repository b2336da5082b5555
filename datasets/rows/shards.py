"""Rows of a packed version, from its Parquet shards: whole shards for passes, row groups for everything else."""

from __future__ import annotations

import bisect
import contextlib
import functools
import hashlib
import io
import itertools
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from datamount.datasets import layout
from datamount.datasets.arrow_codec import batch_rows, column_decoder
from datamount.datasets.errors import MissingPartError
from datamount.datasets.manifest import Manifest, ShardEntry
from datamount.datasets.rows.chain import ClosingChain, close_iterator
from datamount.datasets.rows.missing import missing_shard
from datamount.datasets.rows.source import Piece, Row, clip, out_of_range, selected_columns
from datamount.datasets.shard_checks import chunk_ranges, digest, file_bytes, footer_bytes, group_bytes, group_range
from datamount.storage import DatamountError, IntegrityError, ObjectNotFoundError, Store
from datamount.storage.cache import ContentCache
from datamount.storage.counters import Tally, added
from datamount.storage.pools import generator_pool

#: Ranged GETs a remote shard is fetched with, and how large each is; a shard of up to two chunks is one GET.
FETCH_CHUNK = 16 << 20
FETCH_REQUESTS = 8
#: Pieces (row groups) read ahead of the one being taken: on local disk enough to decode one while another becomes
#: Python objects; on remote stores enough to hide each ranged GET's latency (with 20 ms added to each request, 6
#: kept 0.65 of the rate without, 8 kept 0.78: bench_latency.py).
PIECES_AHEAD_LOCAL = 2
PIECES_AHEAD_REMOTE = 8
#: Row groups decoded at once in a pass: a row group is in memory twice while it is decoded (fetched bytes, Arrow's
#: arrays), once before and after, and becomes Python values only as it is handed out; this bounds a remote pass's
#: memory to about ``PIECES_AHEAD_REMOTE`` + ``DECODING_AT_ONCE`` + 1 row groups.
DECODING_AT_ONCE = 2
#: Row groups of a whole local or cached shard decoded at once, ahead of the one being handed out: checking the
#: pages' CRCs is most of a large sample's cost, and a second thread on a second core nearly halves a pass over
#: 110 KB samples (0.17 -> 0.10 s for 440 MB here).
WHOLE_SHARD_DECODERS = max(1, min(2, os.cpu_count() or 1))
#: Bytes read from a remote shard's end to find its footer: the footer of a shard of thousands of rows fits, and is
#: then one ranged read rather than two in turn (the footer's length, then the footer).
FOOTER_GUESS = 64 << 10
#: A remote shard's first row group is asked for together with its footer (it starts after the 4-byte magic): the
#: bytes its share of the shard's rows suggests, this much more and ``FOOTER_GUESS`` bytes more (the rest is fetched
#: when that falls short).
FIRST_GROUP_MARGIN = 1.1
_MAGIC_BYTES = 4
#: Rows in each batch of a whole shard's first row group, handed out as Arrow decodes them.
FIRST_GROUP_BATCH_ROWS = 4096
#: No bound on decoding (a single read, not a pass).
_UNBOUNDED: AbstractContextManager[Any] = contextlib.nullcontext()


class ShardRows:
    """The rows of a packed version.

    A pass over whole shards (:meth:`rows` of a range that covers them) reads shard after shard, the next one opened
    while this one is read: local shards are memory-mapped; with a :class:`ContentCache`, remote shards are fetched
    whole with parallel ranged GETs, checked against their sha256 and kept in the local cache (so that the next
    epoch reads locally). Without a cache a remote pass streams row groups, as do parts of shards (random access,
    the pieces of a shuffled or sharded pass, the ends of a range): from the local or cached file, else each group
    with one ranged read, several in flight.

    With ``verify`` (the default) every row group's bytes, and a shard's footer before its offsets are used, are
    checked against the xxh3-64 its manifest entry records, before they are decoded (a shard packed before they were
    recorded: its pages' CRCs, as they are decoded); without, only the sizes and row counts are. A shard fetched whole
    is checked against its sha256 either way.

    Each row holds the version's columns; ``columns`` names others of the shards' to add after them (``path``: an
    image's place in its source). With ``select``, each row holds only those of the version's columns, in that
    order, and only their column chunks are read (a remote row group: fetched): a row group's xxh3-64 covers all its
    columns, so with ``verify`` the chunks read are checked by their pages' CRC-32 as they are decoded (every shard
    carries them for readers that read part of it), the footer still by its xxh3-64 (see :func:`selected_columns`).
    """

    def __init__(
        self,
        store: Store,
        manifest: Manifest,
        *,
        cache: ContentCache | None = None,
        zero_copy: bool = False,
        columns: Sequence[str] = (),
        select: Sequence[str] | None = None,
        verify: bool = True,
    ) -> None:
        self.store = store
        self.manifest = manifest
        self.verify = verify
        #: Binary values are read-only memoryviews into the decoded row group rather than new ``bytes``.
        self.zero_copy = zero_copy
        self.split = ""
        self.layout = "row-groups"
        self.cache = cache
        chosen = selected_columns(manifest, select)
        #: Only some of the version's columns are read: their chunks, checked by their pages' CRCs.
        self.partial = chosen != manifest.columns
        self._columns = [*chosen, *columns]
        self._starts = list(itertools.accumulate((s.rows for s in manifest.shards), initial=0))
        self._footers: dict[str, pq.FileMetaData] = {}
        self._heads: dict[str, memoryview] = {}  # a shard's bytes from its magic on, fetched with its footer
        self._footer_lock = threading.Lock()
        self._footer_locks: dict[str, threading.Lock] = {}
        self._spans: list[range] | None = None
        #: ``bytes_verified``: the row groups checked against their xxh3-64 (or their pages' CRCs, as they were
        #: decoded), and the shards fetched whole and checked against their sha256.
        self.tally = Tally()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_footer_lock"], state["_footer_locks"]  # locks do not travel to worker processes
        state["_heads"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._footer_lock = threading.Lock()
        self._footer_locks = {}

    def __len__(self) -> int:
        return self._starts[-1]

    def counts(self) -> dict[str, float]:
        cache = self.cache.tally.snapshot() if self.cache is not None else {}
        cache.pop("cache_misses", None)  # a miss is a fetch, counted by the store as requests
        return added([self.tally.snapshot(), cache])

    def spans(self) -> list[range]:
        """The row range of every row group, in order."""
        if self._spans is None:
            self._spans = [
                range(start, stop)
                for shard_start, shard in zip(self._starts, self.manifest.shards, strict=False)
                for start, stop in itertools.pairwise(itertools.accumulate(shard.row_groups, initial=shard_start))
            ]
        return self._spans

    def rows(self, start: int, stop: int) -> Iterator[Row]:
        """Rows ``start`` to ``stop - 1`` in order. Shards on this machine (or in the cache) are read whole; remote
        ones are streamed row group by row group, several ranged reads in flight, so that the first rows come as
        soon as their row group has and memory holds a few row groups, never whole shards."""
        start, stop = clip(start, stop, len(self))
        if self.store.local_path() is None and self.cache is None:
            spans = self.spans()
            first = bisect.bisect_right([span.start for span in spans], start) - 1
            wanted = itertools.takewhile(lambda span: span.start < stop, spans[max(first, 0) :])
            return self.pieces(Piece(span, range(max(start, span.start), min(stop, span.stop))) for span in wanted)
        return self._segment_rows(list(self._segments(start, stop)))

    def row(self, index: int) -> Row:
        """Row ``index``, reading only the footer and the one row group that holds it."""
        if not 0 <= index < len(self):
            raise out_of_range(index, self.manifest, len(self))
        return next(self._group_rows(index, index + 1))

    def pieces(self, pieces: Iterable[Piece]) -> ClosingChain[Row]:
        """The rows of each piece, handed out by C code; the next pieces' row groups are read and decoded into Arrow
        tables in threads (without the GIL) while this one becomes Python values, only as it is handed out: memory
        holds Arrow tables ahead, and Python values of one piece at a time."""
        return ClosingChain.of(self._piece_blocks(iter(pieces)))

    def tables(self, pieces: Iterable[Piece]) -> Iterator[pa.Table]:
        """The rows of each piece as an Arrow table, read ahead and checked as :meth:`pieces` reads them."""
        return self._piece_tables(iter(pieces))

    def _piece_blocks(self, pending: Iterator[Piece]) -> Iterator[Iterator[Row]]:
        tables = self._piece_tables(pending)
        try:
            for table in tables:
                yield decoded_rows(table, views=self.zero_copy)
        finally:
            close_iterator(tables)

    def _piece_tables(self, pending: Iterator[Piece]) -> Iterator[pa.Table]:
        ahead = PIECES_AHEAD_LOCAL if self.store.local_path() is not None else PIECES_AHEAD_REMOTE
        decoding = threading.BoundedSemaphore(DECODING_AT_ONCE)
        # Started at once: the following pieces are submitted between the first piece's arrival and its first row.
        with generator_pool(ahead, "datamount-span", started=True) as readers:  # what is queued is cancelled on exit
            # The first piece is read alone (its GET has the whole bandwidth, not a share of the window's), then
            # ``ahead`` are kept in flight: the first rows come after one row group's GET, not after ``ahead``.
            upcoming = deque(
                readers.submit(self._piece_table, piece, decoding) for piece in itertools.islice(pending, 1)
            )
            while upcoming:
                current = upcoming.popleft().result()
                for following in itertools.islice(pending, ahead - len(upcoming)):
                    upcoming.append(readers.submit(self._piece_table, following, decoding))
                yield current

    # ---------------------------------------------------------------------------------------------- whole shards

    def _segments(self, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
        """``(shard number, first row, stop row)`` of each shard's part of ``[start, stop)``, in shard rows."""
        number = bisect.bisect_right(self._starts, start) - 1
        while start < stop:
            shard_start = self._starts[number]
            end = min(stop, self._starts[number + 1])
            yield number, start - shard_start, end - shard_start
            start, number = end, number + 1

    def _segment_rows(self, segments: list[tuple[int, int, int]]) -> ClosingChain[Row]:
        """The rows of each segment, handed out by C code (no Python frame per row)."""
        return ClosingChain.of(self._segment_blocks(segments))

    def _segment_blocks(self, segments: list[tuple[int, int, int]]) -> Iterator[Iterator[Row]]:
        """The rows of each segment, a segment at a time; whole shards are opened one ahead, in a thread, while the
        current one is read. Each segment's rows (and its shard) are closed once read or when the pass is closed."""
        shards = self.manifest.shards
        whole = [low == 0 and high == shards[number].rows for number, low, high in segments]
        with generator_pool(1, "datamount-shard") as prefetcher:
            opened: dict[int, Future[_OpenShard]] = {}
            try:
                for position, (number, low, high) in enumerate(segments):
                    current = None
                    if whole[position]:
                        current = opened.pop(position, None) or prefetcher.submit(self._open, shards[number])
                    following = next((p for p in range(position + 1, len(segments)) if whole[p]), None)
                    if following is not None and following not in opened:
                        opened[following] = prefetcher.submit(self._open, shards[segments[following][0]])
                    with contextlib.ExitStack() as held:
                        if current is None:
                            rows = self._group_rows(self._starts[number] + low, self._starts[number] + high)
                        else:
                            rows = self._rows_of(shards[number], held.enter_context(current.result()))
                        held.callback(close_iterator, rows)
                        yield rows
            finally:
                for future in opened.values():
                    if not future.cancel() and future.exception() is None:
                        future.result().close()  # opened ahead, never read: let the cached shard go

    def _rows_of(self, shard: ShardEntry, opened: _OpenShard) -> ClosingChain[Row]:
        return ClosingChain.of(self._row_blocks(shard, opened))

    def _row_blocks(self, shard: ShardEntry, opened: _OpenShard) -> Iterator[Iterator[Row]]:
        """The rows of a whole shard, a row group at a time (each checked first, unless the whole shard was)."""
        source = opened.source
        parquet = self._parquet(shard, source, checked=opened.checked)
        groups = parquet.num_row_groups
        if groups == 0:
            return
        # Arrow decodes (and checks each page's CRC) without holding the GIL: the next row groups are decoded in
        # threads while this one becomes Python objects, each by a Parquet reader of its own (one group at a time).
        # They start once the first batch is decoded, which they would otherwise hold up.
        ahead = min(WHOLE_SHARD_DECODERS, groups - 1)
        readers = [self._parquet(shard, source, parquet.metadata) for _ in range(ahead)]
        data = None if opened.checked or self.partial else file_bytes(source)
        with generator_pool(max(ahead, 1), "datamount-decode") as decoder:
            first_group = self._first_group_blocks(shard, parquet, data)
            first_batch = next(first_group, None)
            upcoming = deque(
                decoder.submit(self._decode, shard, readers[n % ahead], n, data) for n in range(1, ahead + 1)
            )
            if first_batch is not None:
                yield first_batch
            yield from first_group
            for group in range(1, groups):
                table = upcoming.popleft().result()
                following = group + ahead
                if following < groups:
                    upcoming.append(decoder.submit(self._decode, shard, readers[following % ahead], following, data))
                yield decoded_rows(table, views=self.zero_copy)

    def _first_group_blocks(
        self, shard: ShardEntry, parquet: pq.ParquetFile, data: pa.Buffer | None
    ) -> Iterator[Iterator[Row]]:
        """A shard's first row group, batch by batch as Arrow decodes it (here, while the next groups are decoded in
        threads): its first row does not wait for the whole group. It is checked in ``data``, the shard's bytes
        (``None``: the whole shard was checked)."""
        expected = shard.row_groups[0]
        if data is not None:
            self._check_group(shard, parquet.metadata, 0, data)
        with self._damage(shard, 0):
            _check_rows(parquet.metadata.row_group(0).num_rows, expected)
            batches = parquet.iter_batches(
                FIRST_GROUP_BATCH_ROWS, row_groups=[0], columns=self._columns, use_threads=False
            )
            rows = 0
            for batch in batches:
                rows += batch.num_rows
                yield decoded_rows(pa.Table.from_batches([batch]), views=self.zero_copy)
            _check_rows(rows, expected)
            self._count_pages_checked(shard, parquet.metadata, 0)

    def _parquet(
        self, shard: ShardEntry, source: Any, metadata: pq.FileMetaData | None = None, *, checked: bool = False
    ) -> pq.ParquetFile:
        """The Parquet reader of one shard. Without ``metadata`` its footer is read from ``source``, checked first
        against its xxh3-64 (unless the whole shard was: ``checked``); a shard whose entry has none has every page it
        reads checked against its CRC.

        It reads and decodes in the thread that asks (``pre_buffer=False`` here, ``use_threads=False`` in each
        read), never in Arrow's pools: a pool thread that drops the last reference to fetched bytes (a Python
        buffer) takes the GIL for it, and doing so while the interpreter exits (a script leaving a remote pass
        unfinished) aborts the process. Passes decode several row groups at once in threads of their own.
        """
        if metadata is None and isinstance(source, pa.NativeFile) and not checked:
            self._check(shard, len(shard.row_groups), lambda: footer_bytes(file_bytes(source)), "the footer of ")
        pages_checked = self.verify and (not shard.xxh3 or self.partial)
        with self._damage(shard):
            return pq.ParquetFile(source, metadata=metadata, pre_buffer=False, page_checksum_verification=pages_checked)

    def _decode(
        self, shard: ShardEntry, parquet: pq.ParquetFile, group: int, data: pa.Buffer | None = None
    ) -> pa.Table:
        """Row group ``group``, checked first against its xxh3-64 in ``data``, the whole shard's bytes, when given
        (else its bytes were checked as they were fetched)."""
        if data is not None:
            self._check_group(shard, parquet.metadata, group, data)
        with self._damage(shard, group):
            table = parquet.read_row_group(group, columns=self._columns, use_threads=False)
            _check_rows(table.num_rows, shard.row_groups[group])
        self._count_pages_checked(shard, parquet.metadata, group)
        return table

    def _check_group(self, shard: ShardEntry, footer: pq.FileMetaData, group: int, data: Any) -> None:
        """Check row group ``group``'s bytes against its xxh3-64: in ``data``, the whole shard's bytes (a
        :class:`pyarrow.Buffer`) or just that group's."""
        if isinstance(data, pa.Buffer) and data.size == shard.size:
            self._check(shard, group, lambda: group_bytes(data, footer, group), f"row group {group} of ")
        else:
            self._check(shard, group, lambda: data, f"row group {group} of ")

    def _check(self, shard: ShardEntry, position: int, data: Callable[[], Any], what: str) -> None:
        """Check the bytes ``data()`` gives against the xxh3-64 at ``position`` of ``shard``'s entry (nothing to do
        without ``verify``, or for a shard packed before they were recorded)."""
        if not (self.verify and shard.xxh3):
            return
        url = self.store.url_for(layout.shard_path(self.manifest.name, shard))
        if len(shard.xxh3) != len(shard.row_groups) + 1:
            raise IntegrityError(
                f"shard {url}'s entry in {self.manifest.ref}'s manifest is damaged: it has {len(shard.xxh3)} "
                f"checksums for {len(shard.row_groups)} row groups and a footer"
            )
        with self._damage(shard, position if position < len(shard.row_groups) else None):
            checked = data()
        if digest(checked) != shard.xxh3[position]:
            raise IntegrityError(
                f"{what}shard {url} of {self.manifest.ref} is damaged: its bytes do not match the xxh3-64 in its "
                "manifest entry"
            )
        self.tally.add("bytes_verified", len(checked))

    def _count_pages_checked(self, shard: ShardEntry, footer: pq.FileMetaData, group: int) -> None:
        """Count the bytes of row group ``group`` (of its chunks read) when their pages' checksums were checked as
        they were decoded."""
        if self.verify and (not shard.xxh3 or self.partial):
            ranges = chunk_ranges(footer, group, self._columns) if self.partial else [group_range(footer, group)]
            self.tally.add("bytes_verified", sum(end - start for start, end in ranges))

    @contextlib.contextmanager
    def _damage(self, shard: ShardEntry, group: int | None = None) -> Iterator[None]:
        """Turn Arrow's failures to read a shard (a page whose CRC is wrong, a footer that does not parse) into an
        :class:`IntegrityError` naming the shard."""
        try:
            yield
        except (OSError, pa.ArrowException) as exc:
            if isinstance(exc, DatamountError):
                raise
            where = f"row group {group} of " if group is not None else ""
            url = self.store.url_for(layout.shard_path(self.manifest.name, shard))
            raise IntegrityError(
                f"{where}shard {url} of {self.manifest.ref} is damaged: {str(exc).splitlines()[0]}"
            ) from exc

    @contextlib.contextmanager
    def _missing(self, shard: ShardEntry) -> Iterator[None]:
        """A shard not found is named with the rows it holds and what puts it back."""
        try:
            yield
        except MissingPartError:
            raise
        except ObjectNotFoundError as missing:
            raise missing_shard(self.store, self.manifest, shard, missing) from missing

    def _open(self, shard: ShardEntry) -> _OpenShard:
        with self._missing(shard):
            return self._opened(shard)

    def _opened(self, shard: ShardEntry) -> _OpenShard:
        path = layout.shard_path(self.manifest.name, shard)
        local = self.store.local_path(path)
        if local is not None:
            try:
                mapped = pa.memory_map(local)
            except FileNotFoundError:
                raise ObjectNotFoundError(f"cannot read {self.store.url_for(path)}: not found") from None
            size = mapped.size()
            if size != shard.size:
                mapped.close()
                raise IntegrityError(
                    f"shard {self.store.url_for(path)} of {self.manifest.ref} has {size:,} bytes, not {shard.size:,}"
                )
            return _OpenShard(mapped)
        if self.cache is not None:
            return self._cached(path, shard)
        chunks = list(self._fetch(path, shard))
        # One GET's bytes go to Arrow as they are; only a shard fetched in pieces is joined (one copy).
        return _OpenShard(pa.BufferReader(chunks[0] if len(chunks) == 1 else b"".join(chunks)))

    def _cached(self, path: str, shard: ShardEntry) -> _OpenShard:
        """A remote shard from the cache, fetched whole into it (and checked against its sha256) when not there. A
        copy kept from before is checked whole against its row groups' and footer's xxh3-64 (then not again as it is
        read): one damaged since this process hashed it is dropped and fetched again, once, and only the store's
        copy is ever named as damaged."""
        assert self.cache is not None
        url = self.store.url_for(path)
        fill = functools.partial(self._download, path, shard)
        for _ in range(2):
            with contextlib.ExitStack() as held:
                cached, fetched = held.enter_context(self.cache.held(shard.sha256, shard.size, fill, name=url))
                source = pa.memory_map(str(cached))
                if fetched or self._intact(shard, source):
                    return _OpenShard(source, held.pop_all(), checked=True)
                source.close()
            self.cache.refetch(shard.sha256, shard.size, fill, name=url)
        raise IntegrityError(
            f"shard {url} of {self.manifest.ref}: its copy fetched into the cache was damaged as soon as it was kept "
            "there; check the cache's disk"
        )

    def _intact(self, shard: ShardEntry, source: pa.NativeFile) -> bool:
        """Whether a shard's bytes match the xxh3-64 of its footer and of each of its row groups (true for a shard
        packed before they were recorded, whose pages' CRCs are checked as they are decoded)."""
        try:
            parquet = self._parquet(shard, source)
            data = file_bytes(source)
            for group in range(parquet.num_row_groups):
                self._check_group(shard, parquet.metadata, group, data)
        except IntegrityError:
            return False
        return True

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
        self.tally.add("bytes_verified", shard.size)
        if digest.hexdigest() != shard.sha256:
            raise IntegrityError(
                f"shard {self.store.url_for(path)} does not match the sha256 in {self.manifest.ref}'s manifest"
            )
        yield from pieces

    # ------------------------------------------------------------------------------------------------ row groups

    def _piece_table(self, piece: Piece, decoding: AbstractContextManager[Any] = _UNBOUNDED) -> pa.Table:
        """A piece's rows in its order, as an Arrow table, from the one row group that holds them (decoding only the
        stretch they span)."""
        rows = piece.rows
        if isinstance(rows, range):
            return self._group_table(rows.start, rows.stop, decoding)
        low = min(rows)
        return self._group_table(low, max(rows) + 1, decoding).take([row - low for row in rows])

    def _group_rows(self, start: int, stop: int) -> Iterator[Row]:
        """Rows ``start`` to ``stop - 1`` in order, reading only the row groups that hold them."""
        while start < stop:
            end = min(stop, self._group_end(start))
            yield from decoded_rows(self._group_table(start, end), views=self.zero_copy)
            start = end

    def _group_end(self, row: int) -> int:
        """Where the row group holding ``row`` ends, in rows of the version."""
        _, group, group_starts = self._group_of(row)
        return group_starts[group + 1]

    def _group_of(self, row: int) -> tuple[ShardEntry, int, list[int]]:
        """The shard holding ``row``, the number of its row group there, and where each of the shard's row groups
        starts (and the last ends), in rows of the version."""
        number = bisect.bisect_right(self._starts, row) - 1
        shard = self.manifest.shards[number]
        group_starts = list(itertools.accumulate(shard.row_groups, initial=self._starts[number]))
        return shard, bisect.bisect_right(group_starts, row) - 1, group_starts

    def _group_table(self, start: int, stop: int, decoding: AbstractContextManager[Any] = _UNBOUNDED) -> pa.Table:
        """Rows ``start`` to ``stop - 1``, all of one row group, fetched (only that row group, for a remote shard)
        and decoded while holding ``decoding`` (which bounds how many row groups are twice over in memory at once:
        fetched bytes and Arrow arrays)."""
        shard, group, group_starts = self._group_of(start)
        if stop > group_starts[group + 1]:
            raise ValueError(f"rows {start} to {stop - 1} are not all in one row group")
        with self._group_file(shard, group) as parquet, decoding:
            return self._decode(shard, parquet, group).slice(start - group_starts[group], stop - start)

    @contextlib.contextmanager
    def _group_file(self, shard: ShardEntry, group: int) -> Iterator[pq.ParquetFile]:
        """The Parquet file to read row group ``group`` of ``shard`` from: the file on a local store or in the cache
        (a remote shard is then fetched whole, once, and checked against its sha256), else only that row group,
        fetched with one ranged read."""
        path = layout.shard_path(self.manifest.name, shard)
        if self.store.local_path(path) is not None or self.cache is not None:
            with self._open(shard) as opened:
                parquet = self._parquet(shard, opened.source, checked=opened.checked)
                if not opened.checked and not self.partial:
                    self._check_group(shard, parquet.metadata, group, file_bytes(opened.source))
                yield parquet
            return
        if self.partial:
            yield self._chunks_file(path, shard, group)
            return
        with self._missing(shard):
            footer = self._footer(path, shard, with_first_group=group == 0)
            start, end = group_range(footer, group)
            fetched = self._head(path, start, end) if group == 0 else None
            if fetched is None:
                fetched = self.store.read_range_buffer(path, start, end)
        self._check_group(shard, footer, group, fetched)
        yield self._parquet(shard, SparseFile(shard.size, {start: fetched}, name=self.store.url_for(path)), footer)

    def _chunks_file(self, path: str, shard: ShardEntry, group: int) -> pq.ParquetFile:
        """Row group ``group`` of a remote shard with only the chunks of the columns read fetched (adjacent ones
        with one ranged read, several in flight); their pages are checked as they are decoded."""
        with self._missing(shard):
            footer = self._footer(path, shard)
            ranges = chunk_ranges(footer, group, self._columns)
            fetched: dict[int, bytes | memoryview] = {
                start: data for (start, _), data in zip(ranges, self.store.read_ranges(path, ranges), strict=True)
            }
        return self._parquet(shard, SparseFile(shard.size, fetched, name=self.store.url_for(path)), footer)

    def _footer(self, path: str, shard: ShardEntry, *, with_first_group: bool = False) -> pq.FileMetaData:
        """A shard's Parquet footer: one ranged read of the shard's end the first time (two if the footer is larger
        than :data:`FOOTER_GUESS`), then kept (row groups read at the same moment wait for the one fetch). When the
        first row group is wanted, its bytes are asked for at once (:meth:`_head`): one round trip, not two."""
        with self._footer_lock:
            fetching = self._footer_locks.setdefault(path, threading.Lock())
        with fetching:
            return self._fetched_footer(path, shard, with_first_group)

    def _fetched_footer(self, path: str, shard: ShardEntry, with_first_group: bool) -> pq.FileMetaData:
        if path not in self._footers:
            tail_start = max(shard.size - FOOTER_GUESS, 0)
            if with_first_group and shard.rows:
                guess = int(shard.size * shard.row_groups[0] / shard.rows * FIRST_GROUP_MARGIN)
                head_end = min(_MAGIC_BYTES + guess + FOOTER_GUESS, shard.size)
                if head_end >= tail_start:  # a small shard: all of it, in one read
                    whole = self.store.read_range(path, 0, shard.size)
                    head, tail = memoryview(whole)[_MAGIC_BYTES:], whole[tail_start:]
                else:
                    ranges = [(tail_start, shard.size), (_MAGIC_BYTES, head_end)]
                    tail, head_bytes = self.store.read_ranges(path, ranges)
                    head = memoryview(head_bytes)
                self._heads[path] = head
            else:
                tail = self.store.read_range(path, tail_start, shard.size)
            length = int.from_bytes(tail[-8:-4], "little")
            if tail[-4:] != b"PAR1" or length + 12 > shard.size:
                raise IntegrityError(f"{self.store.url_for(path)} is not a Parquet file (its last bytes are wrong)")
            if length + 8 > len(tail):
                tail = self.store.read_range(path, shard.size - 8 - length, shard.size - len(tail)) + tail
            self._check(shard, len(shard.row_groups), lambda: memoryview(tail)[-8 - length :], "the footer of ")
            with self._damage(shard):
                self._footers[path] = pq.read_metadata(pa.BufferReader(tail[-8 - length :]))
        return self._footers[path]

    def _head(self, path: str, start: int, end: int) -> memoryview | bytes | None:
        """Bytes ``[start, end)`` of a shard from its head fetched with the footer (completed by one more read when
        they go further), once; ``None`` when no head was fetched."""
        head = self._heads.pop(path, None)
        if head is None or not _MAGIC_BYTES <= start < _MAGIC_BYTES + len(head):
            return None
        within = head[start - _MAGIC_BYTES : end - _MAGIC_BYTES]
        if len(within) == end - start:
            return within
        return bytes(within) + self.store.read_range(path, _MAGIC_BYTES + len(head), end)


class _OpenShard:
    """A shard's bytes as an Arrow file, and what keeps them there: a cached shard is held in the cache (kept from
    eviction) for as long as its memory map is open, until :meth:`close` or the end of a ``with`` block. ``checked``:
    the whole shard's bytes were checked already (its row groups are not checked again as they are read)."""

    def __init__(
        self, source: pa.NativeFile, held: contextlib.ExitStack | None = None, *, checked: bool = False
    ) -> None:
        self.source = source
        self.checked = checked
        self._held = held

    def close(self) -> None:
        self.source.close()
        if self._held is not None:
            self._held.close()

    def __enter__(self) -> _OpenShard:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _check_rows(found: int, expected: int) -> None:
    """A row group holds the rows its shard's manifest entry says (an ``OSError``, turned into an
    :class:`IntegrityError` naming the shard by ``ShardRows._damage``)."""
    if found != expected:
        raise OSError(f"it holds {found} rows, not the {expected} of the manifest")


def decoded_rows(table: pa.Table, *, views: bool = False) -> Iterator[Row]:
    """A table's rows as tuples: numpy arrays for tensor columns, Python values for the others (with ``views``,
    memoryviews into the table's buffers for binary columns)."""
    decoders = [column_decoder(field, writable=False, views=views) for field in table.schema]
    return itertools.chain.from_iterable(batch_rows(batch, decoders) for batch in table.to_batches())


class SparseFile(io.RawIOBase):
    """A read-only file of ``size`` bytes of which only some ranges are known; reading elsewhere is an error."""

    def __init__(self, size: int, pieces: dict[int, bytes | memoryview], *, name: str) -> None:
        self._size = size
        self._pieces = sorted((start, memoryview(data).cast("B")) for start, data in pieces.items())
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

    def read(self, size: int = -1) -> memoryview:  # type: ignore[override]
        """The next ``size`` bytes as a view of the fetched piece that holds them: Arrow takes any buffer, so the
        row group's bytes reach its pages without a copy."""
        want = self._size - self._position if size is None or size < 0 else min(size, self._size - self._position)
        for start, data in self._pieces:
            if start <= self._position and self._position + want <= start + len(data):
                begin = self._position - start
                self._position += want
                return data[begin : begin + want]
        raise OSError(f"{self._name}: bytes {self._position}..{self._position + want} were not fetched")

    def readinto(self, buffer: Any) -> int:
        chunk = self.read(len(memoryview(buffer)))
        memoryview(buffer).cast("B")[: len(chunk)] = chunk
        return len(chunk)
