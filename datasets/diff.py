"""What changed from one version of a dataset to another, from their manifests and lists alone: no file's object and
no shard is read.

Rows are matched by key: an image row by its file's path (its bytes compared by the digests the manifest records for
the path: :func:`~datamount.datasets.file_entry.same_content`; its labels taken from the list), a text row by its
first column (its other columns are its labels, so a changed text row is one with another target). A key listed
several times (a path listed twice) is matched occurrence by occurrence: first the rows that are identical in both
versions (same key, labels and bytes), in list order; then the rest of that key's rows, in list order, as changed
pairs; what is left over is removed (only in A) or added (only in B). So ``added + changed + unchanged`` are B's
rows, ``removed + changed + unchanged`` are A's, and moving rows about changes nothing. Rows are numbered from 0,
as readers number them.

A version without a list (a ``table`` version, a public dataset: their rows are only in their shards) cannot be
matched row by row without reading its shards. A pair with such a version is compared by shard: the rows of a shard
both versions hold (the same sha256) are unchanged, every other row counts as removed from A and added in B, and
:attr:`VersionDiff.notes` says so. The manifests' files (an image version's files, a public dataset's attached
files) are compared by path and content in every case.

The work is a sort-merge, in memory bounded whatever the rows (``benchmarks/bench_diff.py`` measures pairs of a
million rows; ``tests/datasets/test_diff_streamed.py`` bounds a pair of 400,000):

1. Each list is read as a stream, a window at a time, hashed as it is read, and cut into rows by numpy offsets
   (:mod:`datamount.datasets.list_windows`: key, labels, row number; no Python object per row). A list whose sha256
   is not its manifest's is an :class:`~datamount.storage.IntegrityError` naming its URL, raised before any row is
   matched: the sort reads every row before it gives the first.
2. Each list's rows are sorted by key and row number: runs of :data:`RUN_ROWS` sorted by Arrow and spilled to
   temporary Arrow files, merged a batch at a time
   (:func:`~datamount.datasets.file_parts_writer.sorted_tables`). The same list on both sides is read and sorted
   once.
3. The two sorted lists, and for two image versions the paths whose files' bytes differ (sorted too), are merged
   into batches of about :data:`BATCH_ROWS` rows cut between keys (:func:`~._matching.key_batches`): all rows of a
   key, on both sides, are in one batch, in list order, so the rules above applied to a batch
   (:func:`~._matching.match_lists`, on Arrow dictionary codes) match them as they would the whole lists. The
   files of two manifests from format 6 on (entries in parts sorted by path, in the byte order Arrow sorts strings
   in) are merged by path a part at a time beside them (:class:`~._file_changes.PartsMerge`); older manifests' files
   (JSON in the manifest, bounded by that format's limits) are compared whole as their text holds them, and their
   changed paths sorted.
4. What is kept of the rows: the counts; the first ``samples`` rows of each category, by row number, with what
   :meth:`VersionDiff.sample_rows` shows of them; each version's rows per label while it has at most
   :data:`LABELS_COUNTED` labels, and past that how many labels it has, counted by a sort of its labels on disk
   (:attr:`VersionDiff.label_counts_a` then reads the list again when it is asked for).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datamount.datasets import catalog, layout, list_windows
from datamount.datasets._file_changes import PATHS, FileChanges, PartsMerge, compare_files
from datamount.datasets._matching import ADDED, CHANGED, REMOVED, UNCHANGED, Matched, key_batches, match_lists
from datamount.datasets.errors import ManifestError
from datamount.datasets.file_parts import FileParts
from datamount.datasets.file_parts_writer import sorted_tables
from datamount.datasets.manifest import Kind, Manifest
from datamount.datasets.names import PUBLIC_NAMESPACE
from datamount.storage import IntegrityError, Store
from datamount.storage.arguments import one_of, whole_number

__all__ = [
    "CATEGORIES",
    "DIFF_FORMAT",
    "SAMPLE_ROWS",
    "DiffRow",
    "FileCounts",
    "VersionDiff",
    "diff_versions",
    "label_order",
]

#: The version of :meth:`VersionDiff.to_json`'s document: keys are only added within one; a key removed or changed
#: in meaning makes the next.
DIFF_FORMAT = 1
Category = Literal["added", "removed", "changed"]
#: The categories :meth:`VersionDiff.sample_rows` shows.
CATEGORIES: tuple[Category, ...] = ("added", "removed", "changed")
#: How rows were compared: matched one by one from the lists, or counted by shard.
Compared = Literal["rows", "shards"]
#: Label counts go into the JSON document only up to this many distinct labels per version (a text version's
#: targets are mostly all different: counts of them would be the whole list again).
JSON_LABELS_LIMIT = 10_000
#: More distinct labels than this in a version: they are not classes (a text version's targets), and the command
#: and the web page show how many there are, not a table of their counts (:attr:`VersionDiff.labels_are_classes`).
MOST_CLASSES = 1000
#: Rows of each category a diff keeps for :meth:`VersionDiff.sample_rows` unless told otherwise (the command shows
#: 5, the web page 12).
SAMPLE_ROWS = 10_000
#: Rows of a list sorted in memory at once (about 100 bytes a row of an image list while sorted); more are spilled to
#: disk in runs and merged.
RUN_ROWS = 1 << 17
#: Rows of each list matched at once (more where one key has more rows).
BATCH_ROWS = 1 << 14
#: Files of each version compared at once, when both keep their entries in parts.
FILE_BATCH_ROWS = 1 << 15
#: Distinct labels of a version counted in memory; past them only how many there are is found (by a sort on disk),
#: and :attr:`VersionDiff.label_counts_a` reads the list again when asked for.
LABELS_COUNTED = 1 << 16
_NEWLINE, _TAB = ord("\n"), ord("\t")


@dataclass(frozen=True)
class DiffRow:
    """One row of a category: its key (an image row's path, a text row's first column), its row numbers in A and B
    (``None`` where it is not there) and its labels there (the second column; ``None`` where it is not there or the
    list has one column). ``bytes_changed``: a changed image row whose file's bytes differ."""

    key: str
    row_a: int | None
    row_b: int | None
    label_a: str | None
    label_b: str | None
    bytes_changed: bool = False

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class FileCounts:
    """The files two manifests list, compared by path: in B only (added), in A only (removed), with other bytes
    (changed, by their digests) or the same (unchanged)."""

    added: int = 0
    removed: int = 0
    changed: int = 0
    unchanged: int = 0


