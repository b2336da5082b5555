"""Turn samples into batches for :class:`~datamount.readers.DataLoader`: one value per column.

Collation rules, applied to each column of a batch:

- numpy arrays that all have the same shape and dtype are stacked into one array (batch axis first); arrays
  that differ in shape or dtype stay a ``list`` of arrays (no padding, no silent promotion);
- numbers (``bool``, ``int``, ``float``, ``complex``, numpy scalars) and nested lists of numbers become an
  array with numpy's usual dtype (``int`` -> ``int64``, ``float`` -> ``float64``, ``bool`` -> ``bool``);
- ``bytes`` and ``str`` stay a ``list`` of Python objects: numpy's ``S`` dtype drops trailing NUL bytes, so an
  array would not hold raw file bytes exactly;
- anything else (``None``, ragged lists, mixed columns, arbitrary objects) stays a ``list``.

The batch sources are small module-level classes so that spawn workers can take them by pickling.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from operator import itemgetter
from typing import Any

import numpy as np

from datamount.readers.workers import Reader, close_iterator

Column = np.ndarray | list[Any]

# Kinds of dtype a column of numbers may end up with; anything else (strings, objects) means "keep a list".
_NUMERIC_KINDS = frozenset("biufcmM")
_SCALAR_TYPES = (bool, int, float, complex, np.generic)
_TEXT_TYPES = (str, bytes, bytearray, memoryview)
_SAMPLE_TYPES = frozenset((tuple, list))


def collate_column(values: Sequence[Any]) -> Column:
    """Collate the values of one column (one per sample) following the module's rules."""
    if not values:
        return []
    first = values[0]
    if isinstance(first, np.ndarray):
        return _stack_arrays(values, first)
    if isinstance(first, _TEXT_TYPES):
        return list(values)
    if isinstance(first, (*_SCALAR_TYPES, list, tuple)):
        return _numeric_array(values)
    return list(values)


def _stack_arrays(values: Sequence[Any], first: np.ndarray) -> Column:
    shape, dtype = first.shape, first.dtype
    for value in values:
        if not isinstance(value, np.ndarray) or value.shape != shape or value.dtype != dtype:
            return list(values)
    return np.stack(values)


def _numeric_array(values: Sequence[Any]) -> Column:
    try:
        array = np.asarray(values)
    except (ValueError, TypeError, OverflowError):
        return list(values)
    if array.dtype.kind not in _NUMERIC_KINDS:
        return list(values)
    return array


def collate_samples(samples: Sequence[Any]) -> list[Column]:
    """Collate a list of samples (each a tuple or list of fields) into a list of columns."""
    if not samples:
        return []
    # The checks run over the whole batch at C speed; the per-sample loops only run to name the culprit.
    if not _SAMPLE_TYPES.issuperset(map(type, samples)):
        _check_sample_types(samples)
    widths = set(map(len, samples))
    if len(widths) > 1:
        _raise_width_mismatch(samples)
    return [collate_column(list(map(itemgetter(field), samples))) for field in range(widths.pop())]


def _check_sample_types(samples: Sequence[Any]) -> None:
    for index, sample in enumerate(samples):
        if not isinstance(sample, (tuple, list)):
            raise TypeError(
                f"sample {index} of a batch is a {type(sample).__name__}; a reader must yield each sample as "
                "a tuple of fields, e.g. `yield image, label` (or `yield (x,)` for a single field)"
            )


def _raise_width_mismatch(samples: Sequence[Any]) -> None:
    width = len(samples[0])
    for index, sample in enumerate(samples):
        if len(sample) != width:
            raise ValueError(
                f"sample {index} of a batch has {len(sample)} fields but sample 0 has {width}; every sample "
                "must have the same fields"
            )


def batch_columns(batch: Any, number: int) -> list[Column]:
    """Check and normalise one batch from a batch reader: arrays are kept, lists are collated."""
    if not isinstance(batch, (tuple, list)):
        raise TypeError(
            f"batch {number} is a {type(batch).__name__}; a batch reader must yield a tuple of columns, e.g. "
            "`yield images, labels` (or `yield (x,)` for a single column)"
        )
    columns: list[Column] = []
    for index, column in enumerate(batch):
        if isinstance(column, np.ndarray):
            columns.append(column)
        elif isinstance(column, (tuple, list)):
            columns.append(collate_column(column))
        else:
            raise TypeError(
                f"column {index} of batch {number} is a {type(column).__name__}; each column of a batch must "
                "be an array or a list with one value per sample"
            )
    return columns


class SampleBatches:
    """Batch source over a sample reader: groups ``batch_size`` samples and collates them."""

    def __init__(self, reader: Reader, batch_size: int, drop_last: bool) -> None:
        self.reader = reader
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __call__(self) -> Iterator[list[Column]]:
        size = self.batch_size
        samples = iter(self.reader())
        try:
            while len(pending := list(islice(samples, size))) == size:
                yield collate_samples(pending)
            if pending and not self.drop_last:
                yield collate_samples(pending)
        finally:
            close_iterator(samples)

    def __repr__(self) -> str:
        return f"SampleBatches({self.reader!r}, batch_size={self.batch_size}, drop_last={self.drop_last})"


class _BatchPerItem:
    """Batch source over a reader that yields one batch per item, each turned into columns by ``_columns``."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    def __call__(self) -> Iterator[list[Column]]:
        for number, item in enumerate(self.reader()):
            yield self._columns(item, number)

    @staticmethod
    def _columns(item: Any, number: int) -> list[Column]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reader!r})"


class SampleListBatches(_BatchPerItem):
    """Batch source over a reader that yields lists of samples, one list per batch."""

    @staticmethod
    def _columns(item: Any, number: int) -> list[Column]:
        if not isinstance(item, (list, tuple)) or not item:
            found = f"a {type(item).__name__}" if item else "an empty list"
            raise TypeError(
                f"item {number} of a sample-list reader is {found}; it must yield non-empty lists of "
                "samples, e.g. `yield [(image, label), (image, label)]`"
            )
        return collate_samples(item)


class ReadyBatches(_BatchPerItem):
    """Batch source over a reader that already yields batches (tuples of columns)."""

    @staticmethod
    def _columns(item: Any, number: int) -> list[Column]:
        return batch_columns(item, number)
