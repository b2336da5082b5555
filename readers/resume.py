"""Where a sharded reader stands, and how any other topology continues from there (elastic resume).

An epoch is a sequence of positions ``0 .. rows - 1`` (``sharding.EpochOrder``). A *segment* is the part of it one
topology reads: the positions not yet consumed when that topology began (all of them, at first), which its ranks cut
into shares and its workers into chunks. A state tells what was consumed: the positions done before the segment, and
how far each rank (or each worker of a rank) got in its share. From the states of the ranks of a job, or from one of
them when the ranks consume in step, the positions consumed so far are known exactly; a job of any other size reads
the rest as its new segment. Nothing is read twice and nothing is left out, beyond what the remainder rule itself
repeats (``pad``) or leaves out (``drop``).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from datamount.readers.errors import ReaderStateError
from datamount.readers.sharding import check_remainder, share_bounds, worker_runs

#: Written by this version; format 1 (no segments, no worker counts) is still read.
STATE_FORMAT = 2
READABLE_FORMATS = (1, 2)

Interval = tuple[int, int]


# -------------------------------------------------------------------------------------------- sets of positions


def merged(intervals: Iterable[Interval]) -> tuple[Interval, ...]:
    """``intervals`` as sorted, disjoint, non-adjacent ``[start, stop)`` pairs; empty ones dropped."""
    result: list[list[int]] = []
    for start, stop in sorted(pair for pair in intervals if pair[0] < pair[1]):
        if result and start <= result[-1][1]:
            result[-1][1] = max(result[-1][1], stop)
        else:
            result.append([start, stop])
    return tuple((start, stop) for start, stop in result)


def complement(intervals: Sequence[Interval], total: int) -> tuple[Interval, ...]:
    """The positions of ``0 .. total - 1`` outside the merged ``intervals``."""
    gaps, last = [], 0
    for start, stop in intervals:
        gaps.append((last, start))
        last = stop
    gaps.append((last, total))
    return tuple((start, stop) for start, stop in gaps if start < stop)


def count(intervals: Iterable[Interval]) -> int:
    return sum(stop - start for start, stop in intervals)


@dataclass(frozen=True)
class Segment:
    """The positions of an epoch left when a topology began (``done`` are those consumed before it), seen as one
    sequence ``0 .. len - 1`` that the topology's ranks share out."""

    rows: int
    done: tuple[Interval, ...] = ()

    @functools.cached_property
    def _left(self) -> tuple[Interval, ...]:
        return complement(self.done, self.rows)

    @functools.cached_property
    def _starts(self) -> list[int]:
        return list(itertools.accumulate((stop - start for start, stop in self._left), initial=0))

    def __len__(self) -> int:
        return self._starts[-1]

    def positions(self, first: int, stop: int) -> Iterator[Interval]:
        """The epoch positions of segment positions ``[first, stop)``, as runs; past the end they wrap around to the
        segment's start (the ``pad`` remainder)."""
        left, starts = self._left, self._starts
        total = len(self)
        while first < stop and total:
            here = first % total
            index = bisect_right(starts, here) - 1
            offset = here - starts[index]
            length = min(stop - first, left[index][1] - left[index][0] - offset)
            yield left[index][0] + offset, left[index][0] + offset + length
            first += length

    def taken_by_rank(
        self, rank: int, world_size: int, remainder: str, position: int, workers: WorkerProgress | None
    ) -> Iterator[Interval]:
        """The epoch positions rank ``rank`` consumed: the first ``position`` of its share, and what each worker took
        of the rest."""
        low, high = share_bounds(len(self), rank, world_size, remainder)
        position = min(position, high - low)
        yield from self.positions(low, low + position)
        if workers is None:
            return
        for worker, taken in workers.taken.items():
            for first, stop in worker_runs(position, high - low, worker, workers.count, workers.chunk):
                if taken <= 0:
                    break
                end = min(stop, first + taken)
                yield from self.positions(low + first, low + end)
                taken -= end - first


# ------------------------------------------------------------------------------------------------------ states