class VersionDiff:
    """The difference from version A to version B (see :func:`diff_versions`).

    Attributes
    ----------
    a_ref, b_ref
        The versions compared, pinned (``cats@1``).
    kind_a, kind_b, columns_a, columns_b, rows_a, rows_b
        What each version is.
    compared
        ``"rows"`` (matched from the lists) or ``"shards"`` (counted by shard: a version without a list).
    added, removed, changed, unchanged
        Rows in B only, in A only, in both with other bytes or labels, in both alike.
    changed_bytes, changed_labels
        Of the changed rows, those whose file's bytes differ and those whose labels differ (a row may be both).
    label_counts_a, label_counts_b
        Rows per label (the second column of an image or text version; ``{}`` for a table or a version without a
        list).
    files
        The manifests' files compared by path and content.
    notes
        What could not be compared, and why, in sentences.
    """

    def __init__(
        self,
        store: Store,
        a: Manifest,
        b: Manifest,
        *,
        found: _RowsFound | None,
        files: FileChanges,
        notes: list[str],
    ) -> None:
        self._store = store
        self._a, self._b = a, b
        self._found = found
        self.a_ref, self.b_ref = a.ref, b.ref
        self.kind_a, self.kind_b = str(a.kind), str(b.kind)
        self.columns_a, self.columns_b = list(a.columns), list(b.columns)
        self.rows_a, self.rows_b = a.rows, b.rows
        self.files = FileCounts(files.added, files.removed, files.changed, files.unchanged)
        self._file_entries = files.entries
        self.notes = notes
        if files.uncompared:
            self.notes.append(_uncompared_note(a, b, files.uncompared))
        self.compared: Compared = "rows" if found is not None else "shards"
        if found is not None:
            self.unchanged, self.changed, self.removed, self.added = (found.counts[c] for c in _STATUSES)
            self.changed_bytes, self.changed_labels = found.changed_bytes, found.changed_labels
        else:
            self.unchanged = _rows_in_common_shards(a, b)
            self.changed = self.changed_bytes = self.changed_labels = 0
            self.removed, self.added = a.rows - self.unchanged, b.rows - self.unchanged

    @property
    def distinct_labels_a(self) -> int:
        """How many labels A's rows have (0 without labels)."""
        return 0 if self._found is None else self._found.labels[0].distinct

    @property
    def distinct_labels_b(self) -> int:
        """How many labels B's rows have (0 without labels)."""
        return 0 if self._found is None else self._found.labels[1].distinct

    @property
    def labels_are_classes(self) -> bool:
        """Whether the versions have labels, at most :data:`MOST_CLASSES` distinct in each: classes, whose counts are
        worth a table (else their counts are asked for only where they are needed: ``label_counts_a`` may read a list
        again)."""
        distinct = (self.distinct_labels_a, self.distinct_labels_b)
        return any(distinct) and max(distinct) <= MOST_CLASSES

    @functools.cached_property
    def label_counts_a(self) -> dict[str, int]:
        return self._label_counts(0, self._a)

    @functools.cached_property
    def label_counts_b(self) -> dict[str, int]:
        return self._label_counts(1, self._b)

    def _label_counts(self, side: int, manifest: Manifest) -> dict[str, int]:
        if self._found is None:
            return {}
        counts = self._found.labels[side].counts
        if counts is None:  # too many labels to have kept their counts in the pass: counted again, as asked for
            counts = _counted_again(self._store, manifest)
        return dict(sorted(counts.items(), key=lambda pair: label_order(pair[0])))

    def sample_rows(self, category: Category, limit: int) -> list[DiffRow]:
        """The first ``limit`` rows of ``category`` (``"added"``, ``"removed"`` or ``"changed"``), in list order (of
        B for added rows, of A for the others); none when the versions were compared by shard. At most the
        ``samples`` rows :func:`diff_manifests` was asked to keep (:data:`SAMPLE_ROWS`) are known."""
        one_of(category, "category", CATEGORIES)
        limit = whole_number(limit, "limit", minimum=0)
        if self._found is None:
            return []
        return self._found.samples[category].rows[:limit]

    def to_json(self, *, samples: int = 5) -> dict[str, Any]:
        """The difference as a JSON document (``docs/cli.md``, ``datamount diff --json``), with the first
        ``samples`` rows of each category."""
        labels: dict[str, Any] | None = None
        if max(self.distinct_labels_a, self.distinct_labels_b) <= JSON_LABELS_LIMIT:
            labels = {"a": self.label_counts_a, "b": self.label_counts_b}
        return {
            "format": DIFF_FORMAT,
            "a": _version_json(self._a, self._file_entries[0]),
            "b": _version_json(self._b, self._file_entries[1]),
            "compared": self.compared,
            "rows": {
                "added": self.added,
                "removed": self.removed,
                "changed": self.changed,
                "unchanged": self.unchanged,
                "changed_bytes": self.changed_bytes,
                "changed_labels": self.changed_labels,
            },
            "kind_changed": self.kind_a != self.kind_b,
            "columns_added": [column for column in self.columns_b if column not in self.columns_a],
            "columns_removed": [column for column in self.columns_a if column not in self.columns_b],
            "label_counts": labels,
            "distinct_labels": {"a": self.distinct_labels_a, "b": self.distinct_labels_b},
            "files": dataclasses.asdict(self.files),
            "samples": {
                category: [row.to_json() for row in self.sample_rows(category, samples)] for category in CATEGORIES
            },
            "notes": list(self.notes),
        }


