"""What changed from one version of a dataset to another, from their manifests and lists alone: no file's object and
no shard is read.

Rows are matched by key: an image row by its file's path (its bytes compared by the sha256 the manifest records for
the path, its labels taken from the list), a text row by its first column (its other columns are its labels, so a
changed text row is one with another target). A key listed several times (a path listed twice) is matched occurrence
by occurrence: first the rows that are identical in both versions (same key, labels and bytes), in list order; then
the rest of that key's rows, in list order, as changed pairs; what is left over is removed (only in A) or added (only
in B). So ``added + changed + unchanged`` are B's rows, ``removed + changed + unchanged`` are A's, and moving rows
about changes nothing. Rows are numbered from 0, as readers number them.

A version without a list (a ``table`` version, a public dataset: their rows are only in their shards) cannot be
matched row by row without reading its shards. A pair with such a version is compared by shard: the rows of a shard
both versions hold (the same sha256) are unchanged, every other row counts as removed from A and added in B, and
:attr:`VersionDiff.notes` says so. The manifests' files (an image version's files, a public dataset's attached
files) are compared by path and sha256 in every case.

The work is done on Arrow and numpy arrays: the lists parsed by Arrow's CSV reader, keys and rows replaced by
dictionary codes shared by both versions (:mod:`._matching`), the manifests' files compared as their JSON text
holds them (:mod:`._file_changes`) (``benchmarks/bench_diff.py`` measures pairs of a million
rows).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from datamount.datasets import catalog, layout
from datamount.datasets._file_changes import FileChanges, compare_files
from datamount.datasets._matching import ADDED, CHANGED, REMOVED, UNCHANGED, Matched, match_lists
from datamount.datasets.errors import ManifestError
from datamount.datasets.manifest import Kind, Manifest
from datamount.datasets.names import PUBLIC_NAMESPACE
from datamount.datasets.rows.listed import list_rows
from datamount.storage import IntegrityError, Store
from datamount.storage.arguments import one_of, whole_number

__all__ = ["CATEGORIES", "DIFF_FORMAT", "DiffRow", "FileCounts", "VersionDiff", "diff_versions", "label_order"]

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
    (changed, by sha256) or the same (unchanged)."""

    added: int = 0
    removed: int = 0
    changed: int = 0
    unchanged: int = 0


@dataclass(frozen=True)
class _Listed:
    """A version's list as Arrow string arrays, one per column (the first the rows' keys)."""

    manifest: Manifest
    columns: list[pa.ChunkedArray]

    @property
    def keys(self) -> pa.ChunkedArray:
        return self.columns[0]

    @property
    def labels(self) -> pa.ChunkedArray | None:
        """The second column (``None`` for a list of one column)."""
        return self.columns[1] if len(self.columns) > 1 else None


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
        The manifests' files compared by path and sha256.
    notes
        What could not be compared, and why, in sentences.
    """

    def __init__(
        self,
        a: Manifest,
        b: Manifest,
        *,
        listed: tuple[_Listed, _Listed] | None,
        matched: Matched | None,
        files: FileChanges,
        notes: list[str],
    ) -> None:
        self._a, self._b = a, b
        self._listed = listed
        self._matched = matched
        self.a_ref, self.b_ref = a.ref, b.ref
        self.kind_a, self.kind_b = str(a.kind), str(b.kind)
        self.columns_a, self.columns_b = list(a.columns), list(b.columns)
        self.rows_a, self.rows_b = a.rows, b.rows
        self.files = FileCounts(files.added, files.removed, files.changed, files.unchanged)
        self._file_entries = files.entries
        self.notes = notes
        self.compared: Compared = "rows" if matched is not None else "shards"
        if matched is not None:
            self.unchanged = int(np.count_nonzero(matched.status_a == UNCHANGED))
            self.changed = int(np.count_nonzero(matched.status_a == CHANGED))
            self.removed = int(np.count_nonzero(matched.status_a == REMOVED))
            self.added = int(np.count_nonzero(matched.status_b == ADDED))
            self.changed_bytes = int(np.count_nonzero(matched.bytes_differ_a))
            self.changed_labels = int(np.count_nonzero(matched.labels_differ_a))
        else:
            self.unchanged = _rows_in_common_shards(a, b)
            self.changed = self.changed_bytes = self.changed_labels = 0
            self.removed, self.added = a.rows - self.unchanged, b.rows - self.unchanged

    @functools.cached_property
    def _label_counts(self) -> tuple[pa.StructArray | None, pa.StructArray | None]:
        if self._listed is None:
            return None, None
        first, second = (None if side.labels is None else pc.value_counts(side.labels) for side in self._listed)
        return first, second

    @property
    def distinct_labels_a(self) -> int:
        """How many labels A's rows have (0 without labels)."""
        counts = self._label_counts[0]
        return 0 if counts is None else len(counts)

    @property
    def distinct_labels_b(self) -> int:
        """How many labels B's rows have (0 without labels)."""
        counts = self._label_counts[1]
        return 0 if counts is None else len(counts)

    @functools.cached_property
    def label_counts_a(self) -> dict[str, int]:
        return _as_dict(self._label_counts[0])

    @functools.cached_property
    def label_counts_b(self) -> dict[str, int]:
        return _as_dict(self._label_counts[1])

    def sample_rows(self, category: Category, limit: int) -> list[DiffRow]:
        """The first ``limit`` rows of ``category`` (``"added"``, ``"removed"`` or ``"changed"``), in list order (of
        B for added rows, of A for the others); none when the versions were compared by shard."""
        one_of(category, "category", CATEGORIES)
        limit = whole_number(limit, "limit", minimum=0)
        if self._listed is None or self._matched is None:
            return []
        first, second = self._listed
        matched = self._matched
        if category == "added":
            rows = np.flatnonzero(matched.status_b == ADDED)[:limit]
            return [DiffRow(_at(second.keys, i), None, i, None, _label(second, i)) for i in rows.tolist()]
        wanted = REMOVED if category == "removed" else CHANGED
        rows = np.flatnonzero(matched.status_a == wanted)[:limit]
        found = []
        for i in rows.tolist():
            partner = int(matched.partner_a[i])
            if partner < 0:
                found.append(DiffRow(_at(first.keys, i), i, None, _label(first, i), None))
                continue
            label_b = _label(second, partner)
            bytes_changed = bool(matched.bytes_differ_a[i])
            found.append(DiffRow(_at(first.keys, i), i, partner, _label(first, i), label_b, bytes_changed))
        return found

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


