"""Counts of what a store and the reading over it did, for readers' statistics (``datamount.readers.stats``).

A :class:`Tally` belongs to one object (a store, its client, a cache, a row source) in one process: any thread adds to
it, a reader takes its differences over a pass. A copy of the object in another process (pickled to a worker) counts
from zero there, and a forked child goes on from what its parent had counted, with a lock of its own.

A count made once per object read (bytes checked, in a loop over millions of small objects) is a
:class:`RunningCount` of the tally: one thread adds to it with a plain addition, no lock, and every snapshot sees it
as it stands, so that a report made while the loop runs counts what the loop did until then.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Iterator, Mapping

#: Forks this process has been through as a child; a tally made before the last one makes its lock again.
_forks = [0]


def _forked() -> None:
    _forks[0] += 1


os.register_at_fork(after_in_child=_forked)


class RunningCount:
    """A count that one thread adds to (``count.value += amount``) while its tally's snapshots read it."""

    __slots__ = ("name", "value")

    def __init__(self, name: str) -> None:
        self.name = name
        self.value: float = 0


class Tally:
    """Named counts (numbers) that any thread adds to; :meth:`snapshot` reads them all at one moment."""

    __slots__ = ("_counts", "_forks", "_lock", "_running")

    def __init__(self) -> None:
        self._counts: dict[str, float] = {}
        self._running: list[RunningCount] = []
        self._lock = threading.Lock()
        self._forks = _forks[0]

    def __reduce__(self) -> tuple[type[Tally], tuple[()]]:
        return (Tally, ())  # a copy in another process counts what happens there

    def __repr__(self) -> str:
        return f"Tally({self.snapshot()})"

    def add(self, name: str, amount: float = 1) -> None:
        with self._held():
            self._counts[name] = self._counts.get(name, 0) + amount

    @contextlib.contextmanager
    def running(self, name: str) -> Iterator[RunningCount]:
        """A :class:`RunningCount` of ``name`` for one thread to add to while the block runs; at its end, what it
        counted is added to the count of ``name``. Snapshots see it all along: a value read only grows, and is
        never seen twice or not at all when the block ends."""
        count = RunningCount(name)
        with self._held():
            self._running.append(count)
        try:
            yield count
        finally:
            with self._held():
                self._running.remove(count)
                self._counts[name] = self._counts.get(name, 0) + count.value

    def get(self, name: str) -> float:
        return self.snapshot().get(name, 0)

    def snapshot(self) -> dict[str, float]:
        with self._held():
            counts = dict(self._counts)
            for count in self._running:
                counts[count.name] = counts.get(count.name, 0) + count.value
            return counts

    def _held(self) -> threading.Lock:
        if self._forks != _forks[0]:  # a forked child: the lock may have been held by a thread that is not here
            self._lock = threading.Lock()
            self._forks = _forks[0]
        return self._lock


def added(counts: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """The counts of several tallies' snapshots, added up by name."""
    total: dict[str, float] = {}
    for one in counts:
        for name, amount in one.items():
            total[name] = total.get(name, 0) + amount
    return total