def diff_versions(store: Store, a: str, b: str, *, samples: int = SAMPLE_ROWS) -> VersionDiff:
    """What changed from version ``a`` to version ``b`` (``name`` or ``name@N`` each, resolved as
    :func:`~datamount.datasets.catalog.resolve` does: a plain name is the latest version; ``b`` may be another
    dataset), read from their manifests and lists alone; the first ``samples`` rows of each category are kept for
    :meth:`VersionDiff.sample_rows`. The rules are in this module's docstring."""
    return diff_manifests(store, catalog.resolve(store, a), catalog.resolve(store, b), samples=samples)


def diff_manifests(store: Store, first: Manifest, second: Manifest, *, samples: int = SAMPLE_ROWS) -> VersionDiff:
    """What changed from version ``first`` to version ``second``, both resolved already (:func:`diff_versions`)."""
    samples = whole_number(samples, "samples", minimum=0)
    notes = _kind_notes(first, second)
    if not (first.has_list and second.has_list):
        notes.append(_shards_note(first, second))
        files = compare_files(first.files, second.files, decode=True)  # the text's cut is checked by a list's paths
        return VersionDiff(store, first, second, found=None, files=files, notes=notes)
    images = first.kind is Kind.IMAGE and second.kind is Kind.IMAGE
    with tempfile.TemporaryDirectory(prefix="datamount-diff-") as spill:
        if isinstance(first.files, FileParts) and isinstance(second.files, FileParts):
            merge = PartsMerge(first.files, second.files, FILE_BATCH_ROWS)
            found = _matched(store, first, second, Path(spill), samples, merge.changed_paths() if images else None)
            return VersionDiff(store, first, second, found=found, files=merge.changes(), notes=notes)
        if not images:
            changes = compare_files(first.files, second.files, decode=True)
            found = _matched(store, first, second, Path(spill), samples, None)
            return VersionDiff(store, first, second, found=found, files=changes, notes=notes)
        changes = compare_files(first.files, second.files)
        found = _matched(store, first, second, Path(spill), samples, _sorted_paths(changes.changed_paths))
        if changes.cut and changes.entries != found.distinct:  # not one file per path of the list: cut wrong
            changes = compare_files(first.files, second.files, decode=True)
            found = _matched(store, first, second, Path(spill), samples, _sorted_paths(changes.changed_paths))
        return VersionDiff(store, first, second, found=found, files=changes, notes=notes)


