"""The Paddle-compatible decorators that run in the consumer's thread, each a small picklable reader class and the
function that checks its arguments and builds it."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice, zip_longest
from typing import Any, Generic, TypeVar

from datamount.datasets.reader_creator import ReaderCreator
from datamount.readers.errors import ComposeNotAligned
from datamount.readers.workers import (
    END_OF_STREAM,
    EpochLock,
    Reader,
    check_reader,
    close_iterator,
)
from datamount.storage import arguments

T = TypeVar("T")
U = TypeVar("U")


def _open_all(readers: Sequence[Reader[Any]]) -> list[Iterator[Any]]:
    """Call every reader; if one fails, close the iterators already opened."""
    iterators: list[Iterator[Any]] = []
    try:
        for reader in readers:
            iterators.append(iter(reader()))
    except BaseException:
        _close_all(iterators)
        raise
    return iterators


def _close_all(iterators: Sequence[Iterator[Any]]) -> None:
    for iterator in iterators:
        close_iterator(iterator)


# ---------------------------------------------------------------------------------------------------- batch


@dataclass(frozen=True, eq=False)
class _BatchReader(ReaderCreator, Generic[T]):
    MADE_BY = "batch(...)"

    reader: Reader[T]
    batch_size: int
    drop_last: bool

    def __call__(self) -> Iterator[list[T]]:
        size = self.batch_size
        iterator = iter(self.reader())
        try:
            while len(chunk := list(islice(iterator, size))) == size:
                yield chunk
            if chunk and not self.drop_last:
                yield chunk
        finally:
            close_iterator(iterator)


def batch(reader: Reader[T], batch_size: int, drop_last: bool = False) -> Reader[list[T]]:
    """Group the samples of ``reader`` into lists of ``batch_size``.

    Parameters
    ----------
    reader : Reader
        The reader to batch.
    batch_size : int
        Samples per batch, at least 1.
    drop_last : bool
        Drop the last batch if it is shorter than ``batch_size``.

    Returns
    -------
    Reader
        A reader of lists of samples.

    Raises
    ------
    ValueError
        At decoration time, if ``batch_size`` is not a positive integer.
    """
    check_reader(reader, "batch(): reader")
    size = arguments.whole_number(batch_size, "batch(): batch_size", minimum=1)
    return _BatchReader(reader, size, bool(drop_last))


# -------------------------------------------------------------------------------------------------- shuffle


def _shuffled(reader: Reader[T], buf_size: int, rng: random.Random) -> Iterator[T]:
    iterator = iter(reader())
    try:
        if buf_size <= 1:
            yield from iterator
            return
        buffer = list(islice(iterator, buf_size))
        if len(buffer) == buf_size:
            draw = rng.random
            for sample in iterator:
                # floor(random() * n) is uniform up to a bias below n / 2**53, and cheaper than randrange.
                slot = int(draw() * buf_size)
                yield buffer[slot]
                buffer[slot] = sample
        rng.shuffle(buffer)
        yield from buffer
    finally:
        close_iterator(iterator)


class _ShuffleReader(ReaderCreator, EpochLock, Generic[T]):
    """Reader returned by :func:`shuffle`; ``seed`` and ``epoch`` (the next epoch's number) are public."""

    MADE_BY = "shuffle(...)"

    def __init__(self, reader: Reader[T], buf_size: int, seed: int) -> None:
        self.reader = reader
        self.buf_size = buf_size
        self.seed = seed
        self.epoch = 0
        self._lock = threading.Lock()

    def __call__(self) -> Iterator[T]:
        with self._lock:
            epoch = self.epoch
            self.epoch += 1
        return _shuffled(self.reader, self.buf_size, random.Random(f"{self.seed}:{epoch}"))

    def _advance_epoch(self, by: int) -> None:
        with self._lock:
            self.epoch += by

    def __repr__(self) -> str:
        return f"shuffle({self.reader!r}, {self.buf_size}, seed={self.seed})"


def shuffle(reader: Reader[T], buf_size: int, *, seed: int | None = None) -> Reader[T]:
    """Shuffle the samples of ``reader`` through a sliding buffer of ``buf_size`` samples.

    The buffer is filled with the first ``buf_size`` samples; then each new sample takes the place of a
    buffered one drawn uniformly at random, which is emitted; at the end the rest of the buffer is emitted in
    random order. So a sample can come out at most ``buf_size - 1`` places earlier than it went in, and any
    number of places later (it stays in the buffer at each step with probability ``1 - 1/buf_size``). Paddle's
    block shuffle never moves a sample out of its block of ``buf_size``; this one mixes neighbouring blocks
    too, with the same memory. The first sample comes out after ``buf_size`` samples have been read.

    Parameters
    ----------
    reader : Reader
        The reader to shuffle.
    buf_size : int
        Samples held in memory. ``buf_size <= 1`` keeps the order.
    seed : int, optional
        Base seed. Epoch ``k`` (the ``k``-th call of the returned reader, from 0) draws from its own
        ``random.Random(f"{seed}:{k}")``: every epoch has a different order and every run with the same seed
        repeats the same sequence of orders. Without a seed, one is drawn from :class:`random.SystemRandom`
        here, once, and kept as the returned reader's ``seed`` attribute so that a run can be repeated. The
        number of the next epoch is its ``epoch`` attribute (set it to resume); a pickled copy carries both.

    Returns
    -------
    Reader
        A reader of the same samples in shuffled order.
    """
    check_reader(reader, "shuffle(): reader")
    size = arguments.whole_number(buf_size, "shuffle(): buf_size")
    if seed is None:
        seed = random.SystemRandom().getrandbits(64)
    return _ShuffleReader(reader, size, arguments.whole_number(seed, "shuffle(): seed"))


# ---------------------------------------------------------------------------------------- compose and chain


def _splice(row: tuple[Any, ...], count: int) -> tuple[Any, ...]:
    """Flatten one row of ``compose``: tuple outputs are spliced in, other outputs become one field."""
    fields: list[Any] = []
    for output in row:
        if isinstance(output, tuple):
            fields.extend(output)
        elif output is END_OF_STREAM:
            ended = [str(index) for index, value in enumerate(row) if value is END_OF_STREAM]
            raise ComposeNotAligned(
                f"compose(): reader(s) {', '.join(ended)} ended after {count} samples while the others went "
                "on; pass check_alignment=False to stop at the shortest reader instead"
            )
        else:
            fields.append(output)
    return tuple(fields)


@dataclass(frozen=True, eq=False)
class _ComposeReader(ReaderCreator):
    MADE_BY = "compose(...)"

    readers: tuple[Reader[Any], ...]
    check_alignment: bool

    def __call__(self) -> Iterator[tuple[Any, ...]]:
        iterators = _open_all(self.readers)
        try:
            if self.check_alignment:
                rows: Iterator[tuple[Any, ...]] = zip_longest(*iterators, fillvalue=END_OF_STREAM)
            else:
                rows = zip(*iterators, strict=False)
            for count, row in enumerate(rows):
                yield _splice(row, count)
        finally:
            _close_all(iterators)


def compose(*readers: Reader[Any], check_alignment: bool = True) -> Reader[tuple[Any, ...]]:
    """Zip readers into one reader of flat tuples.

    Outputs ``(1, 2)``, ``3`` and ``(4, 5)`` compose into ``(1, 2, 3, 4, 5)``: tuple outputs are spliced in,
    any other output (``None`` included) becomes one field.

    Parameters
    ----------
    *readers : Reader
        The readers to zip.
    check_alignment : bool
        Raise :class:`~datamount.readers.ComposeNotAligned` when one reader ends before the others (after the
        aligned samples have been yielded). If False, stop silently at the shortest reader.

    Returns
    -------
    Reader
        A reader of tuples.
    """
    for index, reader in enumerate(readers):
        check_reader(reader, f"compose(): reader {index}")
    return _ComposeReader(readers, bool(check_alignment))


@dataclass(frozen=True, eq=False)
class _ChainReader(ReaderCreator, Generic[T]):
    MADE_BY = "chain(...)"

    readers: tuple[Reader[T], ...]

    def __call__(self) -> Iterator[T]:
        for reader in self.readers:
            iterator = iter(reader())
            try:
                yield from iterator
            finally:
                close_iterator(iterator)


def chain(*readers: Reader[T]) -> Reader[T]:
    """Read ``readers`` one after the other. Each is called only when the one before it has ended.

    Parameters
    ----------
    *readers : Reader
        The readers to concatenate.

    Returns
    -------
    Reader
        A reader of all their samples, in order.
    """
    for index, reader in enumerate(readers):
        check_reader(reader, f"chain(): reader {index}")
    return _ChainReader(readers)


# ------------------------------------------------------------------------------------ map, firstn and cache


@dataclass(frozen=True, eq=False)
class _MapReader(ReaderCreator, Generic[U]):
    MADE_BY = "map_readers(...)"

    func: Callable[..., U]
    readers: tuple[Reader[Any], ...]

    def __call__(self) -> Iterator[U]:
        iterators = _open_all(self.readers)
        try:
            yield from map(self.func, *iterators)
        finally:
            _close_all(iterators)


def map_readers(func: Callable[..., U], *readers: Reader[Any]) -> Reader[U]:
    """Apply ``func`` to the samples of ``readers`` taken side by side, stopping at the shortest reader.

    Parameters
    ----------
    func : callable
        Called with one sample of each reader.
    *readers : Reader
        The readers supplying the arguments.

    Returns
    -------
    Reader
        A reader of ``func``'s results.
    """
    if not callable(func):
        raise TypeError(f"map_readers(): func must be callable, got {type(func).__name__}")
    for index, reader in enumerate(readers):
        check_reader(reader, f"map_readers(): reader {index}")
    return _MapReader(func, readers)


@dataclass(frozen=True, eq=False)
class _FirstNReader(ReaderCreator, Generic[T]):
    MADE_BY = "firstn(...)"

    reader: Reader[T]
    n: int

    def __call__(self) -> Iterator[T]:
        if self.n == 0:
            return
        iterator = iter(self.reader())
        try:
            yield from islice(iterator, self.n)
        finally:
            close_iterator(iterator)


def firstn(reader: Reader[T], n: int) -> Reader[T]:
    """Take at most the first ``n`` samples of ``reader``.

    Exactly ``n`` samples are read upstream (Paddle reads one more), after which the upstream iterator is
    closed; with ``n = 0`` the upstream reader is not even called.

    Parameters
    ----------
    reader : Reader
        The reader to cut.
    n : int
        Number of samples, at least 0.

    Returns
    -------
    Reader
        A reader of at most ``n`` samples.
    """
    check_reader(reader, "firstn(): reader")
    return _FirstNReader(reader, arguments.whole_number(n, "firstn(): n", minimum=0))


class _CacheReader(ReaderCreator, Generic[T]):
    """Reader returned by :func:`cache`; ``samples`` is None until a first pass has completed."""

    MADE_BY = "cache(...)"

    def __init__(self, reader: Reader[T]) -> None:
        self.reader = reader
        self.samples: tuple[T, ...] | None = None

    def __call__(self) -> Iterator[T]:
        samples = self.samples
        if samples is not None:
            return iter(samples)
        return self._first_pass()

    def _first_pass(self) -> Iterator[T]:
        recorded: list[T] = []
        iterator = iter(self.reader())
        try:
            for sample in iterator:
                recorded.append(sample)
                yield sample
        finally:
            close_iterator(iterator)
        # Reached only when the upstream reader has ended by itself: an abandoned or failed pass is not kept.
        if self.samples is None:
            self.samples = tuple(recorded)

    def __repr__(self) -> str:
        state = "empty" if self.samples is None else f"{len(self.samples)} samples"
        return f"cache({self.reader!r}) <{state}>"


def cache(reader: Reader[T]) -> Reader[T]:
    """Keep the samples of ``reader`` in memory after the first complete pass and replay them afterwards.

    Unlike Paddle, which reads everything when decorating, nothing is read until the first epoch. That epoch
    is read from ``reader`` and recorded as it goes; it becomes the cache only if it reaches the end of
    ``reader``. A pass abandoned early (``break``, ``firstn``, ``close()``) or stopped by an error is
    discarded, and the next epoch reads ``reader`` again from the start. Replayed samples are the same objects
    each epoch: do not mutate them. A pickled copy carries the cached samples.

    Parameters
    ----------
    reader : Reader
        The reader to cache; its samples must fit in memory.

    Returns
    -------
    Reader
        A reader of the same samples.
    """
    check_reader(reader, "cache(): reader")
    return _CacheReader(reader)
