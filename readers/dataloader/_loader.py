"""``DataLoader``: Paddle's ``DataLoader.from_generator`` over numpy, prefetched by a thread or a process."""

from __future__ import annotations

import multiprocessing
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from types import TracebackType
from typing import Any

from datamount.readers.dataloader._collate import Column, ReadyBatches, SampleBatches, SampleListBatches
from datamount.readers.dataloader._epochs import BatchSource, Epoch, ProcessEpoch, ThreadEpoch
from datamount.readers.workers import (
    Reader,
    check_reader,
    effective_start_method,
    require_picklable,
    start_method_of,
)
from datamount.storage import arguments


class DataLoader:
    """Batches from a Python reader, prefetched by a thread or a worker process, as numpy arrays.

    Create one with :meth:`from_generator`, give it a source with exactly one of
    :meth:`set_sample_generator`, :meth:`set_sample_list_generator` or :meth:`set_batch_generator`, then
    iterate: each ``for`` over the loader (or over ``loader()``, as Paddle code writes it) is one epoch, read
    with ``capacity`` batches prefetched.

    Each batch has one value per column (the fields of a sample, in order). Columns of numpy arrays with
    equal shapes and dtypes are stacked (batch axis first); numbers become arrays (``int`` -> ``int64``,
    ``float`` -> ``float64``); ``bytes`` and ``str`` columns are Python lists, since numpy's fixed-width
    ``S`` dtype drops trailing NUL bytes; anything else (ragged arrays, mixed types, ``None``) is a list.
    Columns a batch reader yields as arrays are passed through unchanged.

    With ``use_multiprocess=True`` a worker process runs the reader and collation and hands each batch over
    in POSIX shared memory: ``capacity`` segments sized from the first batch, created and always unlinked by
    this process, and reused for the whole epoch; only offsets, dtypes and shapes travel through a pipe. The
    arrays you receive are copies you own, so keeping them is safe. Before the first transfer the loader
    checks that ``capacity`` x the first batch fits in ``/dev/shm``; if not it raises
    :class:`~datamount.readers.errors.SharedMemoryError` naming the numbers and the fix, or, with
    ``fallback_to_thread=True``, warns and prefetches the epoch in a thread. A worker that dies raises
    :class:`~datamount.readers.errors.WorkerDiedError` with its exit code or signal; an exception in the
    reader is raised again in the consumer with its original type, the worker's traceback as its
    ``__cause__``. Each epoch runs in a new worker, as in Paddle, which starts from this process's copy of
    the reader; the epoch numbers of the ``shuffle`` readers in it are moved on here as the worker starts, so
    every epoch has its own order, the same as in thread mode. Other state a reader changes while it runs (the
    samples ``cache`` records) stays in the worker.

    The thread or process of an epoch is stopped and joined, and its shared memory released, when the epoch
    ends, when it raises, on ``break`` (once the iterator is dropped), on :meth:`close` or ``with`` exit, and
    when the loader is garbage collected. Starting a new epoch ends an unfinished one, as in Paddle.
    """

    def __init__(
        self,
        *,
        feed_list: Sequence[Any] | None = None,
        capacity: int | None = None,
        use_double_buffer: bool = True,
        iterable: bool = True,
        return_list: bool = True,
        use_multiprocess: bool = False,
        drop_last: bool = True,
        mp_context: str | BaseContext | None = None,
        fallback_to_thread: bool = False,
    ) -> None:
        self._capacity = _count(capacity, "capacity", "the number of batches to prefetch, e.g. capacity=8")
        if not iterable:
            raise ValueError(
                "iterable=False is Paddle's static-graph mode, where the executor pulls batches after "
                "start() and reset(); this DataLoader is always iterable: drop iterable=False and write "
                "`for batch in loader():`"
            )
        if not use_multiprocess:
            for name, value in (("mp_context", mp_context), ("fallback_to_thread", fallback_to_thread)):
                if value not in (None, False):
                    raise ValueError(f"{name} only applies with use_multiprocess=True")
        self._names = _feed_names(feed_list)
        self._return_list = bool(return_list)
        self._use_multiprocess = bool(use_multiprocess)
        start_method_of(mp_context)  # checked now, resolved at each epoch
        self._mp_context = mp_context
        self._fallback_to_thread = bool(fallback_to_thread)
        self._source: BatchSource | None = None
        self._source_setter = ""
        self._epoch: weakref.ref[Epoch] | None = None
        self._closed = False

    @classmethod
    def from_generator(
        cls,
        feed_list: Sequence[Any] | None = None,
        capacity: int | None = None,
        use_double_buffer: bool = True,
        iterable: bool = True,
        return_list: bool = True,
        use_multiprocess: bool = False,
        drop_last: bool = True,
        *,
        mp_context: str | BaseContext | None = None,
        fallback_to_thread: bool = False,
    ) -> DataLoader:
        """Create a loader for a Python reader (Paddle's ``DataLoader.from_generator``).

        Parameters
        ----------
        feed_list
            Names of the columns, as strings or objects with a ``name`` (Paddle variables). When given, every
            batch must have that many columns; with ``return_list=False`` they are the keys of each batch.
        capacity
            Number of batches prefetched (>= 1). Required, as in Paddle.
        use_double_buffer
            Accepted for Paddle compatibility and ignored: it moves the next batch to the device ahead of
            time, which has no meaning for numpy arrays; prefetching is governed by ``capacity``.
        iterable
            Must be True. Paddle's ``iterable=False`` (``start()``/``reset()`` driven by an executor) is not
            supported.
        return_list
            True: each batch is a list of columns. False: a dict keyed by the ``feed_list`` names (by column
            index without a ``feed_list``); Paddle gives one such dict per device, here there is one. Paddle's
            signature defaults to False but its dygraph mode, the one that yields arrays, forces lists; the
            default here is True so that ``image, label = batch`` works.
        use_multiprocess
            Run the reader in a worker process and hand batches over through shared memory.
        drop_last
            Accepted for Paddle compatibility and ignored: Paddle drops the batches that do not fill every
            device. The sample-level ``drop_last`` is an argument of :meth:`set_sample_generator`.
        mp_context
            Start method (``"fork"``, ``"spawn"``, ``"forkserver"``) or a multiprocessing context for the
            worker; None uses the interpreter's default (``multiprocessing.set_start_method``; ``fork`` on
            Linux before Python 3.14). Under ``fork`` the reader is inherited, so closures work; the other
            methods pickle it, and a reader that cannot be pickled raises
            :class:`~datamount.readers.errors.NotPicklableError` when it is set. Only with
            ``use_multiprocess=True``.
        fallback_to_thread
            When the first batch shows that ``capacity`` batches do not fit in ``/dev/shm``, warn and
            prefetch in a thread instead of raising :class:`~datamount.readers.errors.SharedMemoryError`.
            Only with ``use_multiprocess=True``.

        Returns
        -------
        DataLoader
            A loader without a data source yet.
        """
        return cls(
            feed_list=feed_list,
            capacity=capacity,
            use_double_buffer=use_double_buffer,
            iterable=iterable,
            return_list=return_list,
            use_multiprocess=use_multiprocess,
            drop_last=drop_last,
            mp_context=mp_context,
            fallback_to_thread=fallback_to_thread,
        )

    # ------------------------------------------------------------------------------------------- data sources

    def set_sample_generator(
        self, reader: Reader, batch_size: int, drop_last: bool = True, places: Any = None
    ) -> DataLoader:
        """Read samples (tuples of fields) from ``reader`` and batch them by ``batch_size``.

        Parameters
        ----------
        reader
            Zero-argument callable returning an iterable of samples, e.g. ``yield image, label``.
        batch_size
            Samples per batch (>= 1).
        drop_last
            Drop the last batch when it has fewer than ``batch_size`` samples.
        places
            Accepted for Paddle compatibility and ignored (batches are numpy arrays in host memory).

        Returns
        -------
        DataLoader
            This loader.
        """
        size = _count(batch_size, "batch_size", "the number of samples per batch")
        check_reader(reader, "set_sample_generator(): reader")
        return self._set_source(SampleBatches(reader, size, bool(drop_last)), reader, "set_sample_generator")

    def set_sample_list_generator(self, reader: Reader, places: Any = None) -> DataLoader:
        """Read lists of samples from ``reader``, one list per batch.

        Parameters
        ----------
        reader
            Zero-argument callable returning an iterable of sample lists, e.g.
            ``yield [(image, label), ...]``.
        places
            Accepted for Paddle compatibility and ignored.

        Returns
        -------
        DataLoader
            This loader.
        """
        check_reader(reader, "set_sample_list_generator(): reader")
        return self._set_source(SampleListBatches(reader), reader, "set_sample_list_generator")

    def set_batch_generator(self, reader: Reader, places: Any = None) -> DataLoader:
        """Read ready-made batches from ``reader``: tuples of columns, arrays or per-sample lists.

        Parameters
        ----------
        reader
            Zero-argument callable returning an iterable of batches, e.g. ``yield images, labels``.
        places
            Accepted for Paddle compatibility and ignored.

        Returns
        -------
        DataLoader
            This loader.
        """
        check_reader(reader, "set_batch_generator(): reader")
        return self._set_source(ReadyBatches(reader), reader, "set_batch_generator")

    def _set_source(self, source: BatchSource, reader: Reader, setter: str) -> DataLoader:
        if self._source is not None:
            raise RuntimeError(
                f"this DataLoader already reads from a generator given to {self._source_setter}(); a "
                "DataLoader has one source: create another with DataLoader.from_generator(...) for "
                f"{setter}()"
            )
        if self._use_multiprocess:
            require_picklable(
                source, f"the reader {reader!r}", effective_start_method(start_method_of(self._mp_context))
            )
        self._source = source
        self._source_setter = setter
        return self

    # ------------------------------------------------------------------------------------------------ epochs

    def __call__(self) -> DataLoader:
        """Return the loader itself, so that Paddle's ``for batch in loader():`` works."""
        return self

    def __iter__(self) -> Epoch:
        if self._closed:
            raise ValueError("this DataLoader is closed; create a new one with DataLoader.from_generator(...)")
        if self._source is None:
            raise RuntimeError(
                "this DataLoader has no data source: call set_sample_generator(), "
                "set_sample_list_generator() or set_batch_generator() before iterating"
            )
        self._end_epoch()
        epoch = self._start_epoch(self._source, _BatchFormatter(self._names, self._return_list))
        self._epoch = weakref.ref(epoch)
        return epoch

    def _start_epoch(self, source: BatchSource, format_batch: _BatchFormatter) -> Epoch:
        if not self._use_multiprocess:
            return ThreadEpoch(source, self._capacity, format_batch)
        context = self._mp_context
        if not isinstance(context, BaseContext):
            context = multiprocessing.get_context(effective_start_method(start_method_of(context)))
        return ProcessEpoch(source, self._capacity, context, format_batch, fallback_to_thread=self._fallback_to_thread)

    def _end_epoch(self) -> None:
        epoch = self._epoch() if self._epoch is not None else None
        self._epoch = None
        if epoch is not None:
            epoch.close()

    def close(self) -> None:
        """End the running epoch, if any: stop and join its thread or process and release shared memory."""
        self._closed = True
        self._end_epoch()

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def capacity(self) -> int:
        """Number of batches prefetched."""
        return self._capacity

    @property
    def iterable(self) -> bool:
        """Always True (Paddle's attribute)."""
        return True

    def __repr__(self) -> str:
        mode = "worker process" if self._use_multiprocess else "thread"
        source = self._source if self._source is not None else "no source"
        return f"<DataLoader capacity={self._capacity} {mode} {source!r}>"