def _sorted_paths(paths: pa.Array) -> Iterator[pa.Table]:
    """Paths (of a manifest's files in JSON: in no promised order), as a sorted stream."""
    yield pa.Table.from_arrays([paths.take(pc.sort_indices(paths))], schema=PATHS)


# --------------------------------------------------------------------------------------------- the pass


def _matched(
    store: Store, a: Manifest, b: Manifest, spill: Path, samples: int, changed_paths: Iterator[pa.Table] | None
) -> _RowsFound:
    """Both lists read, sorted by key and matched a batch of keys at a time (``changed_paths``: the paths whose files
    differ, sorted, for image versions)."""
    schemas = _list_schema(len(a.columns)), _list_schema(len(b.columns))
    found = _RowsFound(samples, (len(a.columns), len(b.columns)), spill)
    sorted_a = _sorted_list(store, a, schemas[0], spill / "a")
    if layout.list_path(a) == layout.list_path(b) and len(a.columns) == len(b.columns):
        sorted_a, sorted_b = itertools.tee(sorted_a)  # the same list: read once (the two copies keep step)
    else:
        sorted_b = _sorted_list(store, b, schemas[1], spill / "b")
    streams = [(sorted_a, schemas[0]), (sorted_b, schemas[1])]
    if changed_paths is not None:
        streams.append((changed_paths, PATHS))
    for batch in key_batches(streams, BATCH_ROWS):
        found.add(batch[0], batch[1], batch[2].column(0).combine_chunks() if changed_paths is not None else None)
    found.finish()
    return found


def _sorted_list(store: Store, manifest: Manifest, schema: pa.Schema, spill: Path) -> Iterator[pa.Table]:
    """A version's list rows (key, labels, row number) sorted by key and row, spilled to ``spill`` in runs."""
    return sorted_tables(_list_tables(store, manifest, schema), spill, RUN_ROWS, schema, _BY_KEY)


def _list_schema(width: int) -> pa.Schema:
    """A list's rows: its ``width`` columns (the first the key) and each row's number."""
    columns = [pa.field(f"c{i}", pa.string(), nullable=False) for i in range(width)]
    return pa.schema([*columns, pa.field("row", pa.int64(), nullable=False)])


_BY_KEY = [("c0", "ascending"), ("row", "ascending")]


def _list_tables(store: Store, manifest: Manifest, schema: pa.Schema) -> Iterator[pa.Table]:
    """A version's list, read a window at a time (:mod:`datamount.datasets.list_windows`) and checked against its
    manifest's sha256 as it is read, as tables of ``schema``; a damaged list is an :class:`IntegrityError` (after all
    its rows), never rows of another list, and a list that does not parse is a :class:`ManifestError` once it is
    known to be intact."""
    path = layout.list_path(manifest)
    where = store.url_for(path)
    digest, row = hashlib.sha256(), 0
    failed: ManifestError | None = None
    hashed = _hashed(list_windows.read_windows(store, path, manifest.list_size), digest)
    for lines in list_windows.whole_lines(hashed):
        if failed is not None:
            continue
        try:
            table = _rows_table(
                lines if lines[-1] == _NEWLINE else memoryview(bytes(lines) + b"\n"), schema, row, where
            )
        except ManifestError as exc:
            failed = exc
            continue
        row += table.num_rows
        yield table
    if digest.hexdigest() != manifest.list_sha256:
        raise IntegrityError(f"the list of {manifest.ref} ({where}) does not match its manifest's sha256")
    if failed is not None:
        raise failed


