"""Weighted mixtures of datasets: ``mix({"web": 0.7, "books": 0.2, "code": 0.1})``.

A mixture's pass draws, sample after sample, which part the next sample comes from, with the parts' weights as
probabilities, from a generator seeded with ``(seed, epoch, worker, resumes)``: the same on every rank (the ranks'
batches have the same mix) and in every run. Each part is a :class:`~datamount.readers.DatasetReader` with its own
version pin, store, shuffle and sharding, read as it would be alone: rank shares, worker chunks, and a state that
resumes on any topology. When a part runs out, the stop rule decides:

- ``"first_exhausted"``: the pass ends (each part read at most once in it);
- ``"all_exhausted"``: the part starts its next epoch, until every part has run out at least once (the small parts
  are read again, so the large ones are read whole);
- ``samples=N``: the pass is N samples per rank; parts start their next epoch whenever they run out.

A part's epochs within mixture pass ``e`` are numbered ``e * EPOCH_STRIDE + k`` (its ``k``-th restart), so each
pass's order is fixed by the seed and the pass, whatever the workers did before. A state (``state_dict()``) holds the
parts' states and the pass's counts; a list of them (every rank's or worker's) resumes on any number of ranks and
workers, each part's rows read at most once per part epoch and every part epoch that ran out read exactly once
(``"uneven"``; ``docs/sharding.md`` for the other remainder rules). The weights may change at a resume: the choices
from then on follow the new ones.
"""

from __future__ import annotations

import functools
import math
import operator
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from datamount.datasets.reader_creator import ReaderCreator
from datamount.readers.dataset import DatasetReader, reader
from datamount.readers.errors import ReaderStateError
from datamount.readers.sharding import check_worker, torch_worker
from datamount.readers.stats import Meter, MeteredPass, Reading, ReportSettings, Where, report_settings
from datamount.readers.workers import ClosingChain, EpochLock, close_iterator
from datamount.storage import Store, arguments
from datamount.storage.counters import added

__all__ = ["EPOCH_STRIDE", "STOP_RULES", "Mixture", "mix"]

STOP_RULES = ("first_exhausted", "all_exhausted")
#: A part's epoch in mixture pass ``e`` is ``e * EPOCH_STRIDE + k``, ``k`` the part's restarts in that pass.
EPOCH_STRIDE = 1 << 20
MIXTURE_STATE_FORMAT = 1
#: Choices drawn at a time.
CHOICES_AT_ONCE = 4096


def mix(
    weights: Mapping[str, float],
    store: Store | str | None = None,
    *,
    readers: Mapping[str, DatasetReader] | None = None,
    seed: int = 0,
    stop: str = "first_exhausted",
    samples: int | None = None,
    with_part: bool = False,
    **reader_options: Any,
) -> Mixture:
    """A mixture of datasets, each sample drawn from part ``name`` with probability ``weights[name]`` (normalised).

    Parameters
    ----------
    weights
        ``{name: weight}``: each name is a dataset (``name`` or ``name@N``) read with ``reader(name, store,
        **reader_options)``, or a key of ``readers``. Weights are positive numbers; they need not add up to 1.
    readers
        Readers made beforehand, for parts that need their own store, split, shuffle or other options.
    seed
        Seeds the choices (and, unless given in ``reader_options``, nothing else: each part has its own seed).
    stop, samples
        When a pass ends: ``"first_exhausted"`` (default), ``"all_exhausted"``, or after ``samples`` samples per
        rank (parts restart as they run out); see the module's documentation.
    with_part
        Put the part's name and the part's epoch first in each sample: ``(name, part_epoch, *sample)`` (with
        ``with_row=True`` on the parts, a :class:`~datamount.readers.Ledger` per part can record what was read).
    """
    readers = dict(readers or {})
    parts = {name: readers[name] if name in readers else reader(name, store, **reader_options) for name in weights}
    unused = sorted(set(readers) - set(weights))
    if unused:
        raise ValueError(f"readers {', '.join(unused)} have no weight: give every part a weight")
    return Mixture(parts, weights, seed=seed, stop=stop, samples=samples, with_part=with_part)


