"""Two versions' files compared by path and content, from their manifests (for :mod:`datamount.datasets.diff`).

Two entries of one path hold the same bytes by :func:`~datamount.datasets.file_entry.same_content`: the same size,
and the same sha256 where both record one, else the same xxh3-64 (a file held only in shards records no sha256 from
format 8); here that rule is applied to whole columns at once (:func:`_differ`).

A manifest of a million files is a hundred megabytes of JSON; decoding both into Python objects costs more than the
rest of a diff. So the entries are compared as the JSON text holds them first: an entry is an array whose first item
is a string, and no JSON string holds an unquoted ``"``, so ``],["`` occurs only between two entries, and the text
is cut there (in Arrow, without decoding it). Entries with the same text in both versions are the same file; only
the others are decoded and compared by path. Where the files are decoded already, or their text is laid out
otherwise (datamount writes it without spaces), they are compared decoded.

From format 6 the entries are not in the manifest but in parts sorted by path (:mod:`datamount.datasets.file_parts`):
two versions' parts are merged by path a part of each at a time (:class:`PartsMerge`), whatever their number.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datamount.datasets._matching import codes, equal, key_batches
from datamount.datasets.file_parts import FileParts
from datamount.datasets.manifest import FileEntry, FileList, collector_paused

#: What the JSON text holds between two entries, and around all of them.
_BETWEEN, _OPENING, _CLOSING = b'],["', b'[["', b'"]]'


@dataclass(frozen=True)
class FileChanges:
    """The files of two versions by path: in B only (added), in A only (removed), in both with other bytes
    (changed: their paths in ``changed_paths``) or the same (unchanged); and how many entries each manifest was
    found to have (``cut`` from the JSON text: one per piece of text, which the caller checks). Of the changed,
    ``uncompared`` are files of one size whose entries record no digest in common (one side's sha256 alone, the
    other's xxh3-64 alone): counted as changed, which :attr:`~datamount.datasets.diff.VersionDiff.notes` says."""

    added: int
    removed: int
    changed: int
    unchanged: int
    changed_paths: pa.Array
    entries: tuple[int, int]
    cut: bool = False
    uncompared: int = 0


def compare_files(first: Sequence[FileEntry], second: Sequence[FileEntry], *, decode: bool = False) -> FileChanges:
    """Compare the files of two manifests by path; ``decode`` the entries of both rather than cut their text."""
    texts = (None, None) if decode else (_entry_texts(first), _entry_texts(second))
    if texts[0] is None or texts[1] is None:
        return _by_path(list(first), list(second), alike=0, entries=(len(first), len(second)))
    (codes_a, codes_b), dictionary = codes(texts[0], texts[1])
    in_a = np.bincount(codes_a, minlength=len(dictionary)) > 0
    in_b = np.bincount(codes_b, minlength=len(dictionary)) > 0
    alike_a, alike_b = in_b[codes_a], in_a[codes_b]
    rest_a = _decoded(texts[0].filter(pa.array(~alike_a)))
    rest_b = _decoded(texts[1].filter(pa.array(~alike_b)))
    found = _by_path(rest_a, rest_b, alike=int(np.count_nonzero(alike_a)), entries=(len(codes_a), len(codes_b)))
    return dataclasses.replace(found, cut=True)


def _entry_texts(files: Sequence[FileEntry]) -> pa.ChunkedArray | None:
    """Each file's entry as the manifest's JSON text holds it, less the brackets around it (``path",size,"sha256"``,
    and the xxh3-64 after); ``None`` when the files are decoded already or their text is laid out otherwise."""
    raw = files.stored_json() if isinstance(files, FileList) else None
    if raw is None or not (raw.startswith(_OPENING) and raw.endswith(_CLOSING)):
        return None
    # One binary value over the stored bytes, no copy: from the first entry's path to the last entry's closing quote.
    bounds = pa.py_buffer(np.array([len(_OPENING), len(raw) - 2], np.int64))
    inner = pa.Array.from_buffers(pa.large_binary(), 1, [None, bounds, pa.py_buffer(raw)])
    return pa.chunked_array([pc.split_pattern(inner, _BETWEEN).flatten()])


def _decoded(texts: pa.ChunkedArray) -> list[FileEntry]:
    """The entries whose texts (as :func:`_entry_texts` cut them) are ``texts``."""
    if not len(texts):
        return []
    with collector_paused():
        joined = _OPENING + _BETWEEN.join(texts.to_pylist()) + b"]]"
        return msgspec.json.decode(joined, type=list[FileEntry])


def _by_path(first: list[FileEntry], second: list[FileEntry], *, alike: int, entries: tuple[int, int]) -> FileChanges:
    """Compare decoded entries by path; ``alike`` more files were found the same already."""
    with collector_paused():  # a million strings, no cycles: see collector_paused
        found = _compared(_columns(first), _columns(second))
    return dataclasses.replace(found, unchanged=alike + found.unchanged, entries=entries)


def _columns(entries: Sequence[FileEntry]) -> pa.Table:
    """The paths, sizes, sha256s and xxh3-64s of ``entries`` (a table of :data:`_ENTRIES`; a digest not recorded
    is null)."""
    paths = pa.array([entry[0] for entry in entries], pa.string())
    sizes = pa.array([entry[1] for entry in entries], pa.int64())
    shas = pa.array([bytes.fromhex(entry[2]) if entry[2] else None for entry in entries], pa.binary(32))
    checks = pa.array([bytes.fromhex(entry[3]) if entry[3] else None for entry in entries], pa.binary(8))
    return pa.Table.from_arrays([paths, sizes, shas, checks], schema=_ENTRIES)


def _compared(first: pa.Table, second: pa.Table) -> FileChanges:
    """Entries (tables of :data:`_ENTRIES`, each path once on each side) compared by path; the changed paths in the
    order of A's."""
    (codes_a, codes_b), paths = codes(first.column("path"), second.column("path"))
    at_a, at_b = np.full(len(paths), -1, np.int64), np.full(len(paths), -1, np.int64)
    at_a[codes_a], at_b[codes_b] = np.arange(len(codes_a)), np.arange(len(codes_b))
    both = np.flatnonzero((at_a >= 0) & (at_b >= 0))
    differ, uncompared = _differ(first.take(at_a[both]), second.take(at_b[both]))
    changed = int(np.count_nonzero(differ))
    return FileChanges(
        added=int(np.count_nonzero(at_a < 0)),
        removed=int(np.count_nonzero(at_b < 0)),
        changed=changed,
        unchanged=len(both) - changed,
        changed_paths=paths.take(pa.array(both[differ])) if len(paths) else pa.array([], pa.string()),
        entries=(len(codes_a), len(codes_b)),
        uncompared=uncompared,
    )


def _differ(first: pa.Table, second: pa.Table) -> tuple[np.ndarray, int]:
    """Whether each entry of ``first`` holds other bytes than the one at its place in ``second`` (the rule of
    :func:`~datamount.datasets.file_entry.same_content`, over columns), and how many of them are of one size and
    share no digest."""
    if not first.num_rows:
        return np.zeros(0, bool), 0

    def recorded(name: str) -> np.ndarray:
        return np.asarray(
            pc.and_(pc.is_valid(first.column(name)), pc.is_valid(second.column(name))).to_numpy(zero_copy_only=False)
        )

    def unequal(name: str) -> np.ndarray:
        same = pc.fill_null(pc.equal(first.column(name), second.column(name)), False)
        return ~np.asarray(same.to_numpy(zero_copy_only=False), bool)

    by_sha, by_xxh3 = recorded("sha256"), recorded("xxh3")
    sized = ~equal(first.column("size"), second.column("size"))
    neither = ~by_sha & ~by_xxh3
    differ = sized | np.where(by_sha, unequal("sha256"), np.where(by_xxh3, unequal("xxh3"), True))
    return differ, int(np.count_nonzero(neither & ~sized))


# --------------------------------------------------------------------------------------------- in parts

#: A stream of paths, sorted (the changed files' paths).
PATHS = pa.schema([pa.field("path", pa.string(), nullable=False)])
_ENTRIES = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("sha256", pa.binary(32)),
        pa.field("xxh3", pa.binary(8)),
    ]
)


