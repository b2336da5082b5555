"""PyTorch for datamount readers: datasets for ``torch.utils.data.DataLoader`` and a ``StatefulDataLoader`` whose
state resumes under any number of workers and ranks.

``ReaderDataset(reader(...))`` is an ``IterableDataset``: in each DataLoader worker it reads that worker's part of
this rank's share (the reader finds its rank and worker itself), and its ``state_dict()`` says exactly what that
worker's batches held. :class:`StatefulDataLoader` (torchdata's, made elastic) loads a state saved with any
``num_workers``, and the reader's state resumes on any number of ranks (``docs/sharding.md``). ``RowDataset`` is a
map-style dataset for random access by index. Importing this module imports torch; nothing else in datamount does.

Raw bytes to the GPU (``_collate.py``): ``collate_fn=collate_bytes`` makes each batch's bytes one shared-memory
``uint8`` tensor with offsets (:class:`ByteBatch`), so that no sample is pickled through the workers' queues, and
:func:`decoded` runs a decode hook on them in the main process, on any device.

Statistics (``docs/readers.md``): each DataLoader worker's reader measures its own passes and writes its own lines to
``DATAMOUNT_STATS_FILE``; ``ReaderDataset.stats()`` in the process that iterates the loader adds the workers' figures
up (they leave them in shared memory, ``_board.py``), and :func:`gather_stats` adds up every rank's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

try:
    import torch.utils.data
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "datamount.torch needs PyTorch: pip install torch --index-url https://download.pytorch.org/whl/cpu for its "
        "CPU build (a plain pip install torch takes the CUDA build, several GB)"
    ) from exc

from datamount.readers.dataset import DatasetReader
from datamount.readers.errors import ReaderStateError
from datamount.readers.mixture import Mixture
from datamount.readers.stats import combine
from datamount.torch._board import WorkerBoard
from datamount.torch._collate import ByteBatch, CollateBytes, Decode, collate_bytes, decoded, split_samples

__all__ = [
    "ByteBatch",
    "CollateBytes",
    "Decode",
    "ReaderDataset",
    "RowDataset",
    "StatefulDataLoader",
    "collate_bytes",
    "decoded",
    "gather_stats",
    "reader_states",
    "split_samples",
]


class ReaderDataset(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """An iterable dataset over a :class:`~datamount.readers.DatasetReader` or a :class:`~datamount.readers.Mixture`:
    each iteration is one pass (one epoch) of this rank's share, split among the DataLoader's workers.

    With torch's own DataLoader and ``num_workers > 0``, call :meth:`set_epoch` before each epoch (the workers read
    copies of this dataset); :class:`StatefulDataLoader` moves the epoch on by itself.
    """

    def __init__(self, samples: DatasetReader | Mixture) -> None:
        if not isinstance(samples, (DatasetReader, Mixture)):
            raise TypeError(f"ReaderDataset takes a reader(...) or a mix(...), not {type(samples).__name__}")
        self.samples = samples
        self._board = WorkerBoard()

    def __repr__(self) -> str:
        return f"ReaderDataset({self.samples!r})"

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        worker = torch.utils.data.get_worker_info()
        if worker is not None:
            self._board.follow(self.samples.meter, int(worker.id))
        return iter(self.samples())

    def stats(self) -> dict[str, Any]:
        """The reader's statistics (``docs/readers.md``, "Statistics") in the process that iterates the DataLoader:
        with workers, theirs added up (counts and times added, rates added, ``"pass"``: the latest epoch's); without,
        its own. Every rank's together: :func:`gather_stats`."""
        workers = self._board.stats()
        own = self.samples.stats()
        return own if workers is None else combine([own, workers])

    def __len__(self) -> int:
        """Samples of this rank's share of an epoch (all workers together); a mixture's ``samples``."""
        return len(self.samples) if isinstance(self.samples, Mixture) else self.samples.share_size

    @property
    def epoch(self) -> int:
        """The epoch the next pass reads."""
        return self.samples.epoch

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass epoch ``epoch`` (its own order, under ``shuffle=True``)."""
        self.samples.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """Where the reader stands: in a DataLoader worker, that worker's part (the loader gathers them all)."""
        return self.samples.state_dict()

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Continue from a reader state, a list of them (every rank's or worker's), or a whole DataLoader state."""
        self.samples.load_state_dict(reader_states(state))


class RowDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """A map-style dataset: ``dataset[i]`` is row ``i`` of the reader's version (of its split). On a packed version
    only the row group that holds the row is read; use it with a sampler (``DistributedSampler`` for ranks)."""

    def __init__(self, samples: DatasetReader) -> None:
        if not isinstance(samples, DatasetReader):
            raise TypeError(f"RowDataset takes a reader(...) (a DatasetReader), not {type(samples).__name__}")
        self.samples = samples

    def __repr__(self) -> str:
        return f"RowDataset({self.samples!r})"

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"row {index} of {len(self)}")
        return self.samples[index]


def reader_states(state: Any) -> list[Mapping[str, Any]]:
    """The reader (or mixture) states inside ``state``: a reader's own, a list of them, or a (Stateful)DataLoader's
    state, which holds one per worker however its keys are laid out."""
    found: list[Mapping[str, Any]] = []

    def collect(value: Any) -> None:
        if isinstance(value, Mapping):
            if "format" in value and ("mixture" in value or ("fingerprint" in value and "dataset" in value)):
                found.append(value)
                return
            for inner in value.values():
                collect(inner)
        elif isinstance(value, (list, tuple)):
            for inner in value:
                collect(inner)

    collect(state)
    if not found:
        raise ReaderStateError("no datamount reader state in the state given (from a ReaderDataset's DataLoader?)")
    return found


def gather_stats(stats: Mapping[str, Any]) -> dict[str, Any]:
    """Every rank's ``stats`` (a :meth:`ReaderDataset.stats` or ``samples.stats()``) added up, on every rank: a
    collective call of ``torch.distributed`` that every rank makes. Without an initialised process group, ``stats``
    itself."""
    distributed = torch.distributed
    if not (distributed.is_available() and distributed.is_initialized()):
        return dict(stats)
    every: list[Any] = [None] * distributed.get_world_size()
    distributed.all_gather_object(every, dict(stats))
    return combine(every)


def __getattr__(name: str) -> Any:
    if name == "StatefulDataLoader":  # only when asked for: torchdata is an extra of its own
        from datamount.torch._stateful import StatefulDataLoader

        return StatefulDataLoader
    raise AttributeError(f"module 'datamount.torch' has no attribute {name!r}")
