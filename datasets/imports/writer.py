"""An import's one pass: a :class:`~.source.Source`'s rows, mapped to their form (:mod:`.mapping`), straight into
packed shards, then one exclusive commit.

The rule: memory holds a row group (and a source's batch), whatever the source's size; what grows with its rows
(an image version's list and its files' entries) is kept on local disk. Resumable shard by shard, as ``upload
--pack`` is (:mod:`~datamount.datasets.upload_shards`): the shards go into a pack folder named after the source's
identity, its form and the shard sizes; each shard written leaves a marker beside it with where the source goes on
after it (its shard and row), its split and, for images, each row's file size and xxh3-64. Run again after a kill,
the import reads the source from the last marker's place on; the rows of the shards already written are taken from
them (their paths and labels) and their markers. A split starts a shard of its own. Nothing is committed until the
whole source was read; a source that turns out damaged is a :class:`~.source.SourceError` and commits nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import operator
import tempfile
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from datamount.datasets import catalog, layout, locks
from datamount.datasets.imports.mapping import Form, ImageForm, image_rows, value_views
from datamount.datasets.imports.source import Source, SourceError, identity
from datamount.datasets.listfile import NormalisedCopy
from datamount.datasets.manifest import (
    PACKED_DIGEST_FORMAT_VERSION,
    SPLITS_KEY,
    FileEntry,
    Kind,
    Manifest,
    ShardEntry,
)
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.shard_writer import (
    FIRST_ROW_GROUP_BYTES,
    PATH_COLUMN,
    ShardWriter,
    check_sizes,
    column,
    list_schema,
    table_schema,
)
from datamount.datasets.spool import ExternalSort, FileSpool
from datamount.datasets.upload_marker import Marker, MarkerWriter, read_marker
from datamount.datasets.upload_shards import free_pack_folder
from datamount.storage import Store
from datamount.storage.checksums import xxh3

#: Where a source goes on: its shard's number and the rows of it already taken.
Position = tuple[int, int]


@dataclass(frozen=True)
class Imported:
    """What an import did: the committed manifest, the rows and shards this run wrote, and those it found written
    by an earlier run of the same import."""

    manifest: Manifest
    written_rows: int
    written_shards: int
    resumed_rows: int
    resumed_shards: int


def write_source(
    source: Source,
    form: Form,
    name: str,
    store: Store,
    *,
    shard_bytes: int,
    row_group_bytes: int,
    progress: Progress | None = None,
) -> Imported:
    """Store ``source``'s rows in ``form`` as a new version of ``name`` in ``store`` (see the module's rule)."""
    check_sizes(shard_bytes, row_group_bytes)
    report = progress or Silent()
    kind = Kind.IMAGE if isinstance(form, ImageForm) else Kind.TABLE
    schema = list_schema(name, kind, form.columns) if kind is Kind.IMAGE else table_schema(form.schema(source.schema))
    with locks.writing(store, name, purpose="import"), tempfile.TemporaryDirectory(prefix="datamount-import-") as tmp:
        cut = hashlib.sha256(f"{identity(source)}\n{form}\n{shard_bytes}\n{row_group_bytes}\n{schema}".encode())
        folder = free_pack_folder(store, name, cut.hexdigest()[:16])
        earlier = _earlier_shards(store, name, folder)
        rows = _Rows(tmp, kind)
        for marker in earlier:
            rows.take_written(store, name, marker)
        total = sum(shard.size for shard in source.shards)
        report.start("import", items=sum(shard.rows or 0 for shard in source.shards), size=total)
        writing = _Shards(store, name, folder, schema, form, rows, shard_bytes, row_group_bytes, report)
        writing.resume_after(earlier)
        try:
            writing.pump(source, earlier[-1].extra["next"] if earlier else (0, 0))
        except BaseException:
            writing.discard()  # the shards finished stay, with their markers, for the next run
            raise
        report.finish()
        if rows.count == 0:
            raise SourceError(source.where, f"{len(source.shards)} shard(s)", "they hold no samples: nothing to import")
        draft = rows.manifest(name, kind, form, writing.entries, writing.splits, source)
        dataset = layout.dataset_folder(name)
        if rows.listing is not None:
            store.put_many([(rows.listing.path, layout.list_path(draft), draft.list_sha256)])
        store.write(f"{dataset}/{layout.taken_marker(folder)}", b"")
        manifest = catalog.commit(store, draft)
        store.remove_many(f"{dataset}/{layout.upload_shard_marker(folder, n)}" for n in range(len(writing.entries)))
        resumed = sum(shard.rows for shard in writing.entries[: len(earlier)])
        return Imported(manifest, manifest.rows - resumed, len(writing.entries) - len(earlier), resumed, len(earlier))


def _earlier_shards(store: Store, name: str, folder: str) -> list[Marker]:
    """The markers of the shards an earlier run wrote into ``folder``, from the first on while they follow each
    other and their shard is there with the size the marker says."""
    dataset = layout.dataset_folder(name)
    stored = store.list(f"{dataset}/{folder}")
    found: list[Marker] = []
    for number in itertools.count():
        path = f"{dataset}/{layout.upload_shard_marker(folder, number)}"
        marker = read_marker(store, path, stored[path]) if path in stored else None
        try:
            entry = ShardEntry(**marker.entry) if marker is not None else None
            place = marker.extra["next"] if marker is not None else None
        except (TypeError, KeyError):
            entry = place = None
        if marker is None or entry is None or stored.get(f"{dataset}/{entry.path}") != entry.size:
            return found
        if not (isinstance(place, list) and len(place) == 2 and all(isinstance(p, int) for p in place)):
            return found
        found.append(marker)
    raise AssertionError("unreachable")


class _Rows:
    """What an image version keeps of its rows beside its shards, on local disk: its list (path TAB label, in row
    order) and its files' entries (sorted by path at the end)."""

    def __init__(self, folder: str, kind: Kind) -> None:
        self.folder = folder
        self.kind = kind
        self.listing = NormalisedCopy(f"{folder}/list") if kind is Kind.IMAGE else None
        self.files = ExternalSort(folder)
        self.count = 0

    def add(self, paths: list[str], labels: list[str], files: list[tuple[int, str]]) -> None:
        assert self.listing is not None
        for path, label, (size, digest) in zip(paths, labels, files, strict=True):
            self.listing.add((path, label))
            self.files.add((path, self.count, digest, size))
            self.count += 1

    def take_written(self, store: Store, name: str, marker: Marker) -> None:
        """The rows of a shard an earlier run wrote (an image version's: its paths, labels and files)."""
        entry = ShardEntry(**marker.entry)
        if self.kind is not Kind.IMAGE:
            self.count += entry.rows
            return
        with store.open(layout.shard_path(name, entry)) as stream:
            table = pq.read_table(stream, columns=[PATH_COLUMN, "label"])
        files = marker.files(store, 0, marker.rows)
        if table.num_rows != entry.rows or len(files) != entry.rows:
            raise SourceError(store.url_for(marker.path), entry.path, "the shard and its marker disagree; delete both")
        self.add(table.column(PATH_COLUMN).to_pylist(), table.column("label").to_pylist(), files)

    def manifest(
        self, name: str, kind: Kind, form: Form, shards: list[ShardEntry], splits: dict[str, Any], source: Source
    ) -> Manifest:
        extra = {SPLITS_KEY: splits} if splits else {}
        rows = sum(shard.rows for shard in shards)
        where = f"{source.format}:{source.where}" if "://" in source.where else f"{source.format}:{_base(source)}"
        if self.listing is None:
            return Manifest(
                name=name, kind=kind, columns=form.columns, rows=rows, shards=shards, source=where, extra=extra
            )
        self.listing.__exit__()
        spool = FileSpool(self.folder)
        _spool_files(self.files, spool, source)
        return Manifest(
            name=name,
            kind=kind,
            columns=form.columns,
            rows=rows,
            files=spool,
            list_sha256=self.listing.sha256,
            list_size=self.listing.size,
            list_blocks=self.listing.blocks,
            shards=shards,
            source=where,
            extra=extra,
            objects=False,
            format_version=PACKED_DIGEST_FORMAT_VERSION,
        )


