"""A visitation ledger: which rows of a dataset a training job consumed in each epoch, and a check that each was
consumed exactly once.

A job opts in: each rank keeps a :class:`Ledger` (``Ledger.for_reader(samples)``, which names the dataset version
and split it counts rows of), records the row numbers of the samples its loop took (a reader made with
``with_row=True`` puts them first in each tuple), saves the ledger's ``state_dict()`` with its checkpoints and writes
it to a file at the end. ``datamount ledger check FILES`` (or :func:`check`) puts the ranks' ledgers together and
reports, per epoch, the rows consumed twice or more and the rows never consumed, and the epochs skipped whole.
Because the ledger records what the loop received, not what the reader planned, it proves a resume exact rather than
assuming it.

Stored per epoch as a bitmap of the rows seen (zlib-compressed, base64) and the few rows seen more than once with
their extra count: a 1 M-row epoch takes at most 125 kB, far less when rows come in runs. A saved ledger is read
strictly (:func:`parse_state`): anything but what :meth:`Ledger.state_dict` writes is a :class:`ReaderStateError`
that names the key at fault, never a count taken on trust.

A row's count in an epoch is at most ``MOST_COUNTS`` (counts are kept in 32 bits: 4 bytes a row and epoch in
memory), and no sum goes past it unnoticed: :meth:`Ledger.record` and the merge of several ledgers
(:meth:`Ledger.load_state_dict` of a list) refuse a count that would not fit, naming the epoch and the row, where
32-bit arithmetic would wrap it round to a small number (a row counted ``2**32 - 1`` times plus once would be
reported as never read). :func:`check` adds the ledgers' counts up in 64 bits, so that it reports any sum exactly.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import itertools
import json
import os
import re
import tempfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from datamount.readers.errors import ReaderStateError
from datamount.readers.mixture import EPOCH_STRIDE
from datamount.storage import arguments

if TYPE_CHECKING:
    from datamount.readers.dataset import DatasetReader

LEDGER_FORMAT = 1
#: Examples of duplicate and missing rows a report names, per epoch.
EXAMPLES = 10
#: The largest epoch and row number a ledger holds (what a signed 64-bit integer holds, for the tools that read it).
LARGEST_NUMBER = (1 << 63) - 1
#: The most times a row can be counted in one epoch (the counts are 32-bit).
MOST_COUNTS = (1 << 32) - 1
#: An epoch or row number as a key of the saved ledger: decimal digits, no sign, no leading zero.
_NUMBER_KEY = re.compile(r"0|[1-9][0-9]{0,18}")


class Ledger:
    """The rows of a ``rows``-row dataset consumed in each epoch, with how many times each was.

    ``dataset`` (``name@version``, as a reader's ``manifest.ref``) and ``split`` say which rows these are; a ledger
    made with :meth:`for_reader` has them, and :func:`check` refuses to put together ledgers that name different
    ones. Ledgers saved before ledgers named their dataset have ``dataset`` None.
    """

    def __init__(self, rows: int, *, dataset: str | None = None, split: str = "") -> None:
        self.rows = arguments.whole_number(rows, "rows", minimum=0, maximum=LARGEST_NUMBER)
        if dataset is not None and (not isinstance(dataset, str) or not dataset):
            raise ValueError(f"dataset must be the name@version of a dataset, got {dataset!r}")
        if not isinstance(split, str):
            raise TypeError(f"split must be a split's name or '', got {split!r}")
        self.dataset = dataset
        self.split = split
        self._counts: dict[int, np.ndarray] = {}

    @classmethod
    def for_reader(cls, reader: DatasetReader) -> Ledger:
        """An empty ledger of the rows ``reader`` reads: its length, its dataset version and its split."""
        return cls(len(reader), dataset=reader.manifest.ref, split=reader.split)

    def __repr__(self) -> str:
        return f"Ledger({self.describe()}, rows={self.rows}, epochs={sorted(self._counts)})"

    def describe(self) -> str:
        """What the ledger counts rows of: ``cats@3``, ``cats@3 split 'train'``, or ``no dataset named``."""
        return _describe(self.dataset, self.split)

    @property
    def epochs(self) -> list[int]:
        return sorted(self._counts)

    def record(self, epoch: int, rows: int | Iterable[int] | np.ndarray) -> None:
        """Count row ``rows`` (a number, or many: a list, a numpy array, a tensor's ``.numpy()``) as consumed in
        ``epoch``."""
        epoch = arguments.whole_number(epoch, "epoch", minimum=0, maximum=LARGEST_NUMBER)
        if isinstance(rows, Iterable) and not hasattr(rows, "__len__") and not hasattr(rows, "__array__"):
            rows = list(rows)  # a generator
        numbers = np.atleast_1d(np.asarray(rows, dtype=np.int64))
        if numbers.size and (numbers.min() < 0 or numbers.max() >= self.rows):
            wrong = numbers[(numbers < 0) | (numbers >= self.rows)][0]
            raise ValueError(f"row {wrong} is not one of the ledger's {self.rows} rows (0 .. {self.rows - 1})")
        counts = self._epoch_counts(epoch)
        if numbers.size and int(counts[numbers].max()) > MOST_COUNTS - numbers.size:  # may not fit: look closer
            unique, times = np.unique(numbers, return_counts=True)
            over = np.flatnonzero(counts[unique].astype(np.uint64) + times.astype(np.uint64) > MOST_COUNTS)
            if over.size:
                row = int(unique[over[0]])
                raise ValueError(f"row {row} cannot be counted more than {MOST_COUNTS} times in epoch {epoch}")
        np.add.at(counts, numbers, 1)

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
        named = {} if self.dataset is None else {"dataset": self.dataset, "split": self.split}
        return {
            "format": LEDGER_FORMAT,
            "rows": self.rows,
            **named,
            "epochs": {str(epoch): _encode(counts) for epoch, counts in sorted(self._counts.items())},
        }

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Take the counts of ``state`` (a :meth:`state_dict`), or the sum of a list of them (the ranks' ledgers of
        a job that resumes with another number of ranks: one new rank takes them all, the others start empty).

        Raises
        ------
        ReaderStateError
            A state is damaged or not a ledger's, or is of other rows than this ledger's.
        """
        parsed = [parse_state(one, "a ledger state") for one in _states(state)]
        names = _names(self)
        counts: dict[int, np.ndarray] = {}
        for one in parsed:
            if one.rows != self.rows:
                raise ReaderStateError(f"a ledger of {one.rows} rows cannot load into one of {self.rows}")
            if one.dataset is not None and names[0] is not None and _names(one) != names:
                raise ReaderStateError(f"a ledger of {one.describe()} cannot load into one of {_describe(*names)}")
            names = names if names[0] is not None else _names(one)  # an unnamed ledger takes the name it is given
            for epoch, epoch_counts in one.counts.items():
                counts[epoch] = _sum(counts[epoch], epoch_counts, epoch) if epoch in counts else epoch_counts
        (self.dataset, self.split), self._counts = names, counts

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Ledger:
        """A ledger with the counts of ``state`` (one :meth:`state_dict`, or a list of them, all of one dataset)."""
        first = parse_state(_states(state)[0], "a ledger state")
        ledger = cls(first.rows, dataset=first.dataset, split=first.split)
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
        """The ledger saved at ``path``.

        Raises
        ------
        ReaderStateError
            The file is not JSON, not a ledger, or a damaged one; the message names the file and what is wrong.
        OSError
            The file cannot be read (``PermissionError``, ``FileNotFoundError``...).
        """
        data = Path(path).read_bytes()
        try:
            state = json.loads(data)
        except UnicodeDecodeError:
            raise ReaderStateError(f"{path}: not a ledger: not a JSON text (its bytes are not UTF-8)") from None
        except json.JSONDecodeError as exc:
            raise ReaderStateError(f"{path}: not a ledger: not JSON ({exc})") from None
        except RecursionError:
            raise ReaderStateError(f"{path}: not a ledger: JSON nested too deeply") from None
        parsed = parse_state(state, os.fspath(path))
        ledger = cls(parsed.rows, dataset=parsed.dataset, split=parsed.split)
        ledger._counts = dict(parsed.counts)
        return ledger


def _sum(counts: np.ndarray, more: np.ndarray, epoch: int) -> np.ndarray:
    """The counts of one epoch of two ledgers added up, each at most :data:`MOST_COUNTS` (a
    :class:`ReaderStateError` naming the first row whose sum is more)."""
    summed = counts + more  # wraps round, past 2**32 - 1, to less than either: that is how a sum too large shows
    over = np.flatnonzero(summed < counts)
    if over.size:
        row = int(over[0])
        raise ReaderStateError(
            f"epoch {epoch}: row {row} is counted {int(counts[row]) + int(more[row])} times in the ledgers together, "
            f"more than a ledger holds ({MOST_COUNTS}): these are not the ledgers of one job; check them with "
            "'datamount ledger check', which adds them up without a limit"
        )
    return summed


def _states(state: object) -> list[Any]:
    """``state`` as the list of ledger states it is: one, or a non-empty list of them."""
    if isinstance(state, Mapping):
        return [state]
    if isinstance(state, Sequence) and not isinstance(state, (str, bytes)) and state:
        return list(state)
    raise ReaderStateError(f"not a ledger state, nor a list of them: {_json_kind(state)}")


def _names(ledger: Ledger | ParsedState) -> tuple[str | None, str]:
    return ledger.dataset, ledger.split


def _describe(dataset: str | None, split: str) -> str:
    if dataset is None:
        return "no dataset named"
    return f"{dataset} split {split!r}" if split else dataset


# ----------------------------------------------------------------------------------------- the saved form


@dataclass(frozen=True)
class ParsedState:
    """A ledger state read and checked: its rows, the dataset it names, and each epoch's counts."""

    rows: int
    dataset: str | None
    split: str
    counts: dict[int, np.ndarray]

    def describe(self) -> str:
        return _describe(self.dataset, self.split)


def parse_state(state: object, where: str) -> ParsedState:
    """Read one saved ledger (a :meth:`Ledger.state_dict`, e.g. from JSON) and check every part of it.

    Raises
    ------
    ReaderStateError
        Anything :meth:`Ledger.state_dict` does not write: the message starts with ``where`` (the file) and names
        the key, the epoch and the row at fault.
    """
    try:
        return _parse_state(state)
    except ReaderStateError as exc:
        raise ReaderStateError(f"{where}: {exc}") from None


def _parse_state(state: object) -> ParsedState:
    if not isinstance(state, Mapping):
        raise ReaderStateError(
            f"not a ledger: a JSON object with format, rows and epochs expected, got {_json_kind(state)}"
        )
    version = state.get("format")
    if isinstance(version, int) and not isinstance(version, bool) and version > LEDGER_FORMAT:
        raise ReaderStateError(f"a ledger of format {version}, written by a newer datamount: upgrade datamount")
    if version != LEDGER_FORMAT or isinstance(version, bool):
        raise ReaderStateError(f"not a ledger: format {LEDGER_FORMAT} expected, got {_shown(version)}")
    rows = _whole(state.get("rows"), 0, LARGEST_NUMBER)
    if rows is None:
        raise ReaderStateError(f"damaged ledger: rows is {_shown(state.get('rows'))}, not a whole number of at least 0")
    dataset, split = state.get("dataset"), state.get("split", "")
    if dataset is not None and (not isinstance(dataset, str) or not dataset):
        raise ReaderStateError(f"damaged ledger: dataset is {_shown(dataset)}, not a dataset's name@version")
    if not isinstance(split, str):
        raise ReaderStateError(f"damaged ledger: split is {_shown(split)}, not a split's name")
    epochs = state.get("epochs")
    if not isinstance(epochs, Mapping):
        raise ReaderStateError(f"damaged ledger: epochs is {_json_kind(epochs)}, not an object of epoch: counts")
    counts = {}
    for key, encoded in epochs.items():
        epoch = _number_key(key)
        if epoch is None:
            raise ReaderStateError(f"damaged ledger: epoch {_shown(key)} is not a whole number from 0 to 2**63 - 1")
        try:
            counts[epoch] = _decode(encoded, rows)
        except ReaderStateError as exc:
            raise ReaderStateError(f"damaged ledger: epoch {epoch}: {exc}") from None
    return ParsedState(rows, dataset, split if dataset is not None else "", counts)


def _encode(counts: np.ndarray) -> dict[str, Any]:
    seen = np.packbits(counts > 0)
    repeated = np.flatnonzero(counts > 1)
    return {
        "seen": base64.b64encode(zlib.compress(seen.tobytes(), 6)).decode("ascii"),
        "repeats": {str(row): int(counts[row]) - 1 for row in repeated},
    }


def _decode(encoded: object, rows: int) -> np.ndarray:
    """One epoch's counts from its saved form, every row number and count checked."""
    if not isinstance(encoded, Mapping):
        raise ReaderStateError(f"an object with seen and repeats expected, got {_json_kind(encoded)}")
    counts = _seen(encoded.get("seen"), rows)
    repeats = encoded.get("repeats", {})
    if not isinstance(repeats, Mapping):
        raise ReaderStateError(f"repeats is {_json_kind(repeats)}, not an object of row: extra count")
    for key, extra in repeats.items():
        row = _number_key(key.removeprefix("-")) if isinstance(key, str) else None
        if row is None:
            raise ReaderStateError(f"repeats: {_shown(key)} is not a row number")
        if key.startswith("-") or row >= rows:
            shown = f"-{row}" if key.startswith("-") else str(row)
            raise ReaderStateError(f"repeats: row {shown} is not one of the ledger's {rows} rows (0 .. {rows - 1})")
        if not counts[row]:
            raise ReaderStateError(f"repeats: row {row} is counted again but not marked seen")
        times = _whole(extra, 1, MOST_COUNTS - 1)
        if times is None:
            raise ReaderStateError(
                f"repeats: row {row} is counted again {_shown(extra)} times, not a whole number from 1 to "
                f"{MOST_COUNTS - 1}"
            )
        counts[row] += times
    return counts


def _seen(text: object, rows: int) -> np.ndarray:
    """The 0/1 counts of the bitmap ``text`` (base64 of zlib of ``rows`` bits), its size and spare bits checked."""
    size = (rows + 7) // 8
    if not isinstance(text, str):
        raise ReaderStateError(f"seen is {_json_kind(text)}, not the base64 text of a bitmap")
    try:
        inflate = zlib.decompressobj()
        # Never more than one byte past the bitmap's size: a damaged ledger cannot make the check run out of memory.
        bits = inflate.decompress(base64.b64decode(text, validate=True), size + 1)
    except (binascii.Error, ValueError, zlib.error) as exc:
        raise ReaderStateError(f"seen is not base64 of zlib data ({exc})") from None
    if len(bits) != size or not inflate.eof:
        raise ReaderStateError(f"seen is not a bitmap of its {rows} rows ({size} bytes)")
    counts = np.unpackbits(np.frombuffer(bits, dtype=np.uint8)).astype(np.uint32)
    beyond = np.flatnonzero(counts[rows:])
    if beyond.size:
        raise ReaderStateError(f"row {rows + int(beyond[0])} is marked seen, not one of the ledger's {rows} rows")
    return counts[:rows].copy()


def _number_key(key: object) -> int | None:
    """The number a key of the saved ledger writes (``"12"``); None when it writes none."""
    return int(key) if isinstance(key, str) and _NUMBER_KEY.fullmatch(key) else None


def _whole(value: object, minimum: int, maximum: int) -> int | None:
    """``value`` when it is a whole number (not a bool) from ``minimum`` to ``maximum``, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        return None
    return value


def _shown(value: object) -> str:
    """A value of a damaged ledger as a message quotes it: JSON, cut short."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _json_kind(value: object) -> str:
    """What JSON calls ``value``'s type: an object, a list, a string, a number, true, false or null."""
    if isinstance(value, Mapping):
        return "an object"
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return f"the number {_shown(value)}"
    if isinstance(value, str):
        return f"the string {_shown(value)}"
    if isinstance(value, Sequence):
        return "an empty list" if not value else f"a list of {len(value)}"
    return type(value).__name__


# ------------------------------------------------------------------------------------------------------ check


@dataclass(frozen=True)
class EpochReport:
    """One epoch of the ledgers put together, or a run of epochs they skipped."""

    epoch: int
    rows: int
    consumed: int  # samples taken, repeats included
    duplicates: int  # rows taken more than once
    gaps: int  # rows never taken
    duplicate_examples: list[int] = field(default_factory=list)
    gap_examples: list[int] = field(default_factory=list)
    #: For epochs skipped whole (no ledger records a row of them, but an earlier and a later epoch of their pass):
    #: the last of the run of such epochs from :attr:`epoch`. None for an epoch the ledgers record.
    skipped_through: int | None = None

    @property
    def skipped(self) -> bool:
        return self.skipped_through is not None

    @property
    def exact(self) -> bool:
        return not self.duplicates and not self.gaps and not self.skipped

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
            "skipped": self.skipped,
            "skipped_through": self.skipped_through,
        }


def check(ledgers: Iterable[Ledger] | Mapping[str, Ledger]) -> list[EpochReport]:
    """Each epoch of the ledgers (one per rank, or per rank and segment) put together: which rows were taken more
    than once, and which never; then each run of epochs skipped whole, in epoch order.

    An epoch is skipped when no ledger records a row of it while they record an earlier and a later epoch of its
    pass. A mixture numbers a part's epochs ``e * EPOCH_STRIDE + k`` (its ``k``-th restart in pass ``e``), so a pass
    in which a part was never drawn is not a skipped epoch; a reader's own epochs are all in pass 0.

    ``ledgers`` may be a mapping from where each came from (a file) to the ledger, for the messages.

    Raises
    ------
    ReaderStateError
        The ledgers are of different row counts, or name different datasets or splits (both named).
    """
    named = ledgers.items() if isinstance(ledgers, Mapping) else ((None, ledger) for ledger in ledgers)
    together: dict[int, np.ndarray] = {}
    first: tuple[str | None, Ledger] | None = None
    first_named: tuple[str | None, Ledger] | None = None
    for where, ledger in named:
        first = first or (where, ledger)
        _same_rows(first, (where, ledger))
        if ledger.dataset is not None:
            first_named = first_named or (where, ledger)
            _same_dataset(first_named, (where, ledger))
        for epoch in ledger.epochs:
            together.setdefault(epoch, np.zeros(ledger.rows, dtype=np.uint64))
            together[epoch] += ledger.counts(epoch)
    rows = first[1].rows if first is not None else 0
    reports = [_epoch_report(epoch, counts) for epoch, counts in together.items()]
    reports += [_skipped_report(start, last, rows) for start, last in _skipped_runs(sorted(together))]
    return sorted(reports, key=lambda report: report.epoch)


def _same_rows(first: tuple[str | None, Ledger], other: tuple[str | None, Ledger]) -> None:
    if other[1].rows != first[1].rows:
        raise ReaderStateError(
            f"ledgers of different datasets: {_of(first)} has {first[1].rows} rows, {_of(other)} {other[1].rows}"
        )


def _same_dataset(first: tuple[str | None, Ledger], other: tuple[str | None, Ledger]) -> None:
    if _names(other[1]) != _names(first[1]):
        raise ReaderStateError(
            f"ledgers of different datasets: {_of(first)} is of {first[1].describe()}, {_of(other)} of "
            f"{other[1].describe()}"
        )


def _of(entry: tuple[str | None, Ledger]) -> str:
    return entry[0] if entry[0] is not None else "one ledger"


def _epoch_report(epoch: int, counts: np.ndarray) -> EpochReport:
    duplicate_rows, gap_rows = np.flatnonzero(counts > 1), np.flatnonzero(counts == 0)
    return EpochReport(
        epoch=epoch,
        rows=counts.size,
        consumed=int(counts.sum()),
        duplicates=int(duplicate_rows.size),
        gaps=int(gap_rows.size),
        duplicate_examples=[int(row) for row in duplicate_rows[:EXAMPLES]],
        gap_examples=[int(row) for row in gap_rows[:EXAMPLES]],
    )


def _skipped_report(start: int, last: int, rows: int) -> EpochReport:
    return EpochReport(start, rows, 0, 0, rows, gap_examples=list(range(min(rows, EXAMPLES))), skipped_through=last)


def _skipped_runs(epochs: Sequence[int]) -> list[tuple[int, int]]:
    """The runs ``(first, last)`` of epochs missing between two of ``epochs`` (sorted) in the same pass."""
    return [
        (before + 1, after - 1)
        for before, after in itertools.pairwise(epochs)
        if after - before > 1 and before // EPOCH_STRIDE == after // EPOCH_STRIDE
    ]