class Mixture(ReaderCreator, EpochLock):
    """Passes over a weighted mixture of dataset readers; see :func:`mix`. Picklable: worker processes take it."""

    MADE_BY = "mix(...)"

    def __init__(
        self,
        parts: Mapping[str, DatasetReader],
        weights: Mapping[str, float],
        *,
        seed: int = 0,
        stop: str = "first_exhausted",
        samples: int | None = None,
        with_part: bool = False,
    ) -> None:
        if not parts:
            raise ValueError("a mixture needs at least one part")
        if set(parts) != set(weights):
            raise ValueError(f"parts {sorted(parts)} and weights {sorted(weights)} name different datasets")
        for name, part in parts.items():
            if not isinstance(part, DatasetReader):
                raise TypeError(f"part {name!r} must be a reader(...) (a DatasetReader), not {type(part).__name__}")
        self.parts = dict(parts)
        self.weights = _checked_weights(weights)
        self.seed = arguments.whole_number(seed, "seed")
        self.stop = str(arguments.one_of(stop, "stop", STOP_RULES))
        self.samples = None if samples is None else arguments.whole_number(samples, "samples", minimum=1)
        self.with_part = arguments.boolean(with_part, "with_part")
        self.epoch = 0
        self._worker: tuple[int, int] | None = None
        self._resumes = 0
        self._loaded: tuple[int, int, frozenset[str]] | None = None  # (epoch, samples taken, parts run out)
        self._pass: _Pass | None = None
        self._meter = Meter()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        mixed = ", ".join(f"{name}: {weight:.3g}" for name, weight in self.weights.items())
        return f"Mixture({{{mixed}}}, stop={self.stop!r}, samples={self.samples})"

    @property
    def readers(self) -> list[DatasetReader]:
        """The parts' readers (for the decorators and workers, which look for ``readers``)."""
        return list(self.parts.values())

    def __len__(self) -> int:
        if self.samples is None:
            raise TypeError("a mixture's pass has a length only with samples=N")
        return self.samples

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass epoch ``epoch``."""
        with self._lock:
            self.epoch = arguments.whole_number(epoch, "epoch", minimum=0)

    def _advance_epoch(self, by: int) -> None:
        """A copy runs the next pass in a worker process (``by=1``), or it is taken back (``by=-1``)."""
        with self._lock:
            self.epoch += by

    def _assign_worker(self, index: int, count: int) -> None:
        self._worker = check_worker(index, count)
        for part in self.parts.values():
            part._assign_worker(index, count)

    def _worker_slot(self) -> tuple[int, int]:
        return self._worker or torch_worker() or (0, 1)

    def stats(self) -> dict[str, Any]:
        """What this mixture's passes did in this process, as :meth:`DatasetReader.stats` says it: the samples
        handed out, the time its consumer waited for the parts' samples and spent in its own code, and the parts'
        bytes and counters (each store's requests counted once)."""
        return self._meter.stats()

    @property
    def meter(self) -> Meter:
        """What measures the passes in this process (``datamount.readers.stats``), for front ends that gather
        statistics (``datamount.torch``)."""
        return self._meter

    def _begin_metered(self, progress: _Pass, reports: ReportSettings) -> MeteredPass:
        """The meter's record of a pass that begins: the parts' passes add their waits to its timing."""
        any_part = next(iter(self.parts.values()))
        worker = self._worker[0] if self._worker is not None else (torch_worker() or (None,))[0]
        label = "+".join(part.manifest.ref for part in self.parts.values())
        local = all(part.store.local_path() is not None for part in self.parts.values())
        where = Where(label, any_part.rank, any_part.world_size, worker, local)
        reading = functools.partial(self._reading, progress)
        return self._meter.begin(where, progress.epoch, reading, reports=reports)

    def _reading(self, progress: _Pass) -> Reading:
        """The samples taken in ``progress``, the parts' stored bytes read, and the counters of the parts' stores
        (each once) and sources, now."""
        now = time.perf_counter_ns()
        parts = list(self.parts.values())
        stores = {id(part.store): part.store for part in parts}.values()
        counts = added([*(store.counts() for store in stores), *(part.source.counts() for part in parts)])
        return progress.taken, sum(part._meter.figures(now).bytes for part in parts), counts

    # --------------------------------------------------------------------------------------------------- passes

    def __call__(self) -> Iterator[tuple[Any, ...]]:
        """One pass of the mixture (epoch :attr:`epoch`, which then moves on by one)."""
        reports = report_settings()  # checked before the pass begins
        with self._lock:
            epoch = self.epoch
            self.epoch += 1
            loaded = self._loaded if self._loaded is not None and self._loaded[0] == epoch else None
        worker, workers = self._worker_slot()
        progress = _Pass(epoch, worker, self._resumes, loaded[1] if loaded else 0, set(loaded[2]) if loaded else set())
        self._pass = progress
        if not loaded:
            for part in self.parts.values():
                part.set_epoch(epoch * EPOCH_STRIDE)
        quota = None
        if self.samples is not None:
            left = self.samples - progress.taken
            quota = max(left // workers + (worker < left % workers), 0)
        return ClosingChain.of(self._blocks(progress, quota, reports))

    def _blocks(
        self, progress: _Pass, quota: int | None, reports: ReportSettings
    ) -> Iterator[Iterable[tuple[Any, ...]]]:
        """The pass's samples, a block of choices at a time (each sample counted into ``progress`` as it is handed
        out), which a :class:`~datamount.readers.workers.ClosingChain` hands out one by one."""
        end = -1 if quota is None else progress.taken + quota
        if progress.taken == end:
            progress.ended = True
            return
        metered = self._begin_metered(progress, reports)
        metered.started(time.perf_counter_ns())
        timing = metered.timing
        own: tuple[int, int] | None = timing.mark()  # the consumer waits for this code too (None: it does not run)
        # The parts on remote stores ask for their first row groups at once, not one after another as each is first
        # chosen. On a local disk that wait is the CPU's, which a thread would only take from the parts being read.
        running: dict[str, Iterator[tuple[Any, ...]]] = {}
        try:
            for name, part in self.parts.items():
                running[name] = part._read_pass(started=part.store.local_path() is None, timing=timing)
        except BaseException:
            for iterator in running.values():
                close_iterator(iterator)
            metered.end(time.perf_counter_ns())
            raise
        names = list(self.parts)  # a part's index in the choices -> its name
        # Each part's pass by index: a block's are picked out by numpy (C code, no dict per sample).
        passes = np.array([running[name] for name in names], dtype=object)
        epochs = {name: part.epoch - 1 for name, part in self.parts.items()}  # each part's pass begun
        until_all_run_out = self.samples is None
        try:
            for block in self._choices(progress):
                if end >= 0:
                    block = block[: end - progress.taken]
                while len(block):
                    # The block's samples are handed out by C code (``next`` of each sample's part, no bytecode
                    # between them); ``progress`` reads how far it got from the iterator over the parts.
                    picked = passes[block].tolist()
                    picked.append(_BLOCK_END)
                    calls = iter(picked)
                    progress.block(calls, len(block))
                    handed: Iterator[tuple[Any, ...]] = map(next, calls)
                    if self.with_part:
                        parts = [names[index] for index in block.tolist()]
                        # the calls first: their iterator must be the one that ends the map
                        handed = map(_with_part, handed, parts, map(epochs.__getitem__, parts))
                    timing.waited_since(own)
                    own = None
                    yield handed
                    own = timing.mark()
                    done = progress.block_done()
                    if done == len(block):
                        break
                    index, block = int(block[done]), block[done:]  # the part ran out at the block's sample ``done``
                    name = names[index]
                    progress.exhausted.add(name)
                    if until_all_run_out and self._pass_ends(progress.exhausted):
                        progress.ended = True
                        return
                    close_iterator(running[name])
                    running[name] = self.parts[name]._read_pass(timing=timing)  # the part's next epoch
                    passes[index], epochs[name] = running[name], self.parts[name].epoch - 1
                    first = next(running[name], None)
                    if first is None:  # no rows for this rank or worker: never chosen again in this pass
                        progress.empty.add(index)
                        break  # draw the next block without it
                    progress.taken += 1
                    timing.waited_since(own)
                    own = None
                    yield ((name, epochs[name], *first) if self.with_part else first,)
                    own = timing.mark()
                    block = block[1:]
                if progress.taken == end:
                    progress.ended = True
                    return
            progress.ended = True  # every part is empty here
        finally:
            progress.block_left()
            for iterator in running.values():
                close_iterator(iterator)
            timing.waited_since(own)
            metered.end(time.perf_counter_ns())

    def _choices(self, progress: _Pass) -> Iterator[np.ndarray]:
        """Blocks of the parts (by index) of the next samples, drawn by weight, endlessly (until every part is empty
        here); a block is cut short where a part turned out empty."""
        weights = np.array([self.weights[name] for name in self.parts])
        generator = np.random.default_rng([self.seed % 2**64, progress.epoch, progress.worker, progress.resumes])
        # What Generator.choice(p=...) does, with the cumulative weights computed once: the same draws.
        cumulative = weights.cumsum()
        cumulative /= cumulative[-1]
        while len(progress.empty) < len(weights):
            block = cumulative.searchsorted(generator.random(CHOICES_AT_ONCE), side="right")
            if progress.empty:
                block = block[~np.isin(block, list(progress.empty))]
            yield block

    def _pass_ends(self, exhausted: set[str]) -> bool:
        return self.stop == "first_exhausted" or exhausted == set(self.parts)

    # ---------------------------------------------------------------------------------------------------- state

    def state_dict(self) -> dict[str, Any]:
        """Where the mixture stands in this process (a worker process: its part): the pass, its counts and every
        part's reader state. Save the states of every rank (or one rank's, the ranks being in step)."""
        progress = self._pass
        worker, workers = self._worker_slot()
        if progress is None:
            epoch, taken, exhausted, ended = self.epoch, 0, set(), False
            if self._loaded is not None and self._loaded[0] == epoch:
                taken, exhausted = self._loaded[1], set(self._loaded[2])
        else:
            epoch, taken, exhausted, ended = progress.epoch, progress.taken, progress.exhausted, progress.ended
        any_part = next(iter(self.parts.values()))
        return {
            "format": MIXTURE_STATE_FORMAT,
            "mixture": sorted(self.parts),
            "epoch": epoch,
            "taken": taken,
            "exhausted": sorted(exhausted),
            "ended": ended,
            "resumes": self._resumes,
            "rank": any_part.rank,
            "world_size": any_part.world_size,
            "worker": [worker, workers],
            "parts": {name: part.state_dict() for name, part in self.parts.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Continue from ``state`` (a :meth:`state_dict`) or a list of them: every rank's (or one rank's, the ranks
        being in step), each rank's as one state or one per worker. Any number of ranks and workers may load them;
        the weights may differ from the saved ones."""
        states = [state] if isinstance(state, Mapping) else list(state)
        for one in states:
            if not isinstance(one, Mapping) or one.get("format") != MIXTURE_STATE_FORMAT or "mixture" not in one:
                raise ReaderStateError(f"not a mixture state (from Mixture.state_dict()): {str(one)[:80]!r}")
            if sorted(one["mixture"]) != sorted(self.parts):
                raise ReaderStateError(
                    f"the state mixes {sorted(one['mixture'])} and this mixture {sorted(self.parts)}: the parts must "
                    "be the same datasets"
                )
        epoch = min(int(one["epoch"]) for one in states)
        in_pass = [one for one in states if int(one["epoch"]) == epoch]
        over = all(one.get("ended") for one in in_pass)
        if not over and len(in_pass) < len(states):
            raise ReaderStateError(
                f"the states are of passes {epoch} and {max(int(one['epoch']) for one in states)} of the mixture, and "
                f"pass {epoch} was not over: pass the states saved together, at one step"
            )
        with self._lock:
            self._resumes = max(int(one["resumes"]) for one in states) + 1
            self._pass = None
            if over:  # every process had finished the pass: the next one starts afresh
                self.epoch, self._loaded = epoch + 1, None
                return
            # The parts go on from every process's part states; the pass's counts are carried over.
            for name, part in self.parts.items():
                part.load_state_dict([one["parts"][name] for one in states])
            # A part has run out in this pass when it ran out in every process: each new one reads the rest of it.
            exhausted = frozenset.intersection(*(frozenset(one["exhausted"]) for one in in_pass))
            self.epoch, self._loaded = epoch, (epoch, _rank_taken(in_pass), exhausted)


class _Pass:
    """A mixture pass that has begun in this process: its epoch, this worker, the samples taken (counted as they are
    handed out), the parts that ran out and those with no rows here, and whether it ended.

    While a block of samples is handed out, :attr:`taken` counts the calls its iterator has given out: each sample
    is the result of one call, and the consumer holds it by the time it can ask."""

    __slots__ = ("_before", "_block", "_size", "empty", "ended", "epoch", "exhausted", "resumes", "worker")

    def __init__(self, epoch: int, worker: int, resumes: int, taken: int, exhausted: set[str]) -> None:
        self.epoch, self.worker, self.resumes = epoch, worker, resumes
        self._before, self.exhausted = taken, exhausted
        self._block: Iterator[Any] | None = None
        self._size = 0
        self.empty: set[int] = set()  # the parts (by index) with no rows here
        self.ended = False

    @property
    def taken(self) -> int:
        if self._block is None:
            return self._before
        return self._before + min(self._size + 1 - operator.length_hint(self._block), self._size)

    @taken.setter
    def taken(self, value: int) -> None:
        self._before = value

    def block(self, calls: Iterator[Any], size: int) -> None:
        """Count the samples of ``calls``: ``size`` calls for samples, then one that ends the block."""
        self._block, self._size = calls, size

    def block_done(self) -> int:
        """The block's calls have run out: the number of its samples handed out (fewer than its size when a part
        ran out: that part's call was the last one taken)."""
        handed_out = self._size - operator.length_hint(self._block) if self._block is not None else 0
        self._before, self._block = self._before + handed_out, None
        return handed_out

    def block_left(self) -> None:
        """The pass stops in the middle of a block: its samples handed out count."""
        self._before, self._block = self.taken, None


#: The last of a block's parts: an empty iterator, which ends the block's ``map``.
_BLOCK_END: Iterator[Any] = iter(())


def _with_part(sample: tuple[Any, ...], name: str, epoch: int) -> tuple[Any, ...]:
    return (name, epoch, *sample)


def _rank_taken(states: list[Mapping[str, Any]]) -> int:
    """Samples one rank took in the pass: its workers' counts added up (the ranks are in step)."""
    ranks: dict[int, int] = {}
    for one in states:
        ranks[int(one["rank"])] = ranks.get(int(one["rank"]), 0) + int(one["taken"])
    return max(ranks.values(), default=0)


def _checked_weights(weights: Mapping[str, float]) -> dict[str, float]:
    checked = {}
    for name, weight in weights.items():
        number = float(weight) if isinstance(weight, (int, float)) and not isinstance(weight, bool) else math.nan
        if not 0 < number < math.inf:
            raise ValueError(f"the weight of part {name!r} must be a number > 0, got {weight!r}")
        checked[name] = number
    return checked