def diff_versions(store: Store, a: str, b: str) -> VersionDiff:
    """What changed from version ``a`` to version ``b`` (``name`` or ``name@N`` each, resolved as
    :func:`~datamount.datasets.catalog.resolve` does: a plain name is the latest version; ``b`` may be another
    dataset), read from their manifests and lists alone. The rules are in this module's docstring."""
    return diff_manifests(store, catalog.resolve(store, a), catalog.resolve(store, b))


def diff_manifests(store: Store, first: Manifest, second: Manifest) -> VersionDiff:
    """What changed from version ``first`` to version ``second``, both resolved already (:func:`diff_versions`)."""
    notes = _kind_notes(first, second)
    if not (first.has_list and second.has_list):
        notes.append(_shards_note(first, second))
        files = compare_files(first.files, second.files, decode=True)  # the text's cut is checked by a list's paths
        return VersionDiff(first, second, listed=None, matched=None, files=files, notes=notes)
    listed = _read_lists(store, first, second)
    columns = listed[0].columns, listed[1].columns
    if not (first.kind is Kind.IMAGE and second.kind is Kind.IMAGE):
        matched, _ = match_lists(*columns)
        files = compare_files(first.files, second.files, decode=True)
        return VersionDiff(first, second, listed=listed, matched=matched, files=files, notes=notes)
    changes = compare_files(first.files, second.files)
    matched, distinct = match_lists(*columns, changes.changed_paths)
    if changes.entries != distinct:  # not one file per path of the list: the manifests' text was not cut right
        changes = compare_files(first.files, second.files, decode=True)
        matched, _ = match_lists(*columns, changes.changed_paths)
    return VersionDiff(first, second, listed=listed, matched=matched, files=changes, notes=notes)


# --------------------------------------------------------------------------------------------- the lists


def _read_lists(store: Store, a: Manifest, b: Manifest) -> tuple[_Listed, _Listed]:
    """Both versions' lists, read at once (once, when they are the same list), each checked against its sha256."""
    paths = [layout.list_path(a), layout.list_path(b)]
    if paths[0] == paths[1]:
        raw = store.read(paths[0])
        blobs = [raw, raw]
    else:
        blobs = list(store.read_many(paths))
    return _listed(store, a, blobs[0]), _listed(store, b, blobs[1])


def _listed(store: Store, manifest: Manifest, raw: bytes) -> _Listed:
    where = store.url_for(layout.list_path(manifest))
    if hashlib.sha256(raw).hexdigest() != manifest.list_sha256:
        raise IntegrityError(f"the list of {manifest.ref} ({where}) does not match its manifest's sha256")
    return _Listed(manifest, _list_columns(raw, len(manifest.columns), where))


def _list_columns(raw: bytes, width: int, where: str) -> list[pa.ChunkedArray]:
    """The columns of a normalised list (UTF-8 lines of TAB-separated values, no quoting) as string arrays."""
    if not raw or b"\r" in raw:  # Arrow's CSV reader would also end a row at a CR inside a value
        rows = list_rows(raw)
        if any(len(row) != width for row in rows):
            raise ManifestError(f"{where} is damaged: a row does not have {width} column(s)")
        return [pa.chunked_array([pa.array([row[i] for row in rows], pa.string())]) for i in range(width)]
    names = [f"c{i}" for i in range(width)]
    try:
        table = pcsv.read_csv(
            io.BytesIO(raw),
            read_options=pcsv.ReadOptions(column_names=names),
            parse_options=pcsv.ParseOptions(delimiter="\t", quote_char=False),
            convert_options=pcsv.ConvertOptions(column_types=dict.fromkeys(names, pa.string())),
        )
    except pa.ArrowInvalid as exc:
        raise ManifestError(f"{where} is damaged: {exc}") from None
    return [table.column(i) for i in range(width)]


def _at(values: pa.ChunkedArray, row: int) -> str:
    return str(values[row].as_py())


def _label(listed: _Listed, row: int) -> str | None:
    return None if listed.labels is None else _at(listed.labels, row)


def _as_dict(counts: pa.StructArray | None) -> dict[str, int]:
    if counts is None:
        return {}
    pairs = zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True)
    return dict(sorted(pairs, key=lambda pair: label_order(pair[0])))


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
