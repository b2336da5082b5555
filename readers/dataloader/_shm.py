"""Batches in POSIX shared memory: the layout of a batch in a segment, and the parent's ring of segments.

A batch is laid out column after column in one segment, each column at a 64-byte aligned offset:

- an array (any dtype without Python objects) as its raw bytes in C order;
- a list of ``bytes`` as ``count`` int64 end offsets followed by the concatenated bytes;
- anything else (lists of ``str``, object arrays, mixed lists) as a pickle.

Only the small column specs (offsets, dtypes, shapes) travel through the pipe. The parent creates every
segment and is the only process that unlinks them, so a worker that dies cannot leak one; ``resource_tracker``
stays the last resort for a parent killed with SIGKILL. Segments are reserved with ``posix_fallocate`` so
that a full ``/dev/shm`` is an error at creation, not a SIGBUS in the middle of a copy.
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import pickle
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from datamount.readers.dataloader._collate import Column
from datamount.readers.errors import SharedMemoryError

SEGMENT_PREFIX = "datamount-"
SHM_DIR = "/dev/shm"
_ALIGNMENT = 64
_INT64 = np.dtype(np.int64)


@dataclass(frozen=True)
class ArraySpec:
    """An array column: raw bytes at ``offset``."""

    offset: int
    nbytes: int
    dtype: np.dtype[Any]
    shape: tuple[int, ...]


@dataclass(frozen=True)
class BytesSpec:
    """A list-of-bytes column: ``count`` int64 end offsets at ``offset``, then the bytes."""

    offset: int
    count: int
    nbytes: int


@dataclass(frozen=True)
class PickledSpec:
    """Any other column, pickled."""

    offset: int
    nbytes: int


Spec = ArraySpec | BytesSpec | PickledSpec


@dataclass(frozen=True)
class BatchPlan:
    """Where each column of a batch goes, and what will be written there."""

    nbytes: int
    specs: tuple[Spec, ...]
    payloads: tuple[Any, ...]


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGNMENT) * _ALIGNMENT


#: Values a list-of-bytes column may hold (``reader(..., zero_copy=True)`` yields memoryviews); read back as bytes.
_BYTES_LIKE = (bytes, memoryview)


def plan_batch(columns: Sequence[Column]) -> BatchPlan:
    """Lay out ``columns`` one after the other; pickles the columns that have no raw-bytes form."""
    offset = 0
    specs: list[Spec] = []
    payloads: list[Any] = []
    for column in columns:
        offset = _aligned(offset)
        spec: Spec
        payload: Any
        if isinstance(column, np.ndarray) and not column.dtype.hasobject:
            spec, payload = ArraySpec(offset, column.nbytes, column.dtype, column.shape), column
        elif isinstance(column, list) and all(type(value) in _BYTES_LIKE for value in column):
            lengths = np.fromiter(map(len, column), dtype=_INT64, count=len(column))
            ends = np.cumsum(lengths, dtype=_INT64)
            total = int(ends[-1]) if len(column) else 0
            spec, payload = BytesSpec(offset, len(column), ends.nbytes + total), (ends, column)
        else:
            payload = pickle.dumps(column, protocol=pickle.HIGHEST_PROTOCOL)
            spec = PickledSpec(offset, len(payload))
        specs.append(spec)
        payloads.append(payload)
        offset += spec.nbytes
    return BatchPlan(offset, tuple(specs), tuple(payloads))


def write_batch(buf: memoryview, plan: BatchPlan) -> None:
    """Write the columns of ``plan`` into ``buf`` (a segment at least ``plan.nbytes`` long)."""
    for spec, payload in zip(plan.specs, plan.payloads, strict=True):
        if spec.nbytes == 0:
            continue
        if isinstance(spec, ArraySpec):
            _copy_bytes(_raw_bytes(payload), buf, spec.offset)
        elif isinstance(spec, BytesSpec):
            ends, values = payload
            _copy_bytes(ends.view(np.uint8), buf, spec.offset)
            buf[spec.offset + ends.nbytes : spec.offset + spec.nbytes] = b"".join(values)
        else:
            buf[spec.offset : spec.offset + spec.nbytes] = payload


def _raw_bytes(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def _copy_bytes(source: np.ndarray, buf: memoryview, offset: int) -> None:
    target = np.frombuffer(buf, dtype=np.uint8, count=source.size, offset=offset)
    try:
        target[:] = source
    finally:
        # An array left over the segment's buffer would make SharedMemory.close() fail.
        del target


def read_batch(buf: memoryview, specs: Sequence[Spec]) -> list[Column]:
    """Copy the columns described by ``specs`` out of ``buf`` into memory the caller owns."""
    return [_read_column(buf, spec) for spec in specs]


def _read_column(buf: memoryview, spec: Spec) -> Column:
    if isinstance(spec, ArraySpec):
        array = np.empty(spec.shape, dtype=spec.dtype)
        if spec.nbytes:
            _copy_out(buf, spec.offset, array.reshape(-1).view(np.uint8))
        return array
    if isinstance(spec, BytesSpec):
        if spec.count == 0:
            return []
        ends = np.empty(spec.count, dtype=_INT64)
        _copy_out(buf, spec.offset, ends.view(np.uint8))
        with buf[spec.offset + ends.nbytes : spec.offset + spec.nbytes] as data:
            return [bytes(data[start:end]) for start, end in itertools.pairwise([0, *ends.tolist()])]
    with buf[spec.offset : spec.offset + spec.nbytes] as data:
        return pickle.loads(data)


def _copy_out(buf: memoryview, offset: int, target: np.ndarray) -> None:
    source = np.frombuffer(buf, dtype=np.uint8, count=target.size, offset=offset)
    try:
        target[:] = source
    finally:
        del source


# ------------------------------------------------------------------------------------------------ free space


def free_bytes(directory: str = SHM_DIR) -> int | None:
    """Bytes an unprivileged process may still allocate in ``directory``; None where it cannot be measured."""
    try:
        stats = os.statvfs(directory)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


def ensure_ring_fits(capacity: int, batch_bytes: int, segment_bytes: int, directory: str = SHM_DIR) -> None:
    """Raise :class:`SharedMemoryError` unless ``capacity`` segments of ``segment_bytes`` fit."""
    required = capacity * segment_bytes
    need = f"prefetches capacity={capacity} batches of {_mib(batch_bytes)} in shared memory, {_mib(required)} in all"
    _ensure_free(required, need, directory)


def _ensure_free(required: int, need: str, directory: str) -> None:
    free = free_bytes(directory)
    if free is None or required <= free:
        return
    raise SharedMemoryError(
        f"DataLoader(use_multiprocess=True) {need}, but {directory} has only {_mib(free)} free. Lower "
        "capacity or the batch size, give the machine or container more shared memory (docker run "
        "--shm-size=...; Docker's default is 64 MiB), or pass fallback_to_thread=True to prefetch in a "
        "thread instead."
    )


# ------------------------------------------------------------------------------------------------- segments


@dataclass(frozen=True)
class Slot:
    """One segment of the ring as the worker sees it: where to write its next batch."""

    index: int
    name: str
    size: int


def _segment_size(nbytes: int) -> int:
    page = mmap.PAGESIZE
    return max(page, -(-nbytes // page) * page)


def _create_segment(name: str, size: int) -> SharedMemory:
    segment = SharedMemory(name=name, create=True, size=size)
    try:
        _reserve(name, size)
    except OSError as exc:
        _destroy(segment)
        raise SharedMemoryError(
            f"could not reserve {_mib(size)} of shared memory for a DataLoader batch ({exc.strerror}); "
            f"{_mib(free_bytes() or 0)} are free in {SHM_DIR}. Lower capacity or the batch size, or give the "
            "container more shared memory (docker run --shm-size=...)."
        ) from exc
    return segment


def _reserve(name: str, size: int) -> None:
    # Linux keeps POSIX shared memory in /dev/shm; elsewhere the pages are only allocated when written.
    try:
        fd = os.open(os.path.join(SHM_DIR, name), os.O_RDWR)
    except OSError:
        return
    try:
        os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)


def _buffer(segment: SharedMemory) -> memoryview:
    buf = segment.buf
    if buf is None:
        raise ValueError(f"shared memory segment {segment.name} is closed")
    return buf


def _destroy(segment: SharedMemory) -> None:
    """Unmap and unlink ``segment``; each segment goes through here exactly once."""
    # If a view still exists the mapping goes when it does; the name goes now either way.
    with contextlib.suppress(BufferError):
        segment.close()
    try:
        segment.unlink()
    except FileNotFoundError:
        # SharedMemory.unlink() skips the tracker when the name is already gone; keep the tracker in step.
        resource_tracker.unregister(segment._name, "shared_memory")  # type: ignore[attr-defined]


class SegmentRing:
    """The shared-memory segments of one epoch: ``capacity`` of them, created, resized and unlinked here.

    Segments are created when the first batch's size is known, reused for every batch of the epoch, and
    replaced by a larger one only when a batch does not fit (with 50 % headroom so that growth stays rare).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        # The creator's pid tells whose a leftover is; short enough for macOS's 31-character limit.
        self._prefix = f"{SEGMENT_PREFIX}{os.getpid()}-{secrets.token_hex(4)}-"
        self._segments: list[SharedMemory | None] = [None] * capacity
        self._generation = 0

    @property
    def allocated(self) -> bool:
        return any(segment is not None for segment in self._segments)

    def allocate(self, batch_bytes: int) -> list[Slot]:
        """Create every segment, sized for a batch of ``batch_bytes``, after checking that they fit."""
        size = _segment_size(batch_bytes)
        ensure_ring_fits(self.capacity, batch_bytes, size)
        return [self._replace(index, size) for index in range(self.capacity)]

    def grow(self, index: int, batch_bytes: int) -> Slot:
        """Replace segment ``index`` with one that holds ``batch_bytes``."""
        current = self._segments[index]
        old_size = current.size if current is not None else 0
        size = _segment_size(max(batch_bytes, old_size + old_size // 2))
        extra = size - old_size
        need = f"needs {_mib(extra)} more shared memory for a batch of {_mib(batch_bytes)}"
        _ensure_free(extra, need, SHM_DIR)
        return self._replace(index, size)

    def _replace(self, index: int, size: int) -> Slot:
        old = self._segments[index]
        if old is not None:
            self._segments[index] = None
            _destroy(old)
        self._generation += 1
        name = f"{self._prefix}{self._generation}"
        self._segments[index] = _create_segment(name, size)
        return Slot(index, name, size)

    def slot(self, index: int) -> Slot:
        segment = self._segments[index]
        if segment is None:
            raise ValueError(f"segment {index} is not allocated")
        return Slot(index, segment.name, segment.size)

    def read(self, index: int, specs: Sequence[Spec]) -> list[Column]:
        segment = self._segments[index]
        if segment is None:
            raise ValueError(f"segment {index} is not allocated")
        return read_batch(_buffer(segment), specs)

    def release(self) -> None:
        """Unmap and unlink every segment; safe to call more than once."""
        segments, self._segments = self._segments, [None] * self.capacity
        for segment in segments:
            if segment is not None:
                _destroy(segment)


def _attach(name: str) -> SharedMemory:
    if sys.version_info >= (3, 13):
        return SharedMemory(name=name, track=False)
    # Before 3.13 attaching registers the name with the resource tracker. The parent registered it first with
    # the same tracker (it is shared with workers), so this adds nothing and the parent's unlink clears it.
    return SharedMemory(name=name)


class AttachedSegments:
    """The worker's view of the ring: segments attached by name, never unlinked here."""

    def __init__(self) -> None:
        self._segments: dict[int, SharedMemory] = {}

    def buffer(self, slot: Slot) -> memoryview:
        segment = self._segments.get(slot.index)
        if segment is None or segment.name != slot.name:
            if segment is not None:
                segment.close()
            segment = self._segments[slot.index] = _attach(slot.name)
        return _buffer(segment)

    def close(self) -> None:
        for segment in self._segments.values():
            with contextlib.suppress(BufferError):
                segment.close()
        self._segments.clear()