def _hashed(windows: Iterator[bytes], digest: Any) -> Iterator[bytes]:
    """``windows``, each added to ``digest`` as it passes."""
    for window in windows:
        digest.update(window)
        yield window


def _rows_table(lines: memoryview, schema: pa.Schema, first_row: int, where: str) -> pa.Table:
    """Whole lines of a normalised list (UTF-8, TAB-separated values, no quoting; an empty line is no row) as a
    table of ``schema``, its rows numbered from ``first_row``: each column cut by offsets found with numpy
    (:func:`~datamount.datasets.list_windows.strings_at`). No Python object per row."""
    width = len(schema) - 1
    raw = np.frombuffer(lines, np.uint8)
    ends = np.flatnonzero(raw == _NEWLINE)
    starts = np.concatenate(([0], ends[:-1] + 1))
    kept = ends > starts
    starts, ends = starts[kept], ends[kept]
    tabs = np.flatnonzero(raw == _TAB)
    per_line = np.bincount(np.searchsorted(ends, tabs), minlength=len(ends) + 1)
    if per_line[-1] or np.any(per_line[:-1] != width - 1):
        raise ManifestError(f"{where} is damaged: a row does not have {width} column(s)")
    between = tabs.reshape(len(ends), width - 1)
    columns = []
    for i in range(width):
        column_starts = starts if i == 0 else between[:, i - 1] + 1
        column_stops = ends if i == width - 1 else between[:, i]
        try:
            columns.append(list_windows.strings_at(lines, column_starts, column_stops))
        except pa.ArrowInvalid as exc:
            raise ManifestError(f"{where} is damaged: {exc}") from None
    numbers = pa.array(np.arange(first_row, first_row + len(ends), dtype=np.int64))
    return pa.Table.from_arrays([*columns, numbers], schema=schema)


def _counted_again(store: Store, manifest: Manifest) -> Counter[str]:
    """Rows per label of a version's list, read again."""
    counts: Counter[str] = Counter()
    for table in _list_tables(store, manifest, _list_schema(len(manifest.columns))):
        _count_into(counts, table.column(1))
    return counts


def _count_into(counts: Counter[str], labels: pa.ChunkedArray) -> None:
    counted = pc.value_counts(labels)
    counts.update(dict(zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist(), strict=True)))


# --------------------------------------------------------------------------------------------- what is found


_STATUSES = ("unchanged", "changed", "removed", "added")


class _RowsFound:
    """What the batches of keys matched add up to: rows per category, the first ``samples`` rows of each (by row
    number), and each version's labels."""

    def __init__(self, samples: int, widths: tuple[int, int], spill: Path) -> None:
        self.counts = dict.fromkeys(_STATUSES, 0)
        self.changed_bytes = self.changed_labels = 0
        self.samples = {category: _FirstRows(samples) for category in CATEGORIES}
        self.labels = (_LabelCounts(widths[0] > 1, spill / "labels-a"), _LabelCounts(widths[1] > 1, spill / "labels-b"))
        self.distinct = (0, 0)

    def add(self, a: pa.Table, b: pa.Table, changed_paths: pa.Array | None) -> None:
        """Match one batch (all rows of its keys, in both lists) and count what is found."""
        columns_a = [a.column(i) for i in range(a.num_columns - 1)]
        columns_b = [b.column(i) for i in range(b.num_columns - 1)]
        matched, distinct = match_lists(columns_a, columns_b, changed_paths)
        self.distinct = (self.distinct[0] + distinct[0], self.distinct[1] + distinct[1])
        for status, name in zip((UNCHANGED, CHANGED, REMOVED), _STATUSES, strict=False):
            self.counts[name] += int(np.count_nonzero(matched.status_a == status))
        self.counts["added"] += int(np.count_nonzero(matched.status_b == ADDED))
        self.changed_bytes += int(np.count_nonzero(matched.bytes_differ_a))
        self.changed_labels += int(np.count_nonzero(matched.labels_differ_a))
        for side, table in zip(self.labels, (a, b), strict=True):
            side.add(table)
        self._sample(a, b, matched)

    def _sample(self, a: pa.Table, b: pa.Table, matched: Matched) -> None:
        rows_a, rows_b = a.column("row").to_numpy(), b.column("row").to_numpy()
        removed = np.flatnonzero(matched.status_a == REMOVED)
        self.samples["removed"].offer(rows_a[removed], a, removed, None, removed, None)
        changed = np.flatnonzero(matched.status_a == CHANGED)
        partners = matched.partner_a[changed]
        self.samples["changed"].offer(rows_a[changed], a, changed, b, partners, matched.bytes_differ_a[changed])
        added = np.flatnonzero(matched.status_b == ADDED)
        self.samples["added"].offer(rows_b[added], None, added, b, added, None)

    def finish(self) -> None:
        for side in self.labels:
            side.finish()


