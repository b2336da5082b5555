"""Where the DataLoader workers of one :class:`~datamount.torch.ReaderDataset` leave their readers' statistics, for
the process that iterates the DataLoader to add up.

A board is a small block of shared memory made with the dataset, before any worker starts: forked workers share it,
spawned ones receive it with the dataset. Worker ``i`` writes slot ``i`` (no other process writes it, so no lock):
every :data:`PUBLISH_S` seconds while it reads, and at each pass's end, its reader's figures in that process. A worker
process started later in the same slot (``persistent_workers=False`` starts new ones every epoch) first adds what the
slot holds into the slot's base, so nothing an earlier worker counted is lost. Workers numbered :data:`SLOTS` or more
are not added up (their lines in ``DATAMOUNT_STATS_FILE`` still are written).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
from collections.abc import Sequence
from multiprocessing import context
from typing import Any

from datamount.readers.stats import COUNTERS, Figures, Meter, combine, stats_dict

#: Worker slots of a board, and seconds between two writes of a worker's figures.
SLOTS = 64
PUBLISH_S = 1.0
#: A record: samples, bytes, waited_s, compute_s and the counters.
_RECORD = 4 + len(COUNTERS)
#: A slot: the writing process's pid, its passes, the passes of earlier writers, the epoch of its latest pass; then
#: the earlier writers' record (base), the writer's own (current), and its latest pass's.
_PID, _PASSES, _BASE_PASSES, _EPOCH = range(4)
_BASE = 4
_CURRENT = _BASE + _RECORD
_LATEST = _CURRENT + _RECORD
_SLOT = _LATEST + _RECORD


class WorkerBoard:
    """Shared memory for the statistics of up to :data:`SLOTS` DataLoader workers."""

    def __init__(self, shared: Any = None) -> None:
        self._shared = multiprocessing.RawArray(ctypes.c_double, SLOTS * _SLOT) if shared is None else shared

    def __reduce__(self) -> tuple[Any, ...]:
        # Shared memory travels only to a process being started (a spawned worker); any other copy starts its own.
        return (WorkerBoard, (self._shared if context.get_spawning_popen() is not None else None,))

    def follow(self, meter: Meter, worker: int) -> None:
        """In worker process ``worker``: write its meter's figures into its slot from now on."""
        if 0 <= worker < SLOTS:
            meter.listen(lambda measured, now: self._write(worker, measured, now), PUBLISH_S)

    def _write(self, worker: int, meter: Meter, now: int) -> None:
        slot = worker * _SLOT
        shared = self._shared
        pid = os.getpid()
        if shared[slot + _PID] != pid:  # a new worker in this slot: what the earlier ones counted becomes the base
            base = [shared[slot + _BASE + i] + shared[slot + _CURRENT + i] for i in range(_RECORD)]
            shared[slot + _BASE : slot + _BASE + _RECORD] = base
            shared[slot + _BASE_PASSES] += shared[slot + _PASSES]
            shared[slot + _PASSES] = 0
            shared[slot + _PID] = pid
        epoch, latest = meter.latest(now)
        shared[slot + _CURRENT : slot + _CURRENT + _RECORD] = _record(meter.figures(now))
        shared[slot + _LATEST : slot + _LATEST + _RECORD] = _record(latest)
        shared[slot + _EPOCH] = -1 if epoch is None else epoch
        shared[slot + _PASSES] = meter.passes

    def stats(self) -> dict[str, Any] | None:
        """The workers' statistics added up (as :func:`~datamount.readers.stats.combine` does), their ``"pass"`` that
        of the latest epoch any of them read; ``None`` while no worker has written."""
        shared = list(self._shared)
        slots = [shared[start : start + _SLOT] for start in range(0, len(shared), _SLOT)]
        written = [slot for slot in slots if slot[_PID]]
        if not written:
            return None
        epoch = max(slot[_EPOCH] for slot in written)
        found = []
        for slot in written:
            total = [slot[_BASE + i] + slot[_CURRENT + i] for i in range(_RECORD)]
            stats = _stats(int(slot[_PASSES] + slot[_BASE_PASSES]), total)
            stats["pass"] = _stats(1, slot[_LATEST : _LATEST + _RECORD]) if slot[_EPOCH] == epoch else _stats(0, [])
            found.append(stats)
        return combine(found)


def _record(figures: Figures) -> list[float]:
    counts = figures.counts
    return [
        figures.samples,
        figures.bytes,
        figures.waited_s,
        figures.compute_s,
        *(float(counts.get(name, 0)) for name in COUNTERS),
    ]


def _stats(passes: int, record: Sequence[float]) -> dict[str, Any]:
    if not record:
        record = [0.0] * _RECORD
    samples, size, waited, compute, *counters = record
    return stats_dict(passes, round(samples), size, waited, compute, dict(zip(COUNTERS, counters, strict=True)))