@dataclass(frozen=True)
class _BatchFormatter:
    """Turns a batch's columns into what the loader yields: a list, or a dict keyed by feed name or index."""

    names: tuple[str, ...] | None
    return_list: bool

    def __call__(self, columns: list[Column]) -> list[Column] | dict[Any, Column]:
        if self.names is not None and len(columns) != len(self.names):
            raise ValueError(
                f"the reader yields batches of {len(columns)} columns but feed_list names {len(self.names)}: "
                f"{list(self.names)}"
            )
        if self.return_list:
            return columns
        keys: Sequence[Any] = self.names if self.names is not None else range(len(columns))
        return dict(zip(keys, columns, strict=True))


def _count(value: Any, name: str, meaning: str) -> int:
    """``value`` as a whole number >= 1, or an error naming ``name`` and what it means."""
    if value is None:
        raise ValueError(f"{name} is required: {meaning}")
    return arguments.whole_number(value, f"{name} ({meaning})", minimum=1)


def _feed_names(feed_list: Sequence[Any] | None) -> tuple[str, ...] | None:
    if feed_list is None:
        return None
    if isinstance(feed_list, (str, bytes)) or not isinstance(feed_list, Sequence):
        raise TypeError(f"feed_list must be a list of names or of objects with a .name, got {feed_list!r}")
    names: list[str] = []
    for item in feed_list:
        name = item if isinstance(item, str) else getattr(item, "name", None)
        if not isinstance(name, str):
            raise TypeError(f"feed_list items must be names or objects with a str .name, got {item!r}")
        names.append(name)
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"feed_list names must be unique, {duplicates} appear more than once")
    return tuple(names)
