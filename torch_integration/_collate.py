"""Batches of raw bytes that reach the main process as one tensor: no sample's bytes are pickled.

``torch.utils.data.default_collate`` leaves ``bytes`` as a list, which a DataLoader worker pickles into its queue and
the main process unpickles, sample by sample: at tens of thousands of samples a second that queue, not the store, is
the loader's ceiling. :class:`CollateBytes` copies one column's values of a batch into a single ``uint8`` tensor,
made in shared memory when it runs in a worker, with their offsets: the worker's queue carries a handle, and the main
process maps the same memory. A worker reuses its segments once the main process has dropped the batches in them
(``_shared_memory.py``): a fresh segment per batch costs more than the copy. A handle names its segment by a random
token that the segment's header carries, not by the worker's pid, which a later worker may be given (NOTE [ Segment
tokens ]). :meth:`ByteBatch.decode` then hands the tensor and its offsets to a decode hook on any device
(``torchvision.io.decode_jpeg(..., device="cuda")`` decodes a whole batch on the GPU).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.utils.data

from datamount.storage import arguments
from datamount.torch import _shared_memory

#: A decode hook: ``decode(data, offsets, device)``, ``data`` the batch's bytes (a ``uint8`` tensor on the CPU),
#: ``offsets`` where each sample starts and the last ends (``int64``, one more than the samples).
Decode = Callable[[torch.Tensor, torch.Tensor, torch.device], Any]


@dataclass(frozen=True)
class ByteBatch:
    """A batch of raw byte samples: sample ``i`` is ``data[offsets[i]:offsets[i + 1]]``; ``others`` holds the
    samples' other columns, each a list in the batch's order (labels, as the reader yields them)."""

    data: torch.Tensor
    offsets: torch.Tensor
    others: tuple[list[Any], ...]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def samples(self) -> list[torch.Tensor]:
        """Each sample's bytes as a 1-D ``uint8`` tensor: views of :attr:`data`, no copy."""
        return split_samples(self.data, self.offsets)

    def decode(self, decode: Decode, device: torch.device | str = "cpu") -> Any:
        """``decode(data, offsets, device)``: the batch made into what training takes, on ``device``."""
        return decode(self.data, self.offsets, torch.device(device))

    def pin_memory(self) -> ByteBatch:
        """The batch with its bytes in pinned memory (the DataLoader calls it with ``pin_memory=True``)."""
        return ByteBatch(self.data.pin_memory(), self.offsets.pin_memory(), self.others)


@dataclass(frozen=True)
class CollateBytes:
    """A DataLoader ``collate_fn``: column ``column`` of each sample (``bytes``, or any buffer of bytes) into one
    :class:`ByteBatch`; the other columns as lists. Picklable, for workers started by ``spawn``."""

    column: int = 0

    def __post_init__(self) -> None:
        arguments.whole_number(self.column, "column", minimum=0)

    def __call__(self, samples: Sequence[Sequence[Any]]) -> ByteBatch:
        values = [sample[self.column] for sample in samples]
        try:
            lengths = np.fromiter((memoryview(value).nbytes for value in values), dtype=np.int64, count=len(values))
        except TypeError:
            wrong = next(value for value in values if not isinstance(value, (bytes, bytearray, memoryview)))
            raise TypeError(
                f"CollateBytes(column={self.column}) takes samples whose column {self.column} is bytes, not "
                f"{type(wrong).__name__}"
            ) from None
        offsets = np.zeros(len(values) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data, segment = _batch_memory(int(offsets[-1]))
        target = data.numpy().data.cast("B")
        for value, start, end in zip(values, offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
            target[start:end] = memoryview(value).cast("B")
        rest = tuple(
            [sample[i] for sample in samples] for i in range(len(samples[0]) if samples else 0) if i != self.column
        )
        if segment is not None:
            return _LentByteBatch(data, torch.from_numpy(offsets), rest, segment)
        return ByteBatch(data, torch.from_numpy(offsets), rest)


@dataclass(frozen=True)
class _LentByteBatch(ByteBatch):
    """A worker's batch in a segment of its pool: pickled as the segment's handle, not as its bytes."""

    segment: _shared_memory.Segment

    def __reduce__(self) -> tuple[Any, ...]:
        handle = _shared_memory.handle(self.segment, self.data.numel())
        return _received_batch, (handle, self.offsets.numpy(), self.others)


def _received_batch(
    handle: _shared_memory.SegmentHandle, offsets: np.ndarray, others: tuple[list[Any], ...]
) -> ByteBatch:
    return ByteBatch(torch.from_numpy(_shared_memory.receive(handle)), torch.from_numpy(offsets), others)


#: The ``collate_fn`` of the first column (an image version's bytes).
collate_bytes = CollateBytes()


def split_samples(data: torch.Tensor, offsets: torch.Tensor) -> list[torch.Tensor]:
    """Each sample of a batch's ``data`` as a 1-D view, by its ``offsets`` (what a decode hook splits it with)."""
    bounds = offsets.tolist()
    return [data[start:end] for start, end in itertools.pairwise(bounds)]


def decoded(batches: Iterable[ByteBatch], decode: Decode, *, device: torch.device | str = "cpu") -> Iterator[Any]:
    """Each batch of a DataLoader with :data:`collate_bytes` decoded in this process on ``device``, as
    ``(decode(data, offsets, device), *others)``: the decoding stays out of the workers (and their queues)."""
    for batch in batches:
        yield (batch.decode(decode, device), *batch.others)


def _batch_memory(size: int) -> tuple[torch.Tensor, _shared_memory.Segment | None]:
    """An uninitialised ``uint8`` tensor of ``size`` elements, and the worker's segment it lies in. In this process,
    plain memory; in a DataLoader worker, a segment of its pool, or (all of them held by the main process) fresh
    shared memory, as ``default_collate`` makes its tensors, so that sending it copies nothing."""
    if torch.utils.data.get_worker_info() is None:
        return torch.empty(size, dtype=torch.uint8), None
    segment = _shared_memory.lend(size) if size else None
    if segment is not None:
        return torch.from_numpy(segment.data[:size]), segment
    storage = torch.UntypedStorage._new_shared(size)
    return torch.empty(0, dtype=torch.uint8).set_(storage), None