class PartsMerge:
    """The files of two versions whose entries are in parts (format 6 on: sorted by path), compared by path a part
    of each at a time: :meth:`changed_paths` gives the paths whose bytes differ, in path order, and counts the rest;
    :meth:`changes` is the result once they are all given. Nothing is held beyond a part of each version and about
    ``rows`` entries of each compared at once."""

    def __init__(self, first: FileParts, second: FileParts, rows: int) -> None:
        self._first, self._second = first, second
        self._rows = rows
        self._counts = [0, 0, 0, 0, 0]  # added, removed, changed, unchanged, uncompared
        self._done = False

    def changed_paths(self) -> Iterator[pa.Table]:
        """The changed files' paths, as tables of :data:`PATHS`, sorted."""
        streams = [(_part_tables(self._first), _ENTRIES), (_part_tables(self._second), _ENTRIES)]
        for taken_a, taken_b in key_batches(streams, self._rows):
            found = _compared(taken_a, taken_b)
            for i, count in enumerate((found.added, found.removed, found.changed, found.unchanged, found.uncompared)):
                self._counts[i] += count
            yield pa.Table.from_arrays([found.changed_paths], schema=PATHS)
        self._done = True

    def changes(self) -> FileChanges:
        """The files compared (all of :meth:`changed_paths` read first, if it was not); no ``changed_paths``."""
        if not self._done:
            collections.deque(self.changed_paths(), maxlen=0)
        added, removed, changed, unchanged, uncompared = self._counts
        entries = (len(self._first), len(self._second))
        return FileChanges(
            added, removed, changed, unchanged, pa.array([], pa.string()), entries, uncompared=uncompared
        )


def _part_tables(files: FileParts) -> Iterator[pa.Table]:
    """The paths, sizes and digests of ``files``, a part at a time, in path order."""
    for number in range(len(files.parts)):
        yield pa.Table.from_arrays(list(files.part_digests(number)), schema=_ENTRIES)
