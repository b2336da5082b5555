"""Static sharding: which rank and worker a process is, each rank's share of an epoch, and the epoch's order.

An epoch is one pass over a dataset version cut into *spans* (the row groups of a packed version, runs of list
lines otherwise). Its order is the spans in a permuted order, each span's rows permuted within it, both drawn from
``(seed, epoch)``; unshuffled, it is the rows in order. The ranks cut that sequence into consecutive blocks (their
*shares*), so a rank reads few spans and each span at most once. A rank's share is read in order by one consumer; the
workers of a process (our ``multiprocess_reader`` copies, PyTorch's DataLoader workers) take chunks of it in turn, so
that a loader which merges its workers' batches round-robin hands out the share in its order.

Nothing here reads data: :class:`~datamount.readers.dataset.DatasetReader` turns the plans into reads.
"""

from __future__ import annotations

import itertools
import os
import random
import sys
from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from datamount.datasets.rows import Piece
from datamount.readers.errors import DistributedConfigError
from datamount.storage import arguments

#: How a remainder of ``rows % world_size`` is handled; see :func:`share_bounds`.
REMAINDER_RULES = ("pad", "drop", "uneven")
DEFAULT_REMAINDER = "pad"
#: Rank and world size variables, in the order they are looked at: torchrun's, then PaddlePaddle's.
ENVIRONMENTS = (("RANK", "WORLD_SIZE"), ("PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM"))


# ------------------------------------------------------------------------------------------- rank and workers


def resolve_rank(
    rank: int | None = None, world_size: int | None = None, environ: Mapping[str, str] | None = None
) -> tuple[int, int]:
    """This process's ``(rank, world_size)``: the arguments if given, else torchrun's ``RANK``/``WORLD_SIZE``, else
    PaddlePaddle's ``PADDLE_TRAINER_ID``/``PADDLE_TRAINERS_NUM``, else ``(0, 1)``.

    Raises
    ------
    DistributedConfigError
        Only one of ``rank``/``world_size`` given; a variable set without its partner; a value that is not a
        whole number, a rank outside ``0 .. world_size - 1``; torchrun's and Paddle's variables disagreeing.
    """
    if rank is not None or world_size is not None:
        if rank is None or world_size is None:
            raise DistributedConfigError(
                f"give both rank and world_size or neither (got rank={rank!r}, world_size={world_size!r}); "
                "with neither they come from RANK/WORLD_SIZE or PADDLE_TRAINER_ID/PADDLE_TRAINERS_NUM"
            )
        return _checked_rank(rank, world_size, "rank", "world_size")
    environ = os.environ if environ is None else environ
    found: list[tuple[str, tuple[int, int]]] = []
    for rank_name, size_name in ENVIRONMENTS:
        raw_rank, raw_size = environ.get(rank_name, "").strip(), environ.get(size_name, "").strip()
        if not raw_rank and not raw_size:
            continue
        if not raw_rank or not raw_size:
            missing, present = (rank_name, size_name) if not raw_rank else (size_name, rank_name)
            raise DistributedConfigError(
                f"{present} is set ({environ[present]!r}) but {missing} is not: a distributed launcher sets both"
            )
        values = (_parse_whole(raw_rank, rank_name), _parse_whole(raw_size, size_name))
        found.append((f"{rank_name}/{size_name}", _checked_rank(*values, rank_name, size_name)))
    if len(found) == 2 and found[0][1] != found[1][1]:
        (first, (r1, w1)), (second, (r2, w2)) = found
        raise DistributedConfigError(
            f"{first} say rank {r1} of {w1} but {second} say rank {r2} of {w2}; unset one pair or pass rank= "
            "and world_size= explicitly"
        )
    return found[0][1] if found else (0, 1)


def _parse_whole(text: str, name: str) -> int:
    try:
        return int(text, 10)
    except ValueError:
        raise DistributedConfigError(f"{name}={text!r} is not a whole number") from None


