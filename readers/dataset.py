"""``reader(name)``: a dataset's samples as tuples in ``.list`` column order, from any store."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import itertools
import operator
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from datamount.datasets import catalog
from datamount.datasets.manifest import Manifest
from datamount.datasets.reader_creator import ReaderCreator
from datamount.datasets.rows import DEFAULT_ROWS_PER_SPAN, Piece, RowSource, open_rows, removed_or_missing
from datamount.readers.errors import ReaderStateError
from datamount.readers.resume import ReaderState, Resume, Segment, WorkerProgress, plan_resume
from datamount.readers.sharding import (
    DEFAULT_REMAINDER,
    DistributedConfigError,
    EpochOrder,
    Group,
    check_remainder,
    check_worker,
    resolve_rank,
    share_bounds,
    torch_worker,
    worker_runs,
)
from datamount.readers.stats import (
    HandOut,
    Meter,
    Reading,
    Timing,
    Where,
    measured,
    report_settings,
    stored_bytes_per_row,
)
from datamount.readers.workers import EpochLock, close_iterator, head_start
from datamount.storage import ObjectNotFoundError, Store, arguments, open_store
from datamount.storage.cache import ContentCache
from datamount.storage.counters import added
from datamount.storage.store import DEFAULT_MAX_BYTES_IN_FLIGHT

#: The layout of a packed version's row source (its spans are row groups).
PACKED_LAYOUT = "row-groups"
#: What must be the same in a saved state and the reader that loads it, and how to say so when it is not.
_STATE_FIT = {
    "fingerprint": "the dataset's content differs from the one the state was saved from",
    "split": "pass split= as when the state was saved",
    "rows": "the dataset's row count differs from the one the state was saved from",
    "layout": "spans differ: pass use_shards= (and rows_per_span=) as when the state was saved",
    "shuffle": "pass shuffle= as when the state was saved",
    "shuffle_block": "pass shuffle_block= as when the state was saved",
    "seed": "pass seed= as when the state was saved",
    "remainder": "pass remainder= as when the state was saved",
}


@dataclass
class _PassProgress:
    """A pass that has begun: its epoch, the segment of the epoch read, the share position it started at, and the
    samples it has yielded: counted one by one into ``yielded`` (from those a loaded state had taken), or by the
    ``handout`` of a measured pass on top of them."""

    epoch: int
    segment: Segment
    start: int
    yielded: int = 0
    handout: HandOut | None = None

    def taken(self) -> int:
        return self.yielded if self.handout is None else self.yielded + self.handout.count()


class DatasetReader(ReaderCreator, EpochLock):
    """A reader creator over the rows of one dataset version: each call returns a fresh iterator over one pass.

    It reads through a :class:`~datamount.datasets.rows.RowSource` (made by :func:`reader`), whose version was fixed
    when it was opened (``name`` means the latest committed one at that moment), so a new upload never changes what
    a running job reads; the reader itself decides only which rows each pass reads, and in what order. Picklable:
    worker processes can take it.

    In a distributed job each call reads this rank's share of the epoch, and in a worker process (a copy in
    :func:`~datamount.readers.multiprocess_reader`, a PyTorch DataLoader worker) that worker's part of it; see
    :func:`reader` for the arguments and ``docs/sharding.md`` for the guarantees. ``epoch`` is the number of the
    next pass; :meth:`state_dict` tells where the reader stands and :meth:`load_state_dict` continues from there.
    :meth:`stats` tells what the passes' consumer waited for (``docs/readers.md``, "Statistics").
    """

    def __init__(
        self,
        source: RowSource,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        shuffle: bool = False,
        seed: int = 0,
        remainder: str = DEFAULT_REMAINDER,
        worker_chunk: int = 1,
        with_row: bool = False,
        shuffle_block: int = 1,
        measure: bool = True,
    ) -> None:
        order = _order_options(rank, world_size, shuffle, seed, remainder, worker_chunk, shuffle_block)
        self.source = source
        self.with_row = arguments.boolean(with_row, "with_row")
        #: Passes are timed (:meth:`stats`); off, samples are handed out one by one and nothing is measured.
        self.measure = arguments.boolean(measure, "measure")
        self.rank, self.world_size = order["rank"], order["world_size"]
        self.shuffle = order["shuffle"]
        self.seed = order["seed"]
        self.remainder = order["remainder"]
        self.worker_chunk = order["worker_chunk"]
        self.shuffle_block = order["shuffle_block"]
        self.epoch = 0
        self._resume: Resume | None = None  # where the pass of a loaded state's epoch starts
        self._pass: _PassProgress | None = None
        self._worker: tuple[int, int] | None = None  # set in a multiprocess_reader worker that shares this reader
        self._worker_token = uuid.uuid4().hex  # kept by copies, so that workers can tell it is the same reader
        self._meter = Meter()
        self._lock = threading.Lock()

    @property
    def manifest(self) -> Manifest:
        """The version read (narrowed to the split, when the reader reads one)."""
        return self.source.manifest

    @property
    def store(self) -> Store:
        return self.source.store

    @property
    def split(self) -> str:
        return self.source.split

    def __len__(self) -> int:
        return len(self.source)

    def __repr__(self) -> str:
        packed = ", packed" if self.source.layout == PACKED_LAYOUT else ""
        packed += f", split {self.split!r}" if self.split else ""
        sharded = f", rank {self.rank} of {self.world_size}" if self.world_size > 1 else ""
        shuffled = f", shuffle seed {self.seed}" if self.shuffle else ""
        return f"DatasetReader({self.manifest.ref!r}, {self.store.url!r}, rows={len(self)}{packed}{sharded}{shuffled})"

    def made_by(self) -> str:
        return f"reader({self.manifest.name!r})"

    # --------------------------------------------------------------------------------------------------- passes

    def __call__(self) -> Iterator[tuple[Any, ...]]:
        """One pass: this rank's (and worker's) share of epoch :attr:`epoch`, which then moves on by one."""
        return self._read_pass()

    def _read_pass(self, *, started: bool = False, timing: Timing | None = None) -> Iterator[tuple[Any, ...]]:
        """One pass (see :meth:`__call__`); if ``started``, its first sample is being read from now on, in a
        thread (a mixture starts its parts together); a sample counts as yielded when the caller takes it. A
        mixture's part passes the mixture's pass ``timing``: its waits are the mixture's."""
        reports = report_settings() if self.measure and timing is None else None  # checked before the pass begins
        with self._lock:
            progress = self._begin_pass()
        worker, workers = self._worker_slot()
        whole = not progress.segment.done and progress.start == 0
        if whole and not self.shuffle and self.world_size == 1 and workers == 1:
            samples = self.source.rows(0, len(self.source))
            if self.with_row:
                samples = map(_numbered, samples, itertools.count())
        else:
            samples = self._share_pass(progress, worker, workers)
        if started:
            samples = head_start(samples)
        if self.measure:
            local = self.store.local_path() is not None
            where = Where(self.manifest.ref, self.rank, self.world_size, self._worker_index(), local)
            reading = functools.partial(self._reading, progress)
            metered = self._meter.begin(where, progress.epoch, reading, timing=timing, reports=reports)
            progress.handout = metered.handout
            return measured(samples, metered, self._missing_explained, bytes_per_sample=self._bytes_per_row)
        counted = _counted(samples, progress, self._missing_explained)
        next(counted)  # inside its ``try``: closing the pass closes the source even before a sample is taken
        return counted

    def stats(self) -> dict[str, Any]:
        """What this reader's passes did in this process, and what their consumer waited for: a dict of the keys
        ``docs/readers.md`` lists ("Statistics"), for every pass, with ``"pass"``: the same for the current (or
        last) one. Zero while nothing was measured (``measure=False``, or no pass yet)."""
        return self._meter.stats()

    @property
    def meter(self) -> Meter:
        """What measures the passes in this process (``datamount.readers.stats``), for front ends that gather
        statistics (``datamount.torch``)."""
        return self._meter

    def _reading(self, progress: _PassProgress) -> Reading:
        """A pass's samples taken, their stored bytes, and the counters of the store and the source, now."""
        taken = progress.taken()
        return taken, taken * self._bytes_per_row, added([self.store.counts(), self.source.counts()])

    @functools.cached_property
    def _bytes_per_row(self) -> float:
        return stored_bytes_per_row(self.manifest, packed=self.source.layout == PACKED_LAYOUT)

    def _worker_index(self) -> int | None:
        """This process's worker number, if it is a worker (of ``multiprocess_reader``, or a PyTorch DataLoader)."""
        if self._worker is not None:
            return self._worker[0]
        found = torch_worker()
        return None if found is None else found[0]

    @contextlib.contextmanager
    def _missing_explained(self) -> Iterator[None]:
        """A part of the version not found while it is read is raised as ``catalog.removed_while_read`` explains
        it (the version removed since this reader opened it); else as the row source named it (the version, the
        rows, the part and what puts it back: ``rows/missing.py``)."""
        try:
            yield
        except ObjectNotFoundError as missing:
            explanation = removed_or_missing(self.store, self.manifest, missing)
            if explanation is missing:
                raise
            raise explanation from missing

    def _begin_pass(self) -> _PassProgress:
        self._pass = self._next_pass()
        resume = self._resume
        if resume is not None:
            later = {epoch: segment for epoch, segment in resume.segments.items() if epoch > self.epoch}
            self._resume = Resume(min(later), later) if later else None
        self.epoch += 1
        return self._pass

    def _next_pass(self) -> _PassProgress:
        """The pass the next call reads: epoch :attr:`epoch`, the part of it left by a loaded state if any."""
        resume = self._resume
        if resume is not None and self.epoch in resume.segments:
            first = resume.epoch == self.epoch
            position, skip = (resume.position, resume.skip) if first else (0, 0)
            return _PassProgress(self.epoch, resume.segments[self.epoch], position, yielded=skip)
        return _PassProgress(self.epoch, Segment(len(self)), 0)

    def _pending_after(self, epoch: int) -> dict[int, Segment]:
        """The parts left of epochs after ``epoch`` that a loaded state had begun."""
        resume = self._resume
        return {} if resume is None else {e: segment for e, segment in resume.segments.items() if e > epoch}

    def _advance_epoch(self, by: int) -> None:
        """A copy of this reader runs the next pass in a worker process (``by=1``), or that pass is taken back to
        run here after all (``by=-1``); see :func:`~datamount.readers.workers.advance_epochs`."""
        with self._lock:
            if by > 0:
                self._begin_pass()
                self.epoch += by - 1
                return
            undone = self._pass
            self.epoch += by
            self._pass = None
            if undone is not None and (undone.start or undone.segment.done or self._resume is not None):
                segments = {undone.epoch: undone.segment, **self._pending_after(undone.epoch)}
                self._resume = Resume(undone.epoch, segments, undone.start)

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass epoch ``epoch`` (as ``DistributedSampler.set_epoch``), read from the start of the
        share, or from a loaded state's position if the state is of that epoch."""
        number = arguments.whole_number(epoch, "epoch", minimum=0)
        with self._lock:
            self.epoch = number
            self._pass = None
            if self._resume is not None and self._resume.epoch != number:
                later = {e: segment for e, segment in self._resume.segments.items() if e >= number}
                self._resume = Resume(min(later), later) if number in later else None

    def _worker_slot(self) -> tuple[int, int]:
        if self._worker is not None:
            return self._worker
        return torch_worker() or (0, 1)

    def _assign_worker(self, index: int, count: int) -> None:
        """Read only part ``index`` of ``count`` of each share (set by ``multiprocess_reader`` in its workers)."""
        self._worker = check_worker(index, count)

    def _share_pass(self, progress: _PassProgress, worker: int, workers: int) -> Iterator[tuple[Any, ...]]:
        order = EpochOrder(
            self.source.spans(), shuffle=self.shuffle, seed=self.seed, epoch=progress.epoch, block=self.shuffle_block
        )
        segment = progress.segment
        low, high = share_bounds(len(segment), self.rank, self.world_size, self.remainder)
        runs = worker_runs(progress.start, high - low, worker, workers, self.worker_chunk)
        if progress.yielded:  # a worker going on with its own part: past the positions it read already
            runs = _past(runs, progress.yielded)
        positions = itertools.chain.from_iterable(segment.positions(low + first, low + stop) for first, stop in runs)
        if order.block != 1:
            return _mixed(self.source, order.groups(positions), with_row=self.with_row)
        pieces = order.pieces(positions)
        if not self.with_row:
            return self.source.pieces(pieces)
        numbers: deque[Sequence[int]] = deque()
        samples = self.source.pieces(_noted(pieces, numbers))
        return map(_numbered, samples, itertools.chain.from_iterable(_taken(numbers)))

    @property
    def share_size(self) -> int:
        """Samples in this rank's share of the epoch being read (all of this process's workers together): of each
        whole epoch, or of the rest of one after a resume under another topology."""
        with self._lock:
            segment = self._pass.segment if self._pass is not None else self._next_pass().segment
        return self._share_size(segment)

    def _share_size(self, segment: Segment) -> int:
        low, high = share_bounds(len(segment), self.rank, self.world_size, self.remainder)
        return high - low

    # ---------------------------------------------------------------------------------------------------- state

    def state_dict(self, consumed: int | None = None) -> dict[str, Any]:
        """Where this reader stands, as a small JSON-able dict for :meth:`load_state_dict` or
        :meth:`from_state_dict`: the dataset version, the settings that decide the order and what the samples are
        (``with_row``, ``zero_copy``), the epoch and the position in this rank's share.

        Parameters
        ----------
        consumed
            Samples of the current pass your loop has taken. By default, those this reader has yielded in this
            process, which is exact when the loop iterates the reader itself. Pass it when something reads ahead
            (a DataLoader prefetching, ``buffered``) or when worker processes do the reading (our DataLoader's
            process mode, ``multiprocess_reader``, PyTorch's DataLoader): e.g. ``steps * batch_size``.
        """
        with self._lock:
            progress = self._pass
            if progress is None:
                progress = self._next_pass()
                done = 0
            else:
                done = progress.taken()
        size = self._share_size(progress.segment)
        worker, workers = self._worker_slot()
        if consumed is None and workers > 1:
            # A worker process's own part: the rank's state is its workers' states put together.
            taken = WorkerProgress(workers, self.worker_chunk, {worker: done})
            return self._state(progress.epoch, progress.segment, progress.start, taken)
        if consumed is not None:
            done = arguments.whole_number(consumed, "consumed", minimum=0)
            if progress.start + done > size:
                raise ReaderStateError(
                    f"consumed={done} is more than the {size - progress.start} samples of epoch {progress.epoch}'s "
                    f"share {'from position ' + str(progress.start) + ' ' if progress.start else ''}"
                    f"(rank {self.rank} of {self.world_size})"
                )
        position = progress.start + done
        if position >= size and (size or self._pass is not None):  # a pass at its end: the next one starts afresh
            following = progress.epoch + 1
            pending = self._pending_after(progress.epoch).get(following)
            return self._state(following, Segment(len(self)) if pending is None else pending, 0)
        return self._state(progress.epoch, progress.segment, position)

    def _state(
        self, epoch: int, segment: Segment, position: int, workers: WorkerProgress | None = None
    ) -> dict[str, Any]:
        ahead = {later: pending.done for later, pending in self._pending_after(epoch).items()}
        return ReaderState(
            dataset=self.manifest.ref,
            split=self.split,
            fingerprint=_fingerprint(self.manifest),
            rows=len(self),
            layout=self.source.layout,
            shuffle=self.shuffle,
            shuffle_block=self.shuffle_block,
            with_row=self.with_row,
            zero_copy=self.source.zero_copy,
            seed=self.seed,
            remainder=self.remainder,
            rank=self.rank,
            world_size=self.world_size,
            epoch=epoch,
            position=position,
            done=segment.done,
            workers=workers,
            ahead=ahead,
        ).to_dict()

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Continue from ``state``: the next pass is its epoch, reading what is left of it.

        ``state`` is one :meth:`state_dict`, or a list of them: every rank's (each rank's may be its workers' states),
        saved at the same step. One rank's state stands for every rank of a job whose ranks consume in step, as
        data-parallel training does. The job that loads it may have another number of ranks and workers: the rows
        left of the epoch are shared out among them, and none is read twice or left out (``docs/sharding.md``).

        Raises
        ------
        ReaderStateError
            A state is malformed, of another dataset version, layout or order (shuffle, seed, remainder), or the
            states given are not one moment of one job.
        """
        saved = [ReaderState.from_dict(one) for one in _state_list(state)]
        mine = ReaderState.from_dict(self._state(0, Segment(len(self)), 0))
        for one in saved:
            if one.dataset != mine.dataset:
                raise ReaderStateError(
                    f"the state is for {one.dataset} but this reader reads {mine.dataset}; build the reader with "
                    f"reader({one.dataset!r}, ...) or DatasetReader.from_state_dict(state)"
                )
            for name, fix in _STATE_FIT.items():
                if getattr(one, name) != getattr(mine, name):
                    raise ReaderStateError(
                        f"the state of {one.dataset} does not fit this reader: {name} is {getattr(one, name)!r} "
                        f"there and {getattr(mine, name)!r} here ({fix})"
                    )
        resume = plan_resume(saved, self.rank, self.world_size, self._worker_slot())
        with self._lock:
            self.epoch = resume.epoch
            self._pass = None
            first = resume.segments.get(resume.epoch)
            position = min(resume.position, self._share_size(first)) if first is not None else 0
            self._resume = dataclasses.replace(resume, position=position) if resume.segments else None

    @classmethod
    def from_state_dict(
        cls, state: Mapping[str, Any] | Sequence[Mapping[str, Any]], store: Store | str | None = None, **options: Any
    ) -> DatasetReader:
        """A reader that continues from ``state``: the same dataset version, layout, order settings and samples
        (``with_row``, ``zero_copy``), read from ``store`` (the default store unless given; the state records the URL
        it was saved from, not its credentials). ``options`` are those of :func:`reader` (rank, world size, cache,
        ...), over the state's; how it reads (``cache``, ``max_requests``, ``verify``...) is not in the state."""
        saved = ReaderState.from_dict(_state_list(state)[0])
        layout: dict[str, Any] = {
            "shuffle": saved.shuffle,
            "shuffle_block": saved.shuffle_block,
            "seed": saved.seed,
            "remainder": saved.remainder,
            "with_row": saved.with_row,
            "zero_copy": saved.zero_copy,
        }
        if saved.split:
            layout["split"] = saved.split
        if saved.layout == PACKED_LAYOUT:
            layout["use_shards"] = True
        else:
            layout["use_shards"] = False
            layout["rows_per_span"] = int(saved.layout.partition(":")[2] or DEFAULT_ROWS_PER_SPAN)
        samples = reader(saved.dataset, store, **{**layout, **options})
        samples.load_state_dict(state)
        return samples

    # ------------------------------------------------------------------------------------------ random access

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        """Row ``index`` (for samplers): from packed shards, only the row group that holds it is read."""
        try:
            index = operator.index(index)  # ints, numpy's and torch's integer scalars
        except TypeError:
            raise TypeError(f"a row index must be a whole number, got {index!r}") from None
        with self._missing_explained():
            return self.source.row(index + len(self) if index < 0 else index)

    def spans(self) -> list[range]:
        """The version cut into consecutive row ranges: the row groups of a packed version (each read with one
        request), else runs of ``rows_per_span`` list lines. Distributed readers hand these out as units of work."""
        return self.source.spans()

    def rows(self, start: int, stop: int) -> Iterator[tuple[Any, ...]]:
        """Rows ``start`` to ``stop - 1`` of the version, in order, as :meth:`__call__` yields them."""
        return _explained(self.source.rows(start, stop), self._missing_explained)