def _base(source: Source) -> str:
    """A local source as the manifest names it: its last component (never a full local path)."""
    return source.where.rstrip("/").rsplit("/", 1)[-1]


def _spool_files(files: ExternalSort, spool: FileSpool, source: Source) -> None:
    """One entry per path, in path order; two rows with one path and other bytes are refused (a version's path
    names one file)."""
    for path, same in itertools.groupby(files.sorted(), key=operator.itemgetter(0)):
        records = iter(same)
        _, row, digest, size = next(records)
        for _, other_row, other, other_size in records:
            if (other, other_size) != (digest, size):
                raise SourceError(
                    source.where,
                    path,
                    f"rows {row} and {other_row} of the import both make the file {path} with other bytes; "
                    "give the samples distinct keys",
                )
        spool.append(FileEntry(path, size, "", digest))


@dataclass
class _Pending:
    """Rows mapped and waiting for their row group: their columns, bytes, files and where the source goes on."""

    columns: list[list[pa.Array]] = field(default_factory=list)
    sizes: list[np.ndarray] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    files: list[tuple[int, str]] = field(default_factory=list)
    bytes: int = 0
    rows: int = 0


class _Shards:
    """Writes the source's rows into shards of ``folder``, a row group at a time, each shard's marker after it."""

    def __init__(
        self,
        store: Store,
        name: str,
        folder: str,
        schema: pa.Schema,
        form: Form,
        rows: _Rows,
        shard_bytes: int,
        row_group_bytes: int,
        progress: Progress,
    ) -> None:
        self.store, self.name, self.folder, self.schema, self.form = store, name, folder, schema, form
        self.rows, self.shard_bytes, self.row_group_bytes, self.progress = rows, shard_bytes, row_group_bytes, progress
        self.run = uuid.uuid4().hex[:8]
        self.entries: list[ShardEntry] = []
        self.splits: dict[str, Any] = {}
        self._writer: ShardWriter | None = None
        self._marker = MarkerWriter()
        #: The shard being closed and sent (with its marker after it) while the next one fills; at most one.
        self._sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="datamount-import-send")
        self._sending: Future[None] | None = None
        self._number = 0
        self._in_shard = 0
        self._pending = _Pending()
        self._split: str | None = None
        self._place: Position = (0, 0)

    def resume_after(self, earlier: list[Marker]) -> None:
        for marker in earlier:
            self._record(ShardEntry(**marker.entry), marker.extra.get("split", ""))
        self._number = len(earlier)
        self._split = earlier[-1].extra.get("split", "") if earlier else None

    def pump(self, source: Source, start: Position) -> None:
        first, skip = start
        for number in range(first, len(source.shards)):
            shard = source.shards[number]
            if self._split is not None and shard.split != self._split:
                self._end_shard()
            self._split = shard.split
            taken = skip if number == first else 0
            for batch in _read_ahead(source.batches(number, taken)):
                self._add(source, number, taken, batch)
                taken += batch.num_rows
            if shard.rows is not None and taken != shard.rows:
                raise SourceError(source.where, shard.name, f"it holds {taken:,} rows, its index says {shard.rows:,}")
            self._place = (number + 1, 0)
        self._end_shard()
        self._wait_sent()
        self._sender.shutdown()
        self._marker.close()

    def discard(self) -> None:
        """After a failure: the shard being sent is sent (with its marker: the next run takes it), the one being
        written dropped."""
        with contextlib.suppress(Exception):
            self._wait_sent()
        self._sender.shutdown()
        if self._writer is not None:
            self._writer.discard()
        self._marker.close()

    def _add(self, source: Source, number: int, taken: int, batch: pa.RecordBatch) -> None:
        """A batch of source shard ``number`` that starts at its row ``taken``: its rows, cut into row groups."""
        first_row = self.rows.count + self._pending.rows
        if isinstance(self.form, ImageForm):
            mapped = image_rows(self.form, batch, first_row)
            if isinstance(mapped[0], str):
                why, at = mapped
                raise SourceError(source.where, source.shards[number].name, f"{why}", sample=taken + int(at))
            images, labels, paths = mapped
            views = value_views(images)
            sizes = np.fromiter(map(len, views), np.int64, len(views))
            files = list(zip(sizes.tolist(), map(xxh3, views), strict=True))
            columns: list[pa.Array] = [images, column(labels, pa.string()), column(paths, pa.string())]
            row_sizes = sizes + np.fromiter(map(len, labels), np.int64, len(labels))
        else:
            table_batch = batch.select(self.form.fields)
            columns = list(table_batch.columns)
            paths, labels, files = [], [], []
            row_sizes = np.full(batch.num_rows, max(1, table_batch.nbytes // max(batch.num_rows, 1)), np.int64)
        self.progress.advance(items=batch.num_rows, size=int(row_sizes.sum()))
        start = 0
        while start < batch.num_rows:
            limit = self._group_limit() - self._pending.bytes
            cumulative = np.cumsum(row_sizes[start:])
            stop = start + max(1, int(np.searchsorted(cumulative, limit, side="left")) + 1)
            stop = min(stop, batch.num_rows)
            self._hold([c.slice(start, stop - start) for c in columns], row_sizes[start:stop])
            if files:
                self._pending.paths += paths[start:stop]
                self._pending.labels += labels[start:stop]
                self._pending.files += files[start:stop]
            self._place = (number, taken + stop)
            if self._pending.bytes >= self._group_limit():
                self._write_group()
            start = stop

    def _group_limit(self) -> int:
        return min(self.row_group_bytes, FIRST_ROW_GROUP_BYTES) if self._in_shard == 0 else self.row_group_bytes

    def _hold(self, columns: list[pa.Array], sizes: np.ndarray) -> None:
        self._pending.columns.append(columns)
        self._pending.sizes.append(sizes)
        self._pending.bytes += int(sizes.sum())
        self._pending.rows += len(sizes)

    def _write_group(self) -> None:
        pending, self._pending = self._pending, _Pending()
        if not pending.rows:
            return
        columns = [pa.concat_arrays(list(parts)) for parts in zip(*pending.columns, strict=True)]
        if self._writer is None:
            self._writer = ShardWriter(
                self.store,
                self.name,
                self.schema,
                shard_bytes=1 << 62,  # shards are cut here, after whole row groups
                row_group_bytes=self.row_group_bytes,
                pack_folder=self.folder,
                first_shard=self._number,
                first_index=self.rows.count,
                run=self.run,
            )
        self._writer.add_group(columns)
        if pending.files:
            self.rows.add(pending.paths, pending.labels, pending.files)
            self._marker.add(pending.files)
        else:
            self.rows.count += pending.rows
        self._in_shard += pending.bytes
        if self._in_shard >= self.shard_bytes:
            self._end_shard()

    def _end_shard(self) -> None:
        """Close the shard being written; it is sent, then its marker, while the next one fills."""
        self._write_group()
        if self._writer is None:
            return
        self._wait_sent()
        writer, marker, place, split = self._writer, self._marker, list(self._place), self._split or ""
        path = f"{layout.dataset_folder(self.name)}/{layout.upload_shard_marker(self.folder, self._number)}"
        self._sending = self._sender.submit(self._send, writer, marker, path, {"next": place, "split": split})
        self._writer, self._marker = None, MarkerWriter()
        self._number += 1
        self._in_shard = 0

    def _send(self, writer: ShardWriter, marker: MarkerWriter, path: str, extra: dict[str, Any]) -> None:
        try:
            (entry,) = writer.close()
            marker.send(self.store, path, asdict(entry), extra)
        finally:
            marker.close()
        self._record(entry, extra["split"])

    def _wait_sent(self) -> None:
        sending, self._sending = self._sending, None
        if sending is not None:
            sending.result()

    def _record(self, entry: ShardEntry, split: str) -> None:
        number = len(self.entries)
        self.entries.append(entry)
        if split:
            info = self.splits.setdefault(split, {"rows": 0, "shards": [number, number]})
            info["rows"] += entry.rows
            info["shards"][1] = number + 1


def _read_ahead(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches``, the next one read in a thread while one is taken (the source's reads overlap the work on the
    rows); the source is closed when the taking stops."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="datamount-import-read") as reader:
        following = reader.submit(next, batches, None)
        try:
            while (batch := following.result()) is not None:
                following = reader.submit(next, batches, None)
                yield batch
        finally:
            with contextlib.suppress(Exception):
                following.result()  # a generator cannot be closed while it runs
            getattr(batches, "close", lambda: None)()