def _checked_rank(rank: Any, world_size: Any, rank_name: str, size_name: str) -> tuple[int, int]:
    number, size = arguments.whole_number(rank, rank_name), arguments.whole_number(world_size, size_name)
    if size < 1:
        raise DistributedConfigError(f"{size_name}={size} must be at least 1")
    if not 0 <= number < size:
        raise DistributedConfigError(f"{rank_name}={number} must be between 0 and {size_name} - 1 = {size - 1}")
    return number, size


def torch_worker() -> tuple[int, int] | None:
    """``(worker id, number of workers)`` inside a PyTorch DataLoader worker, else None.

    Looked up only when ``torch.utils.data`` is already imported: a process that never imported torch is not one
    of its workers, and importing it here would cost seconds.
    """
    data = sys.modules.get("torch.utils.data")
    info = data.get_worker_info() if data is not None else None
    return None if info is None else (int(info.id), int(info.num_workers))


def check_worker(index: int, count: int) -> tuple[int, int]:
    """``(index, count)`` of a worker, checked."""
    try:
        return _checked_rank(index, count, "worker index", "number of workers")
    except DistributedConfigError as exc:
        raise DistributedConfigError(f"invalid worker: {exc}") from None


# ------------------------------------------------------------------------------------------------------ shares


def check_remainder(rule: object) -> str:
    return str(arguments.one_of(rule, "remainder", REMAINDER_RULES, error=DistributedConfigError))