#: The rows of a category kept: what a :class:`DiffRow` holds, and the row number they are ordered by.
_SAMPLE = pa.schema(
    [
        pa.field("key", pa.string()),
        pa.field("row_a", pa.int64()),
        pa.field("row_b", pa.int64()),
        pa.field("label_a", pa.string()),
        pa.field("label_b", pa.string()),
        pa.field("bytes_changed", pa.bool_()),
        pa.field("number", pa.int64()),
    ]
)


class _FirstRows:
    """The ``limit`` rows of one category with the smallest row numbers offered, as an Arrow table (no Python object
    per row, however many rows a batch offers)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._kept = _SAMPLE.empty_table()

    @property
    def rows(self) -> list[DiffRow]:
        return [DiffRow(**row) for row in self._kept.drop_columns(["number"]).to_pylist()]

    def offer(
        self,
        numbers: np.ndarray,
        a: pa.Table | None,
        at_a: np.ndarray,
        b: pa.Table | None,
        at_b: np.ndarray,
        bytes_changed: np.ndarray | None,
    ) -> None:
        """Keep, of rows numbered ``numbers``, those among the first: each the row at ``at_a`` in the batch ``a``
        (``None``: not in A, ``at_a`` then only counts them) and the one at ``at_b`` in ``b``, whose files' bytes
        differ (``bytes_changed``)."""
        if self._kept.num_rows >= self._limit:
            last = self._kept.column("number")[-1].as_py() if self._limit else -1
            wanted = numbers < last
        else:
            wanted = np.ones(len(numbers), bool)
        if not wanted.any():
            return
        numbers = numbers[wanted]
        at_a, at_b = at_a[wanted], at_b[wanted]
        columns = [
            _column_at(a, 0, at_a) if a is not None else _column_at(b, 0, at_b),
            _numbers_at(a, at_a),
            _numbers_at(b, at_b),
            _column_at(a, 1, at_a),
            _column_at(b, 1, at_b),
            pa.array(bytes_changed[wanted] if bytes_changed is not None else np.zeros(len(numbers), bool)),
            pa.array(numbers, pa.int64()),
        ]
        offered = pa.Table.from_arrays(columns, schema=_SAMPLE)
        joined = pa.concat_tables([self._kept, offered])
        order = pc.sort_indices(joined, sort_keys=[("number", "ascending")])
        self._kept = joined.take(order.slice(0, self._limit)).combine_chunks()


def _column_at(table: pa.Table | None, column: int, at: np.ndarray) -> pa.Array:
    """Column ``column`` of a list's batch at rows ``at``; nulls where the batch is not given or the list has not
    that column (a list of one column has no labels)."""
    if table is None or column >= table.num_columns - 1:
        return pa.nulls(len(at), pa.string())
    return table.column(column).take(pa.array(at, pa.int64())).combine_chunks()


def _numbers_at(table: pa.Table | None, at: np.ndarray) -> pa.Array:
    if table is None:
        return pa.nulls(len(at), pa.int64())
    return table.column("row").take(pa.array(at, pa.int64())).combine_chunks()


class _LabelCounts:
    """Rows per label of one version: counted in memory while there are at most :data:`LABELS_COUNTED` labels;
    beyond, only how many there are is found, by an external sort of the labels (each batch's distinct labels spilled
    to ``spill``, sorted and counted once the list is read)."""

    def __init__(self, labelled: bool, spill: Path) -> None:
        self._labelled = labelled
        self._spill = spill
        self.counts: Counter[str] | None = Counter()
        self.distinct = 0
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None

    def add(self, table: pa.Table) -> None:
        if not self._labelled:
            return
        if self._writer is not None:
            self._writer.write_table(pa.table([pc.unique(table.column(1).combine_chunks())], schema=_LABELS))
        elif self.counts is not None:
            _count_into(self.counts, table.column(1))
            if len(self.counts) > LABELS_COUNTED:  # from here on, the labels go to disk
                self._spill.mkdir()
                self._writer = pa.ipc.new_stream(str(self._spill / "labels.arrow"), _LABELS)
                self._writer.write_table(pa.table([pa.array(list(self.counts), pa.string())], schema=_LABELS))
                self.counts = None

    def finish(self) -> None:
        if self._writer is None:
            self.distinct = len(self.counts or ())
            return
        self._writer.close()
        with pa.memory_map(str(self._spill / "labels.arrow")) as source:
            batches = (pa.Table.from_batches([batch]) for batch in pa.ipc.open_stream(source))
            self.distinct = _distinct(sorted_tables(batches, self._spill, RUN_ROWS, _LABELS, _BY_LABEL))


_LABELS = pa.schema([pa.field("label", pa.string(), nullable=False)])
_BY_LABEL = [("label", "ascending")]


def _distinct(tables: Iterator[pa.Table]) -> int:
    """How many distinct values a sorted stream of one column holds."""
    count, last = 0, None
    for table in tables:
        values = table.column(0).combine_chunks()
        if not len(values):
            continue
        steps = pc.not_equal(values.slice(1), values.slice(0, len(values) - 1))
        count += (pc.sum(steps).as_py() or 0) + (values[0].as_py() != last)
        last = values[-1].as_py()
    return count


def label_order(label: str) -> tuple[int, int, str]:
    """A sort key that puts labels in the order people expect: numbers by value (``2`` before ``10``), then text."""
    return (0, int(label), "") if label.isascii() and label.isdigit() else (1, 0, label)


# --------------------------------------------------------------------------------------------- by shard


def _rows_in_common_shards(a: Manifest, b: Manifest) -> int:
    """The rows of the shards both versions hold (the same sha256; a shard held twice counts as often as both hold
    it)."""
    rows = {shard.sha256: shard.rows for shard in (*a.shards, *b.shards)}
    common = Counter(shard.sha256 for shard in a.shards) & Counter(shard.sha256 for shard in b.shards)
    return sum(rows[sha] * times for sha, times in common.items())


def _shards_note(a: Manifest, b: Manifest) -> str:
    without = [m for m in (a, b) if not m.has_list]
    what = " and ".join(f"{m.ref} ({_why_no_list(m)})" for m in without)
    return (
        f"{what} {'has' if len(without) == 1 else 'have'} no list: rows cannot be matched one by one without reading "
        "the shards, so they are compared by shard (the rows of a shard both versions hold are unchanged, every "
        "other row counts as removed and added); no labels are counted"
    )


def _why_no_list(m: Manifest) -> str:
    if m.kind is Kind.TABLE:
        return "a table version: its rows are only in its shards"
    if m.name.startswith(PUBLIC_NAMESPACE + "/"):
        return "a public dataset: its rows are only in its shards"
    return "its rows are only in its shards"


def _uncompared_note(a: Manifest, b: Manifest, count: int) -> str:
    return (
        f"{count} files of the same size in both versions could not be compared by content and are counted as "
        f"changed: one version records only their sha256, the other only their xxh3-64 (a version packed by "
        f"`upload --pack` from manifest format 8 records no sha256; {a.ref} is of format {a.format_version}, "
        f"{b.ref} of format {b.format_version})"
    )


def _kind_notes(a: Manifest, b: Manifest) -> list[str]:
    notes = []
    if a.kind != b.kind and a.has_list and b.has_list:
        notes.append(
            f"the kinds differ ({a.kind}, {b.kind}): rows are matched by their first column and compared by their "
            "other columns; no file's bytes are compared"
        )
    if list(a.columns) != list(b.columns):
        notes.append(f"the columns differ: {', '.join(a.columns)} in {a.ref}; {', '.join(b.columns)} in {b.ref}")
    return notes


def _version_json(m: Manifest, files: int) -> dict[str, Any]:
    return {
        "ref": m.ref,
        "dataset": m.name,
        "version": m.version,
        "kind": str(m.kind),
        "columns": list(m.columns),
        "rows": m.rows,
        "files": files,
        "shards": len(m.shards),
        "list": m.has_list,
        "splits": m.splits,
    }