def _state_list(state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    if isinstance(state, Mapping):
        return [state]
    if isinstance(state, Sequence) and not isinstance(state, (str, bytes)) and state:
        return list(state)
    raise ReaderStateError(
        f"a reader state is a dict from state_dict(), or a list of every rank's, got {type(state).__name__}"
    )


def _past(runs: Iterator[tuple[int, int]], skipped: int) -> Iterator[tuple[int, int]]:
    """``runs`` without their first ``skipped`` positions."""
    for first, stop in runs:
        if skipped >= stop - first:
            skipped -= stop - first
            continue
        yield first + skipped, stop
        skipped = 0


def _mixed(source: RowSource, groups: Iterator[Group], *, with_row: bool) -> Iterator[tuple[Any, ...]]:
    """The rows of each group in the group's order: its pieces (one per span) read, then put in order."""
    plans: deque[Group] = deque()

    def noted() -> Iterator[Piece]:
        for group in groups:
            plans.append(group)
            yield from group.pieces

    rows = source.pieces(noted())
    for first in rows:  # a group's first row: the source has taken its pieces
        group = plans.popleft()
        size = sum(len(piece.rows) for piece in group.pieces)
        read = [first, *itertools.islice(rows, size - 1)]
        if with_row:
            numbers = [number for piece in group.pieces for number in piece.rows]
            read = [(number, *row) for number, row in zip(numbers, read, strict=True)]
        if group.order is None:
            yield from read
        else:
            yield from map(read.__getitem__, group.order)


def _noted(pieces: Iterator[Piece], numbers: deque[Sequence[int]]) -> Iterator[Piece]:
    """``pieces``, each one's row numbers put into ``numbers`` as the source takes it (it may read ahead)."""
    for piece in pieces:
        numbers.append(piece.rows)
        yield piece


def _taken(numbers: deque[Sequence[int]]) -> Iterator[Sequence[int]]:
    """The row numbers of the pieces the source took, in order (a sample is taken before its number, so its piece
    is there)."""
    while True:
        yield numbers.popleft()


def _numbered(sample: tuple[Any, ...], number: int) -> tuple[Any, ...]:
    return (number, *sample)


def _explained(
    rows: Iterator[tuple[Any, ...]], missing_explained: Callable[[], AbstractContextManager[None]]
) -> Iterator[tuple[Any, ...]]:
    """``rows``, a part of the version not found raised as ``missing_explained`` explains it."""
    try:
        with missing_explained():
            yield from rows
    finally:
        close_iterator(rows)


def _counted(
    samples: Iterator[tuple[Any, ...]],
    progress: _PassProgress,
    missing_explained: Callable[[], AbstractContextManager[None]],
) -> Iterator[Any]:
    """``samples``, counting each into ``progress`` as it is handed out, after a first ``None`` (taken by the pass
    itself, so that its ``finally`` runs on ``close``); a part of the version not found is raised as
    ``missing_explained`` explains it."""
    first = progress.yielded + 1
    try:
        yield None
        with missing_explained():
            # The count is set by the loop itself (enumerate in C), before each sample is handed out.
            for progress.yielded, sample in enumerate(samples, start=first):
                yield sample
    finally:
        close_iterator(samples)


def _opened_version(store: Store | str | None, name: str) -> tuple[Store, Manifest]:
    """The store, and the version ``name`` resolves to there. A remote store opened here is checked (a wrong
    endpoint, bucket or credential fails with its clear message) while the version is looked up: the first sample
    comes one round trip sooner."""
    if isinstance(store, Store):
        return store, catalog.resolve(store, name)
    opened = open_store(store, check=False)
    if opened.local_path() is not None:
        opened.check()
        return opened, catalog.resolve(opened, name)
    with ThreadPoolExecutor(1, thread_name_prefix="datamount-check") as pool:
        checked = pool.submit(opened.check)
        try:
            manifest = catalog.resolve(opened, name)
        except BaseException:
            checked.result()  # the check's error, where it has one, names the cause better
            raise
        checked.result()
    return opened, manifest


def _order_options(
    rank: int | None,
    world_size: int | None,
    shuffle: bool,
    seed: int,
    remainder: str,
    worker_chunk: int,
    shuffle_block: int = 1,
) -> dict[str, Any]:
    """The options that decide which rows each pass reads, checked."""
    checked_rank, checked_world_size = resolve_rank(rank, world_size)
    return {
        "rank": checked_rank,
        "world_size": checked_world_size,
        "shuffle": arguments.boolean(shuffle, "shuffle"),
        "seed": arguments.whole_number(seed, "seed"),
        "remainder": check_remainder(remainder),
        "worker_chunk": arguments.whole_number(worker_chunk, "worker_chunk", minimum=1, error=DistributedConfigError),
        "shuffle_block": arguments.whole_number(shuffle_block, "shuffle_block", minimum=0),
    }


def _fingerprint(manifest: Manifest) -> str:
    """The version's content in 16 hex digits: its list's sha256, or its shards' for a version stored only packed."""
    source = manifest.list_sha256 or "\n".join(shard.sha256 for shard in manifest.shards)
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def reader(
    name: str,
    store: Store | str | None = None,
    *,
    split: str | None = None,
    use_shards: bool = True,
    cache: ContentCache | str | bool | None = None,
    max_requests: int | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES_IN_FLIGHT,
    rows_per_span: int = DEFAULT_ROWS_PER_SPAN,
    verify: bool = True,
    zero_copy: bool = False,
    rank: int | None = None,
    world_size: int | None = None,
    shuffle: bool = False,
    seed: int = 0,
    remainder: str = DEFAULT_REMAINDER,
    worker_chunk: int = 1,
    with_row: bool = False,
    shuffle_block: int = 1,
    measure: bool = True,
) -> DatasetReader:
    """A Paddle-style reader creator over dataset ``name`` (``name@N`` for a given version).

    Image datasets yield ``(raw_bytes, label, ...)``: the uploaded file's exact bytes, never decoded; text datasets
    yield their columns as strings. A packed version is read from its Parquet shards (the same tuples, in the same
    order); ``cache=True`` (or ``$DATAMOUNT_CACHE_DIR``) keeps remote shards in a local cache for the next epoch.
    ``store`` defaults to the default store (``$DATAMOUNT_STORE``), so the same
    script reads from a laptop's local folder or a cluster's shared store, as its environment says. A name the
    user has no dataset for is looked up in the store's public area.

    In a distributed job each call reads only this rank's share of the epoch (``docs/sharding.md``).

    Parameters
    ----------
    name
        ``name`` (the latest version when the reader is made) or ``name@N``.
    store
        A :class:`~datamount.storage.Store`, a URL, a path or a profile name; the default store if None.
    split
        Only this split's rows, for datasets made of splits (the public datasets: ``reader("mnist",
        split="test")``); without it, every split, one after the other.
    use_shards
        Read a packed version from its Parquet shards (True) or from its objects and list.
    cache
        Keep remote shards in a local cache: True (the default cache), a folder, a ``ContentCache``.
    max_requests, max_bytes
        Reads in flight at most, and bytes in flight at most (unpacked image datasets).
    rows_per_span
        Rows of each span of an unpacked version (a packed version's spans are its row groups).
    verify
        Check each object of an unpacked image version against its xxh3-64 (or sha256) before its sample is
        yielded, and each row group of a packed version against its xxh3-64 (shards packed before format 5: their
        Parquet pages' checksums) before it is decoded; sizes and row counts are always checked. Turn it off only
        for a store you trust more than the cost of hashing (see ``docs/datasets.md``).
    zero_copy
        A packed version yields each raw value as a read-only ``memoryview`` into its decoded row group instead of
        new ``bytes``: for consumers that decode right away (``np.frombuffer``, ``PIL.Image.open(io.BytesIO(v))``).
        A view keeps its whole row group in memory: ``bytes(v)`` what you keep. An unpacked version yields the
        bytes each read returned, copied by no one either. Values sent to another process (the ``DataLoader``'s
        workers, ``multiprocess_reader``) arrive as ``bytes``. Not for PyTorch's ``DataLoader``: its
        ``default_convert`` turns a memoryview into a list of ints.
    rank, world_size
        This process's rank and the number of ranks. Both or neither; with neither, torchrun's ``RANK`` and
        ``WORLD_SIZE``, else PaddlePaddle's ``PADDLE_TRAINER_ID`` and ``PADDLE_TRAINERS_NUM``, else rank 0 of 1.
        ``rank=0, world_size=1`` reads the whole dataset inside a distributed job.
    shuffle
        Each epoch in its own order, drawn from ``(seed, epoch)``: the spans (row groups, or runs of
        ``rows_per_span`` list lines) in a permuted order, the rows of each span permuted within it.
    shuffle_block
        How many spans' rows a shuffle mixes: 1 (the default) permutes each span's rows within it; ``k`` mixes the
        rows of ``k`` consecutive spans of the shuffled span order, holding ``k`` decoded spans per worker at a
        time; 0 mixes every row of the epoch (a global shuffle, for datasets that fit in memory). See
        ``docs/sharding.md`` for what each costs and how well it mixes.
    seed
        The shuffle's seed; every rank must use the same one (the default, 0, is).
    remainder
        When the rows do not divide by the world size: ``"pad"`` (default) repeats a few rows so that every rank
        reads as many samples; ``"drop"`` leaves the last rows of the epoch out; ``"uneven"`` reads every row
        once, some ranks one sample more.
    worker_chunk
        Samples a worker process takes at a time from the rank's share, in turn with the other workers. Set it to
        the ``batch_size`` of a PyTorch DataLoader with workers, which then yields the share in its order.
    with_row
        Put each sample's row number (``0 .. len(reader) - 1``, its line in the list) first in its tuple: for a
        :class:`~datamount.readers.ledger.Ledger` of what training consumed, or to find a sample again.
    measure
        Time each pass: what the consumer waited for and what its own code took, for :meth:`DatasetReader.stats`
        and the reports of ``DATAMOUNT_STATS`` and ``DATAMOUNT_STATS_FILE`` (``docs/readers.md``, "Statistics").
        Samples are then handed out a chunk at a time, read ahead of the consumer by at most half a millisecond's
        worth; False hands them out one by one and measures nothing.

    Raises
    ------
    DistributedConfigError
        A rank, world size or option that is missing, malformed or inconsistent.
    DatasetNotFoundError
        No dataset (or version, or split) of that name in the store.
    """
    order = _order_options(rank, world_size, shuffle, seed, remainder, worker_chunk, shuffle_block)
    # Checked before the store is asked anything.
    if max_requests is not None:
        max_requests = arguments.whole_number(max_requests, "max_requests", minimum=1)
    reading: dict[str, Any] = {
        "max_requests": max_requests,
        "max_bytes": arguments.whole_number(max_bytes, "max_bytes", minimum=1),
        "rows_per_span": arguments.whole_number(rows_per_span, "rows_per_span", minimum=1),
        "verify": arguments.boolean(verify, "verify"),
        "zero_copy": arguments.boolean(zero_copy, "zero_copy"),
    }
    opened, manifest = _opened_version(store, name)
    source = open_rows(opened, manifest, split=split, use_shards=use_shards, cache=cache, **reading)
    return DatasetReader(source, **order, with_row=with_row, measure=measure)