def share_bounds(rows: int, rank: int, world_size: int, remainder: str) -> tuple[int, int]:
    """Rank ``rank``'s share as ``[start, stop)`` in the epoch's sequence of ``rows`` rows, repeated as needed.

    ``"pad"``: every rank gets ``ceil(rows / world_size)`` rows; the last shares run past the end and wrap around
    to the start of the sequence, so fewer than ``world_size`` rows are read twice. ``"drop"``: every rank gets
    ``rows // world_size`` rows; the last ``rows % world_size`` of the sequence are left out this epoch.
    ``"uneven"``: the first ``rows % world_size`` ranks get one row more; every row is read exactly once.
    """
    if remainder == "pad":
        size = -(-rows // world_size)
        return rank * size, (rank + 1) * size
    if remainder == "drop":
        size = rows // world_size
        return rank * size, (rank + 1) * size
    size, extra = divmod(rows, world_size)
    start = rank * size + min(rank, extra)
    return start, start + size + (rank < extra)


def worker_runs(start: int, stop: int, worker: int, workers: int, chunk: int) -> Iterator[tuple[int, int]]:
    """The runs ``[a, b)`` of share positions ``start .. stop - 1`` that worker ``worker`` of ``workers`` reads:
    chunks of ``chunk`` positions counted from ``start``, dealt round-robin."""
    if workers == 1:
        if start < stop:
            yield start, stop
        return
    step = chunk * workers
    for first in range(start + worker * chunk, stop, step):
        yield first, min(first + chunk, stop)


# -------------------------------------------------------------------------------------------- the epoch's order


@dataclass(frozen=True)
class Group:
    """Rows of one block to read together: ``pieces`` (one per span touched) and ``order``, the positions in the
    pieces' rows (concatenated) of the rows in the wanted order; None when they already are in it."""

    pieces: list[Piece]
    order: Sequence[int] | None = None


class EpochOrder:
    """The sequence of one epoch: ``spans`` in an order drawn from ``(seed, epoch)``, cut into *blocks* of
    ``block`` spans (0: one block of every span), each block's rows permuted with their own generator, so any part
    of the sequence is found without drawing the rest. Unshuffled, the sequence is the rows in order.

    ``block=1`` (the default) permutes each span's rows within it (``random.Random(f"{seed}:{epoch}:{span}")``); a
    larger block mixes the rows of that many spans, for a reader holding as many decoded spans at a time.
    """

    def __init__(self, spans: Sequence[range], *, shuffle: bool, seed: int, epoch: int, block: int = 1) -> None:
        self.spans = spans
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = epoch
        order = [index for index, span in enumerate(spans) if len(span)]
        if shuffle:
            random.Random(f"{seed}:{epoch}").shuffle(order)
        size = (block or len(order) or 1) if shuffle else 1
        self.block = size
        self.blocks = [order[first : first + size] for first in range(0, len(order), size)]
        self.order = order
        self.starts = list(itertools.accumulate((self._block_rows(b) for b in self.blocks), initial=0))
        self._permuted: tuple[int, Any] | None = None

    def _block_rows(self, block: list[int]) -> int:
        return sum(len(self.spans[index]) for index in block)

    @property
    def rows(self) -> int:
        return self.starts[-1]

    def pieces(self, runs: Iterator[tuple[int, int]]) -> Iterator[Piece]:
        """The rows at sequence positions ``runs`` (which may run past the end and wrap around), grouped into
        one piece per stretch within a span, in the sequence's order. Only for blocks of one span."""
        if self.block != 1:
            raise ValueError("pieces() is for blocks of one span; read groups() instead")
        for group in self.groups(runs):
            yield from group.pieces

    def groups(self, runs: Iterator[tuple[int, int]]) -> Iterator[Group]:
        """The rows at sequence positions ``runs``, one group per stretch within a block."""
        slot = -1
        wanted: list[int] = []
        for first, stop in runs:
            for slot_here, low, high in self._segments(first, stop):
                if slot_here != slot and wanted:
                    yield self._group(slot, wanted)
                    wanted = []
                slot = slot_here
                wanted.extend(range(low, high))
        if wanted:
            yield self._group(slot, wanted)

    def _segments(self, first: int, stop: int) -> Iterator[tuple[int, int, int]]:
        """``(slot, low, high)``: offsets ``low .. high - 1`` of the block in slot ``slot`` cover ``[first, stop)``."""
        total = self.rows
        while first < stop:
            position = first % total
            slot = bisect_right(self.starts, position) - 1
            low = position - self.starts[slot]
            high = min(low + stop - first, self.starts[slot + 1] - self.starts[slot])
            yield slot, low, high
            first += high - low

    def _group(self, slot: int, offsets: list[int]) -> Group:
        if self.block == 1:
            return Group([self._piece(slot, offsets)])
        return self._mixed_group(slot, offsets)

    def _piece(self, slot: int, offsets: list[int]) -> Piece:
        index = self.blocks[slot][0]
        span = self.spans[index]
        if not self.shuffle:
            if offsets[-1] - offsets[0] == len(offsets) - 1:
                return Piece(span, range(span.start + offsets[0], span.start + offsets[-1] + 1))
            return Piece(span, [span.start + offset for offset in offsets])
        permutation = self._permutation(index)
        return Piece(span, [span.start + permutation[offset] for offset in offsets])

    def _permutation(self, index: int) -> list[int]:
        if self._permuted is None or self._permuted[0] != index:
            permutation = list(range(len(self.spans[index])))
            random.Random(f"{self.seed}:{self.epoch}:{index}").shuffle(permutation)
            self._permuted = (index, permutation)
        return self._permuted[1]  # type: ignore[no-any-return]

    def _mixed_group(self, slot: int, offsets: list[int]) -> Group:
        """The rows of block ``slot`` at ``offsets`` of its permutation: one piece per span, each read once."""
        block = self.blocks[slot]
        if self._permuted is None or self._permuted[0] != -1 - slot:
            generator = np.random.default_rng([self.seed % 2**64, self.epoch, slot])
            self._permuted = (-1 - slot, generator.permutation(self.starts[slot + 1] - self.starts[slot]))
        picked = self._permuted[1][np.asarray(offsets)]
        bounds = np.cumsum([0] + [len(self.spans[index]) for index in block])
        which = np.searchsorted(bounds, picked, side="right") - 1
        by_span = np.argsort(which, kind="stable")
        spans_in_order, rows_in_order = which[by_span], picked[by_span]
        cuts = [*np.flatnonzero(np.diff(spans_in_order, prepend=-1)).tolist(), len(offsets)]
        pieces = []
        for low, high in itertools.pairwise(cuts):
            here = int(spans_in_order[low])
            span = self.spans[block[here]]
            pieces.append(Piece(span, (rows_in_order[low:high] - bounds[here] + span.start).tolist()))
        return Group(pieces, np.argsort(by_span, kind="stable").tolist())