@dataclass(frozen=True)
class WorkerProgress:
    """How far each worker process of a rank got beyond the rank's ``position``: worker ``w`` of ``count`` took the
    first ``taken[w]`` positions of its chunks (``chunk`` positions each, dealt in turn from ``position``)."""

    count: int
    chunk: int
    taken: Mapping[int, int]

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "chunk": self.chunk, "taken": {str(w): n for w, n in sorted(self.taken.items())}}

    @classmethod
    def from_dict(cls, value: Any) -> WorkerProgress:
        try:
            count, chunk = _whole(value["count"]), _whole(value["chunk"])
            taken = {_whole(int(worker)): _whole(number) for worker, number in dict(value["taken"]).items()}
        except (KeyError, TypeError, ValueError):
            raise ReaderStateError(
                f"reader state 'workers' must be {{'count': N, 'chunk': N, 'taken': {{worker: N}}}}, got {value!r}"
            ) from None
        if count < 1 or chunk < 1 or any(worker >= count for worker in taken):
            raise ReaderStateError(f"reader state 'workers' is inconsistent: {value!r}")
        return cls(count, chunk, taken)


def _whole(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(value)
    return value


@dataclass(frozen=True)
class ReaderState:
    """Where a sharded reader stands: the dataset version and its layout, the settings that decide the order, the
    segment of ``epoch`` being read (``done``: positions consumed before it), and how far this rank (``position`` in
    its share) and its workers got in it."""

    dataset: str
    split: str
    fingerprint: str
    rows: int
    layout: str
    shuffle: bool
    seed: int
    remainder: str
    rank: int
    world_size: int
    epoch: int
    position: int
    shuffle_block: int = 1
    #: What the reader yields, beside the order: each sample's row number first (``with_row``), binary values as
    #: memoryviews (``zero_copy``); a reader made from the state yields the same.
    with_row: bool = False
    zero_copy: bool = False
    done: tuple[Interval, ...] = ()
    workers: WorkerProgress | None = None
    #: The positions done before the saved segments of later epochs already begun by other workers or ranks.
    ahead: Mapping[int, tuple[Interval, ...]] = dataclasses.field(default_factory=dict)

    @property
    def segment(self) -> Segment:
        return Segment(self.rows, self.done)

    def to_dict(self) -> dict[str, Any]:
        state = {"format": STATE_FORMAT, **{field: getattr(self, field) for field in _SCALARS}}
        state["done"] = [list(pair) for pair in self.done]
        if self.workers is not None:
            state["workers"] = self.workers.to_dict()
        if self.ahead:
            state["ahead"] = {str(epoch): [list(pair) for pair in done] for epoch, done in sorted(self.ahead.items())}
        return state

    @classmethod
    def from_dict(cls, state: Any) -> ReaderState:
        """Parse a ``state_dict()``; a missing key or a value of the wrong type is a :class:`ReaderStateError`."""
        if not isinstance(state, Mapping):
            raise ReaderStateError(f"a reader state is a dict from state_dict(), got {type(state).__name__}")
        if state.get("format") not in READABLE_FORMATS:
            raise ReaderStateError(
                f"reader state format {state.get('format')!r} is not supported (this datamount reads formats "
                f"{', '.join(map(str, READABLE_FORMATS))})"
            )
        values: dict[str, Any] = {}
        for name, wanted in _SCALARS.items():
            if name not in state and name in _OPTIONAL:
                values[name] = _OPTIONAL[name]
                continue
            if name not in state:
                raise ReaderStateError(f"the reader state has no {name!r}; pass the dict state_dict() returned")
            value = state[name]
            if not isinstance(value, wanted) or (wanted is int and isinstance(value, bool)):
                raise ReaderStateError(f"reader state {name!r} must be a {wanted.__name__}, got {value!r}")
            values[name] = value
        if values["epoch"] < 0 or values["position"] < 0 or values["rows"] < 0:
            raise ReaderStateError(f"reader state has a negative epoch, position or row count: {dict(state)!r}")
        values["done"] = _parse_done(state.get("done", []), values["rows"])
        if state.get("workers") is not None:
            values["workers"] = WorkerProgress.from_dict(state["workers"])
        values["ahead"] = _parse_ahead(state.get("ahead", {}), values["rows"], values["epoch"])
        check_remainder(values["remainder"])
        if not 0 <= values["rank"] < values["world_size"]:
            raise ReaderStateError(f"reader state rank {values['rank']} is not one of {values['world_size']} ranks")
        return cls(**values)


_SCALARS: dict[str, type] = {
    field.name: {"str": str, "int": int, "bool": bool}[str(field.type)]
    for field in dataclasses.fields(ReaderState)
    if str(field.type) in ("str", "int", "bool")
}


#: Keys a state may lack (saved before they existed), with the value they had then.
_OPTIONAL: dict[str, Any] = {"shuffle_block": 1, "with_row": False, "zero_copy": False}


def _parse_ahead(value: Any, rows: int, epoch: int) -> dict[int, tuple[Interval, ...]]:
    try:
        ahead = {int(key): _parse_done(done, rows) for key, done in dict(value).items()}
    except (TypeError, ValueError):
        raise ReaderStateError(f"reader state 'ahead' must be {{epoch: [[start, stop], ...]}}, got {value!r}") from None
    if any(later <= epoch for later in ahead):
        raise ReaderStateError(f"reader state 'ahead' names epochs not after epoch {epoch}: {sorted(ahead)}")
    return ahead


def _parse_done(value: Any, rows: int) -> tuple[Interval, ...]:
    try:
        pairs = [(_whole(start), _whole(stop)) for start, stop in value]
    except (TypeError, ValueError):
        raise ReaderStateError(f"reader state 'done' must be a list of [start, stop] pairs, got {value!r}") from None
    done = merged(pairs)
    if done and done[-1][1] > rows:
        raise ReaderStateError(f"reader state 'done' runs past the epoch's {rows} rows: {value!r}")
    return done


# ------------------------------------------------------------------------------------------------ resuming

#: How many epochs apart the states of one moment may be (a worker restarting a small part of a mixture moves on
#: by one epoch each time it runs out; it may run out this many times while another worker finishes its part).
MAX_EPOCHS_APART = 10_000
#: Positions past the end of any share: what a worker or rank that moved on to a later epoch took of this one.
_ALL = 1 << 62


@dataclass(frozen=True)
class Resume:
    """Where the passes of a loaded reader go on: ``segments``, the part left of each epoch begun (the first at
    ``epoch``); ``position`` in this rank's share of the first, and (in a worker process going on with its own
    part) ``skip``: the positions of its chunks it read already."""

    epoch: int
    segments: Mapping[int, Segment]
    position: int = 0
    skip: int = 0


def plan_resume(states: Sequence[ReaderState], rank: int, world_size: int, worker: tuple[int, int] = (0, 1)) -> Resume:
    """Where rank ``rank`` of ``world_size`` (worker ``worker[0]`` of ``worker[1]``) continues from the saved
    ``states``: each rank's, or one rank's when the ranks consumed in step; a rank's may be one state per worker.

    The same topology, with only rank positions saved, continues each share where it stopped, exactly as the
    uninterrupted epoch would have gone on; so does a worker given its own state back (a loader that restores each
    worker's state in that worker). Otherwise the positions consumed so far are put together, epoch by epoch (a
    worker may have moved on to the next epoch while another finishes this one), and the positions left of each
    become a segment for this topology.
    """
    own = _own_worker_state(states, rank, world_size, worker)
    if own is not None:
        return own
    first = states[0]
    for state in states[1:]:
        if state.world_size != first.world_size:
            raise ReaderStateError(
                f"the states are not of one moment of one job: saved by {first.world_size} and by "
                f"{state.world_size} ranks; pass the states saved together"
            )
    by_rank = _states_by_rank(states)
    done = _done_by_epoch(states)
    epochs = sorted({state.epoch for state in states})
    if len(epochs) == 1 and first.world_size == world_size and all(s.workers is None for s in states):
        position = _rank_position(rank, by_rank[rank])  # the same topology goes on with each share
        segment = Segment(first.rows, done[first.epoch])
        return Resume(first.epoch, {first.epoch: segment, **_ahead(first, done)}, position)
    if max(done) - min(done) > MAX_EPOCHS_APART:
        raise ReaderStateError(
            f"the states are of epochs {min(done)} to {max(done)}: states of one moment of a job are at most "
            f"{MAX_EPOCHS_APART} epochs apart; pass the states saved together"
        )
    left: dict[int, Segment] = {}
    for epoch in range(min(done), max(done) + 1):  # an epoch no state is in was begun too, by those past it
        segment = Segment(first.rows, done.get(epoch, ()))
        taken, finished = [], True
        for saved_rank, saved in by_rank.items():
            position, workers = _progress_in(epoch, saved_rank, saved)
            low, high = share_bounds(len(segment), saved_rank, first.world_size, first.remainder)
            rank_taken = list(segment.taken_by_rank(saved_rank, first.world_size, first.remainder, position, workers))
            finished = finished and count(rank_taken) >= high - low
            taken.extend(rank_taken)
        if not finished:  # every share read: the epoch is over (``drop`` leaves a few rows out)
            rest = Segment(first.rows, merged(itertools.chain(segment.done, taken)))
            if len(rest):
                left[epoch] = rest
    if not left:
        return Resume(max(done) + 1, {})
    return Resume(min(left), left)


def _own_worker_state(
    states: Sequence[ReaderState], rank: int, world_size: int, worker: tuple[int, int]
) -> Resume | None:
    """The resume of a worker given back its own state alone, in the same topology; None for any other states."""
    if len(states) != 1 or states[0].workers is None:
        return None
    state, workers = states[0], states[0].workers
    index, count = worker
    if (state.rank, state.world_size, workers.count) != (rank, world_size, count) or set(workers.taken) != {index}:
        return None
    segments = {state.epoch: state.segment, **_ahead(state, _done_by_epoch(states))}
    return Resume(state.epoch, segments, state.position, skip=workers.taken[index])


def _ahead(state: ReaderState, done: Mapping[int, tuple[Interval, ...]]) -> dict[int, Segment]:
    return {epoch: Segment(state.rows, positions) for epoch, positions in done.items() if epoch > state.epoch}


def _done_by_epoch(states: Sequence[ReaderState]) -> dict[int, tuple[Interval, ...]]:
    """The positions of each epoch begun that were done before the saved segment of it, as the states agree."""
    done: dict[int, tuple[Interval, ...]] = {}
    for state in states:
        for epoch, positions in ((state.epoch, state.done), *state.ahead.items()):
            if done.setdefault(epoch, positions) != positions:
                raise ReaderStateError(
                    f"the states are not of one moment of one job: they differ in the rows of epoch {epoch} read "
                    "before; pass the states saved together"
                )
    return done


def _states_by_rank(states: Sequence[ReaderState]) -> dict[int, list[ReaderState]]:
    """The states of each saved rank; one rank's stand for every rank (ranks in step)."""
    by_rank: dict[int, list[ReaderState]] = {}
    for state in states:
        by_rank.setdefault(state.rank, []).append(state)
    world_size = states[0].world_size
    if len(by_rank) == 1 and world_size > 1:
        only = next(iter(by_rank.values()))
        return dict.fromkeys(range(world_size), only)
    missing = sorted(set(range(world_size)) - set(by_rank))
    if missing:
        raise ReaderStateError(
            f"the states of ranks {', '.join(map(str, missing))} of {world_size} are missing: pass every rank's "
            "state, or one rank's when the ranks consume in step"
        )
    return by_rank


def _rank_position(rank: int, states: list[ReaderState]) -> int:
    positions = {state.position for state in states}
    if len(positions) > 1:
        raise ReaderStateError(f"rank {rank} has states at different positions ({sorted(positions)})")
    return positions.pop()


def _progress_in(epoch: int, rank: int, states: list[ReaderState]) -> tuple[int, WorkerProgress | None]:
    """How far rank ``rank`` got in ``epoch``: ``(position, workers)``, from its states (or its workers' states)
    there; a state of a later epoch means its rank (or worker) read all of its part of this one, of an earlier
    epoch none of it."""
    here = [state for state in states if state.epoch == epoch]
    if all(state.workers is None for state in states):
        if len(states) > 1 and len(here) != len(states):
            raise ReaderStateError(f"rank {rank} has several states of different epochs")
        if here:
            return _rank_position(rank, here), None
        return (_ALL if states[0].epoch > epoch else 0), None
    if any(state.workers is None for state in states):
        raise ReaderStateError(f"rank {rank} has both a rank's state and its workers' states")
    shape = {(state.workers.count, state.workers.chunk) for state in states if state.workers is not None}
    if len(shape) > 1:
        raise ReaderStateError(f"the states of rank {rank}'s workers are of different worker counts: {sorted(shape)}")
    workers, chunk = shape.pop()
    taken: dict[int, int] = {}
    for state in states:
        assert state.workers is not None
        for index, number in state.workers.taken.items():
            if state.epoch != epoch:
                number = _ALL if state.epoch > epoch else 0
            if taken.setdefault(index, number) != number:
                raise ReaderStateError(f"rank {rank} worker {index} has two states ({taken[index]}, {number})")
    missing = sorted(set(range(workers)) - set(taken))
    if missing:
        raise ReaderStateError(
            f"the states of workers {', '.join(map(str, missing))} of rank {rank} are missing: pass every worker's "
            "state (a StatefulDataLoader's state_dict() holds them all)"
        )
    # A pass begun after the resume starts at position 0; the states in the epoch say where theirs began.
    position = _rank_position(rank, here) if here else 0
    return position, WorkerProgress(workers, chunk, taken)
