"""Matching the rows of two lists by key, on Arrow and numpy arrays (the rules: :mod:`datamount.datasets.diff`).

Strings are hashed once, into dictionary codes shared by both versions (equal strings, equal codes); everything after
is integer arithmetic on numpy arrays, and strings are only compared again pairwise (``take`` and ``equal``). When no
key is listed twice in either version, which is the common case, each key has at most one row on each side and the
rows are paired through their keys' codes; otherwise whole rows are coded too and matched occurrence by occurrence
(:func:`match_codes`).

Lists sorted by key are matched a batch at a time (:func:`key_batches` cuts them between keys): the rules apply key by
key, so a batch that holds every row of its keys is matched as the whole lists would be, and its rows keep their
order within a key.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# What became of a row.
UNCHANGED, CHANGED, REMOVED, ADDED = 0, 1, 2, 3

Columns = Sequence[pa.ChunkedArray]


@dataclass(frozen=True)
class Matched:
    """What became of each row of A (``UNCHANGED``, ``CHANGED``, ``REMOVED``) and of B (``UNCHANGED``, ``CHANGED``,
    ``ADDED``); for each changed A row, the B row it is paired with (``-1`` for the others) and whether their files'
    bytes and their labels differ."""

    status_a: np.ndarray
    status_b: np.ndarray
    partner_a: np.ndarray
    bytes_differ_a: np.ndarray
    labels_differ_a: np.ndarray


def match_lists(a: Columns, b: Columns, changed_paths: pa.Array | None = None) -> tuple[Matched, tuple[int, int]]:
    """Match the rows of two lists (their columns, the first the key) by key; for image rows (whose key is their
    file's path), ``changed_paths`` are the paths whose files have other bytes in B. Return the matching and how
    many distinct keys each list has."""
    extra = [changed_paths] if changed_paths is not None else []
    (keys_a, keys_b, *changed), keys = codes(a[0], b[0], *(pa.chunked_array([paths]) for paths in extra))
    differ = np.zeros(len(keys), bool)
    if changed:
        differ[changed[0]] = True
    per_key_a = np.bincount(keys_a, minlength=len(keys))
    per_key_b = np.bincount(keys_b, minlength=len(keys))
    if per_key_a.max(initial=0) <= 1 and per_key_b.max(initial=0) <= 1:
        status_a, status_b, partner_a = _match_unique_keys(a, b, keys_a, keys_b, differ)
    else:
        rows_a, rows_b = _row_codes(a, b, keys_b, differ)
        status_a, status_b, partner_a = match_codes(keys_a, keys_b, rows_a, rows_b)
    paired = np.flatnonzero(partner_a >= 0)
    labels_differ = np.zeros(len(keys_a), bool)
    labels_differ[paired] = ~_labels_equal(a, b, paired, partner_a[paired])
    bytes_differ = differ[keys_a] & (partner_a >= 0)
    distinct = (int(np.count_nonzero(per_key_a)), int(np.count_nonzero(per_key_b)))
    return Matched(status_a, status_b, partner_a, bytes_differ, labels_differ), distinct


def _match_unique_keys(
    a: Columns, b: Columns, keys_a: np.ndarray, keys_b: np.ndarray, differ: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`match_codes` for lists whose keys are each listed once: a key's rows in A and B are a pair, identical
    when their labels and bytes are."""
    row_b = np.full(len(differ), -1, np.int64)
    row_b[keys_b] = np.arange(len(keys_b))
    partner = row_b[keys_a]
    paired = np.flatnonzero(partner >= 0)
    same = _labels_equal(a, b, paired, partner[paired]) & ~differ[keys_a[paired]]
    status_a = np.full(len(keys_a), REMOVED, np.uint8)
    status_b = np.full(len(keys_b), ADDED, np.uint8)
    status_a[paired] = status_b[partner[paired]] = np.where(same, UNCHANGED, CHANGED)
    partner_a = np.full(len(keys_a), -1, np.int64)
    partner_a[paired[~same]] = partner[paired[~same]]
    return status_a, status_b, partner_a


def _row_codes(a: Columns, b: Columns, keys_b: np.ndarray, differ: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes of whole rows, equal for identical rows: the same line, and (for a B row) the same bytes as A's file of
    that path: a B row whose file's bytes differ gets a code no A row has."""
    (lines_a, lines_b), lines = codes(_lines(a), _lines(b))
    return lines_a, lines_b + len(lines) * differ[keys_b]


def _lines(columns: Columns) -> pa.ChunkedArray:
    """Each row's columns joined by TABs, as its list holds it."""
    return columns[0] if len(columns) == 1 else pc.binary_join_element_wise(*columns, "\t")


def _labels_equal(a: Columns, b: Columns, rows_a: np.ndarray, rows_b: np.ndarray) -> np.ndarray:
    """Whether each row of ``rows_a`` in A has the labels (every column but the first) of its row in ``rows_b`` in
    B; never, when the lists have different columns."""
    if len(a) != len(b):
        return np.zeros(len(rows_a), bool)
    alike = np.ones(len(rows_a), bool)
    for column_a, column_b in zip(a[1:], b[1:], strict=True):
        alike &= equal(column_a.take(rows_a), column_b.take(rows_b))
    return alike


def equal(first: pa.ChunkedArray, second: pa.ChunkedArray) -> np.ndarray:
    """Whether each string of ``first`` equals the one at its place in ``second``."""
    return np.asarray(pc.equal(first, second).to_numpy(zero_copy_only=False), bool) if len(first) else np.zeros(0, bool)


def codes(*arrays: pa.ChunkedArray) -> tuple[list[np.ndarray], pa.Array]:
    """Dictionary codes of the values of each of ``arrays``, from one dictionary for all (equal values, equal codes),
    and the dictionary."""
    joined = pa.chunked_array([chunk for array in arrays for chunk in array.chunks], type=arrays[0].type)
    encoded = pc.dictionary_encode(joined)
    if not encoded.chunks:
        return [np.zeros(0, np.int64) for _ in arrays], pa.array([], arrays[0].type)
    found = np.concatenate([chunk.indices.to_numpy() for chunk in encoded.chunks]).astype(np.int64)
    bounds = np.cumsum([0, *(len(array) for array in arrays)])
    return [found[start:stop] for start, stop in itertools.pairwise(bounds)], encoded.chunks[0].dictionary


def match_codes(
    keys_a: np.ndarray, keys_b: np.ndarray, rows_a: np.ndarray, rows_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Match rows given as codes: each row's key, and its whole value (equal codes: identical rows, which have equal
    keys). Return what became of each row of A (unchanged, changed, removed) and of B (unchanged, changed, added),
    and for each changed A row the B row it is paired with (``-1`` for the others).

    The k-th occurrence of an identical row in A is matched with its k-th occurrence in B; the rows left of one key
    are then paired in list order, the k-th left in A with the k-th left in B.
    """
    count_a = np.bincount(rows_a, minlength=_size(rows_a, rows_b))
    count_b = np.bincount(rows_b, minlength=len(count_a))
    same_a = occurrences(rows_a, count_a) < count_b[rows_a]
    same_b = occurrences(rows_b, count_b) < count_a[rows_b]
    left_a, left_b = np.flatnonzero(~same_a), np.flatnonzero(~same_b)
    key_count = _size(keys_a, keys_b)
    per_key_a = np.bincount(keys_a[left_a], minlength=key_count)
    per_key_b = np.bincount(keys_b[left_b], minlength=key_count)
    rank_a = occurrences(keys_a[left_a], per_key_a)
    rank_b = occurrences(keys_b[left_b], per_key_b)
    paired_a = rank_a < per_key_b[keys_a[left_a]]
    paired_b = rank_b < per_key_a[keys_b[left_b]]
    status_a = np.full(len(rows_a), UNCHANGED, np.uint8)
    status_b = np.full(len(rows_b), UNCHANGED, np.uint8)
    status_a[left_a] = np.where(paired_a, CHANGED, REMOVED)
    status_b[left_b] = np.where(paired_b, CHANGED, ADDED)
    # The k-th changed pair of a key sits at that key's first slot plus k, on both sides.
    pairs = np.minimum(per_key_a, per_key_b)
    first_slot = np.cumsum(pairs) - pairs
    b_in_slot = np.empty(int(pairs.sum()), np.int64)
    b_in_slot[first_slot[keys_b[left_b[paired_b]]] + rank_b[paired_b]] = left_b[paired_b]
    partner_a = np.full(len(rows_a), -1, np.int64)
    partner_a[left_a[paired_a]] = b_in_slot[first_slot[keys_a[left_a[paired_a]]] + rank_a[paired_a]]
    return status_a, status_b, partner_a


def occurrences(codes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """For each code, how many equal codes come before it (``counts``: how many there are of each code)."""
    if len(codes) == 0 or counts.max() <= 1:
        return np.zeros(len(codes), np.int64)
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    group_start = np.repeat(starts, np.diff(np.append(starts, len(codes))))
    ranks = np.empty(len(codes), np.int64)
    ranks[order] = np.arange(len(codes)) - group_start
    return ranks


def _size(first: np.ndarray, second: np.ndarray) -> int:
    return int(max(first.max(initial=-1), second.max(initial=-1))) + 1


# --------------------------------------------------------------------------------------------- sorted streams


def key_batches(streams: Sequence[tuple[Iterator[pa.Table], pa.Schema]], rows: int) -> Iterator[list[pa.Table]]:
    """Tables sorted by their first column (each stream's tables of its schema), merged into batches cut at keys:
    each batch holds, of every stream, the rows of the keys before a bound, so that all rows of a key, in every
    stream, are in one batch. About ``rows`` rows of each stream are taken at a time, more when one key has more."""
    held = [_Held(tables, schema, rows) for tables, schema in streams]
    while True:
        for stream in held:
            stream.fill()
        if all(stream.done and not stream.held.num_rows for stream in held):
            return
        open_lasts = [stream.last() for stream in held if not stream.done]
        bound = min(open_lasts) if open_lasts else None  # None: every stream read to its end, take the rest
        taken = [stream.take_before(bound) for stream in held]
        if any(table.num_rows for table in taken):
            yield taken
            continue
        for stream in held:  # every row held is of the bound's key or after it: read on where the bound's key ends
            if not stream.done and stream.last() == bound:
                stream.grow()


class _Held:
    """One sorted stream's rows read and not yet taken."""

    def __init__(self, tables: Iterator[pa.Table], schema: pa.Schema, rows: int) -> None:
        self._tables = tables
        self._rows = rows
        self.held = schema.empty_table()
        self.done = False

    def fill(self) -> None:
        """Read tables until ``rows`` are held, or the stream ends."""
        while not self.done and self.held.num_rows < self._rows:
            self.grow()

    def grow(self) -> None:
        """Read one more table (with rows), or find the stream's end."""
        while (following := next(self._tables, None)) is not None:
            if following.num_rows:
                self.held = pa.concat_tables([self.held, following]) if self.held.num_rows else following
                return
        self.done = True

    def last(self) -> str:
        return str(self.held.column(0)[-1].as_py())

    def take_before(self, bound: str | None) -> pa.Table:
        """The rows held whose key sorts before ``bound`` (all of them for ``None``)."""
        count = self.held.num_rows if bound is None else pc.sum(pc.less(self.held.column(0), bound)).as_py() or 0
        taken, self.held = self.held.slice(0, count), self.held.slice(count)
        return taken
