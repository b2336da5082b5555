"""A visitation ledger: which rows of a dataset a training job consumed in each epoch, and a check that each was
consumed exactly once.

A job opts in: each rank keeps a :class:`Ledger`, records the row numbers of the samples its loop took (a reader
made with ``with_row=True`` puts them first in each tuple), saves the ledger's ``state_dict()`` with its
checkpoints and writes it to a file at the end. ``datamount ledger check FILES`` (or :func:`check`) puts the ranks'
ledgers together and reports, per epoch, the rows consumed twice or more and the rows never consumed. Because the
ledger records what the loop received, not what the reader planned, it proves a resume exact rather than assuming it.

Stored per epoch as a bitmap of the rows seen (zlib-compressed, base64) and the few rows seen more than once with
their extra count: a 1 M-row epoch takes at most 125 kB, far less when rows come in runs.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import tempfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from datamount.readers.errors import ReaderStateError
from datamount.storage import arguments

LEDGER_FORMAT = 1
#: Examples of duplicate and missing rows a report names, per epoch.
EXAMPLES = 10


class Ledger:
    """The rows of a ``rows``-row dataset consumed in each epoch, with how many times each was."""

    def __init__(self, rows: int) -> None:
        self.rows = arguments.whole_number(rows, "rows", minimum=0)
        self._counts: dict[int, np.ndarray] = {}

    def __repr__(self) -> str:
        return f"Ledger(rows={self.rows}, epochs={sorted(self._counts)})"

    @property
    def epochs(self) -> list[int]:
        return sorted(self._counts)

    def record(self, epoch: int, rows: int | Iterable[int] | np.ndarray) -> None:
        """Count row ``rows`` (a number, or many: a list, a numpy array, a tensor's ``.numpy()``) as consumed in
        ``epoch``."""
        epoch = arguments.whole_number(epoch, "epoch", minimum=0)
        if isinstance(rows, Iterable) and not hasattr(rows, "__len__") and not hasattr(rows, "__array__"):
            rows = list(rows)  # a generator
        numbers = np.atleast_1d(np.asarray(rows, dtype=np.int64))
        if numbers.size and (numbers.min() < 0 or numbers.max() >= self.rows):
            wrong = numbers[(numbers < 0) | (numbers >= self.rows)][0]
            raise ValueError(f"row {wrong} is not one of the ledger's {self.rows} rows (0 .. {self.rows - 1})")
        np.add.at(self._epoch_counts(epoch), numbers, 1)

    def counts(self, epoch: int) -> np.ndarray:
        """How many times each row was consumed in ``epoch`` (a read-only array of ``rows`` counts)."""
        view = self._epoch_counts(epoch).view()
        view.flags.writeable = False
        return view

    def _epoch_counts(self, epoch: int) -> np.ndarray:
        if epoch not in self._counts:
            self._counts[epoch] = np.zeros(self.rows, dtype=np.uint32)
        return self._counts[epoch]

    # ------------------------------------------------------------------------------------------------- state

    def state_dict(self) -> dict[str, Any]:
        """The ledger as a small JSON-able dict, to save with a checkpoint."""
        return {
            "format": LEDGER_FORMAT,
            "rows": self.rows,
            "epochs": {str(epoch): _encode(counts) for epoch, counts in sorted(self._counts.items())},
        }

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Take the counts of ``state`` (a :meth:`state_dict`), or the sum of a list of them (the ranks' ledgers of
        a job that resumes with another number of ranks: one new rank takes them all, the others start empty)."""
        states = [state] if isinstance(state, Mapping) else list(state)
        self._counts = {}
        for one in states:
            if not isinstance(one, Mapping) or one.get("format") != LEDGER_FORMAT:
                raise ReaderStateError(f"not a ledger state (format {LEDGER_FORMAT}): {str(one)[:80]!r}")
            if one.get("rows") != self.rows:
                raise ReaderStateError(f"a ledger of {one.get('rows')} rows cannot load into one of {self.rows}")
            for epoch, encoded in dict(one["epochs"]).items():
                self._epoch_counts(int(epoch))[:] += _decode(encoded, self.rows)

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Ledger:
        first = state if isinstance(state, Mapping) else state[0]
        ledger = cls(int(first.get("rows", 0)) if isinstance(first, Mapping) else 0)
        ledger.load_state_dict(state)
        return ledger

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the ledger to ``path`` (JSON), replacing it whole: a reader never sees half a ledger."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(descriptor, "w") as file:
                json.dump(self.state_dict(), file)
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Ledger:
        """The ledger saved at ``path``."""
        try:
            state = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ReaderStateError(f"{path}: not a readable ledger: {exc}") from None
        try:
            return cls.from_state_dict(state)
        except ReaderStateError as exc:
            raise ReaderStateError(f"{path}: {exc}") from None


def _encode(counts: np.ndarray) -> dict[str, Any]:
    seen = np.packbits(counts > 0)
    repeated = np.flatnonzero(counts > 1)
    return {
        "seen": base64.b64encode(zlib.compress(seen.tobytes(), 6)).decode("ascii"),
        "repeats": {str(row): int(counts[row]) - 1 for row in repeated},
    }


def _decode(encoded: Mapping[str, Any], rows: int) -> np.ndarray:
    try:
        bits = np.frombuffer(zlib.decompress(base64.b64decode(encoded["seen"])), dtype=np.uint8)
        counts = np.unpackbits(bits, count=rows).astype(np.uint32)
        for row, extra in dict(encoded.get("repeats", {})).items():
            counts[int(row)] += int(extra)
    except (KeyError, TypeError, ValueError, IndexError, zlib.error) as exc:
        raise ReaderStateError(f"a ledger epoch is damaged: {exc}") from None
    return counts


# ------------------------------------------------------------------------------------------------------ check


@dataclass(frozen=True)
class EpochReport:
    """One epoch of the ledgers put together."""

    epoch: int
    rows: int
    consumed: int  # samples taken, repeats included
    duplicates: int  # rows taken more than once
    gaps: int  # rows never taken
    duplicate_examples: list[int] = field(default_factory=list)
    gap_examples: list[int] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not self.duplicates and not self.gaps

    def to_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "rows": self.rows,
            "consumed": self.consumed,
            "duplicates": self.duplicates,
            "gaps": self.gaps,
            "exact": self.exact,
            "duplicate_examples": self.duplicate_examples,
            "gap_examples": self.gap_examples,
        }


def check(ledgers: Iterable[Ledger]) -> list[EpochReport]:
    """Each epoch of the ledgers (one per rank, or per rank and segment) put together: which rows were taken more
    than once, and which never."""
    together: dict[int, np.ndarray] = {}
    rows: int | None = None
    for ledger in ledgers:
        if rows is not None and ledger.rows != rows:
            raise ReaderStateError(f"ledgers of different datasets: {rows} rows and {ledger.rows} rows")
        rows = ledger.rows
        for epoch in ledger.epochs:
            together.setdefault(epoch, np.zeros(ledger.rows, dtype=np.uint64))
            together[epoch] += ledger.counts(epoch)
    reports = []
    for epoch, counts in sorted(together.items()):
        duplicate_rows, gap_rows = np.flatnonzero(counts > 1), np.flatnonzero(counts == 0)
        reports.append(
            EpochReport(
                epoch=epoch,
                rows=counts.size,
                consumed=int(counts.sum()),
                duplicates=int(duplicate_rows.size),
                gaps=int(gap_rows.size),
                duplicate_examples=[int(row) for row in duplicate_rows[:EXAMPLES]],
                gap_examples=[int(row) for row in gap_rows[:EXAMPLES]],
            )
        )
    return reports
