"""Shared memory that a DataLoader worker lends to the process receiving its batches, and gets back once the
receiver has dropped every view of it.

The rule: a worker writes a segment only while the segment's *lent* byte is 0; it sets the byte to 1 before it
fills the segment, and the receiver sets it back to 0 when the last view of the batch it holds (the numpy array under
its tensors) is garbage collected. A view the user keeps therefore never changes; a worker whose segments are all
held makes no new one beyond :data:`SEGMENTS_PER_WORKER` and lets the caller fall back to fresh shared memory.

Why reuse: a fresh shared-memory segment per batch (what torch's own tensor sharing makes) costs its creation and a
page fault for every 4 KiB the worker writes, more than the copy itself; a segment written before costs only the
copy. A segment is a ``memfd`` (freed by the kernel once no process maps it), sent once per receiver as a file
descriptor through :mod:`multiprocessing`'s resource sharer, later batches naming it by its token.

NOTE [ Segment tokens ]: a segment is named by a random 128-bit token, drawn when the segment is made and written
in its own header, never by its worker's pid. A pid names a process only while it lives: with
``persistent_workers=False`` each epoch starts new workers, and on a long job the kernel gives an ended worker's pid to
a new one. Named by ``(pid, serial)``, the new worker's segments took the names of the ended worker's, which the
receiver still mapped, and their batches came with another batch's bytes. No process draws a token another has drawn
(two of 2**32 segments share one with odds of 2**-65), so a handle names one segment for good; on every batch the
receiver checks that the segment it maps under the handle's token carries that token in its header (a 16-byte
compare), and a batch whose segment does not is an :class:`~datamount.storage.IntegrityError`, never bytes. When the
receiver maps a new segment it forgets those of ended workers: of a pid that is gone, and of the new segment's pid
from another pool (each worker's pool has a token too: a pid names one process at a time, so that pool's has ended).
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from dataclasses import dataclass, field
from multiprocessing import resource_sharer

import numpy as np

from datamount.storage import IntegrityError

#: Bytes before a segment's data: [0] lent by the worker, [1] mapped by the receiver, [16:32] the segment's token.
HEADER = 64
#: Segments a worker keeps; when every one is held by the receiver, a batch goes through fresh shared memory.
SEGMENTS_PER_WORKER = 8
#: Segments grow in steps of this size, with a quarter of headroom, so that batches of varying size reuse them.
GRAIN = 1 << 20
#: The name a segment has in ``/proc/<pid>/maps`` (``/memfd:datamount-batch (deleted)``).
NAME = "datamount-batch"

_LENT, _MAPPED = 0, 1
#: Where a segment's header holds its token (NOTE [ Segment tokens ]).
TOKEN = slice(16, 32)
#: ``memfd_create`` and ``MAP_POPULATE`` are Linux's; elsewhere every batch goes through fresh shared memory.
SUPPORTED = hasattr(os, "memfd_create") and hasattr(mmap, "MAP_POPULATE")


def _token() -> bytes:
    return os.urandom(TOKEN.stop - TOKEN.start)


@dataclass(frozen=True)
class SegmentHandle:
    """What a batch's pickle carries to name its memory: the segment's token, the worker (its pid, and its pool's
    token), the descriptor itself only until the receiver has mapped the segment, and the tokens of the worker's
    segments retired since its last batch."""

    pid: int
    pool: bytes
    token: bytes
    capacity: int
    size: int
    descriptor: resource_sharer.DupFd | None
    retired: tuple[bytes, ...]


@dataclass(eq=False)
class Segment:
    """One segment of a worker's pool: ``data`` is its writable data region; its header holds ``token``."""

    pool: bytes
    token: bytes
    descriptor: int
    memory: mmap.mmap
    data: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.data = np.frombuffer(self.memory, dtype=np.uint8, offset=HEADER)

    @property
    def capacity(self) -> int:
        return len(self.data)

    def handle(self, size: int, retired: tuple[bytes, ...]) -> SegmentHandle:
        mapped = self.memory[_MAPPED] == 1
        descriptor = None if mapped else resource_sharer.DupFd(self.descriptor)
        return SegmentHandle(os.getpid(), self.pool, self.token, self.capacity, size, descriptor, retired)


class _Pool:
    """A worker's segments (one pool per process: a forked child starts its own)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.token = _token()
        self.segments: list[Segment] = []
        self.retired: list[bytes] = []
        self.lock = threading.Lock()

    def lend(self, size: int) -> Segment | None:
        with self.lock:
            free = [segment for segment in self.segments if segment.memory[_LENT] == 0]
            fitting = [segment for segment in free if segment.capacity >= size]
            if fitting:
                chosen = min(fitting, key=lambda segment: segment.capacity)
            elif len(self.segments) < SEGMENTS_PER_WORKER:
                chosen = self._new(size)
            elif free:
                self._retire(min(free, key=lambda segment: segment.capacity))
                chosen = self._new(size)
            else:
                return None
            chosen.memory[_LENT] = 1
            return chosen

    def take_retired(self) -> tuple[bytes, ...]:
        with self.lock:
            retired, self.retired = tuple(self.retired), []
            return retired

    def _new(self, size: int) -> Segment:
        capacity = -(-(size + size // 4) // GRAIN) * GRAIN
        descriptor = os.memfd_create(NAME, os.MFD_CLOEXEC)
        try:
            os.ftruncate(descriptor, HEADER + capacity)
            # Populated in one call: a page fault for each 4 KiB the first batch writes costs more than the copy.
            memory = mmap.mmap(descriptor, HEADER + capacity, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
        except BaseException:
            os.close(descriptor)
            raise
        segment = Segment(self.token, _token(), descriptor, memory)
        memory[TOKEN] = segment.token
        self.segments.append(segment)
        return segment

    def _retire(self, segment: Segment) -> None:
        # Its pages stay while the receiver maps them; the receiver forgets it when the next batch says so.
        self.segments.remove(segment)
        os.close(segment.descriptor)
        self.retired.append(segment.token)


_pool: _Pool | None = None


def lend(size: int) -> Segment | None:
    """A segment of this process's pool with room for ``size`` bytes, marked lent; None when every segment is held
    (or on a system without ``memfd_create``)."""
    global _pool
    if not SUPPORTED:
        return None
    if _pool is None or _pool.pid != os.getpid():
        _pool = _Pool()
    return _pool.lend(size)


def handle(segment: Segment, size: int) -> SegmentHandle:
    """``segment``'s handle for a batch of its first ``size`` bytes."""
    retired = _pool.take_retired() if _pool is not None and _pool.pid == os.getpid() else ()
    return segment.handle(size, retired)


@dataclass(frozen=True)
class _Mapping:
    """A segment the receiver has mapped, and the worker that made it (its pid and its pool's token)."""

    pid: int
    pool: bytes
    memory: mmap.mmap


#: The receiver's mapped segments by token, and the tokens of those whose batch it holds.
_received: dict[bytes, _Mapping] = {}
_held: set[bytes] = set()
_received_lock = threading.Lock()


def receive(handle: SegmentHandle) -> np.ndarray:
    """The batch's bytes in the receiver: a view of the worker's segment, given back to the worker once the view
    (and every array or tensor made from it) is gone."""
    token = handle.token
    with _received_lock:
        for retired in handle.retired:
            _received.pop(retired, None)
        if token in _held:
            raise RuntimeError(
                f"a batch from process {handle.pid} was unpickled twice: the memory of a batch made by "
                "collate_bytes in a DataLoader worker goes back to the worker when the one copy received is dropped"
            )
        mapping = _received.get(token)
        if mapping is None:
            mapping = _Mapping(handle.pid, handle.pool, _map(handle))
            _forget_ended_workers(handle)
            _received[token] = mapping
        memory = mapping.memory
        if memory[TOKEN] != token:
            raise _overwritten(handle, memory[TOKEN])
        _held.add(token)
    data = np.frombuffer(memory, dtype=np.uint8, count=handle.size, offset=HEADER)
    finalizer = weakref.finalize(data, _give_back, memory, token, os.getpid())
    finalizer.atexit = False
    return data


def _overwritten(handle: SegmentHandle, found: bytes) -> IntegrityError:
    return IntegrityError(
        f"a batch from DataLoader worker {handle.pid} names shared-memory segment {handle.token.hex()} "
        f"(/memfd:{NAME}), but the segment's header carries {found.hex()}: another process wrote over the segment, "
        "so its bytes are not the batch's. Only the worker that made a collate_bytes segment may write it: stop what "
        f"else writes the workers' memory (a process opening /proc/{handle.pid}/fd/), then run the epoch again"
    )


def _map(handle: SegmentHandle) -> mmap.mmap:
    if handle.descriptor is None:
        raise RuntimeError(
            f"a batch from process {handle.pid} names shared memory (segment {handle.token.hex()}) that this "
            "process never received: a batch made by collate_bytes in a DataLoader worker can be unpickled once, "
            "by the process that iterates the loader"
        )
    descriptor = handle.descriptor.detach()
    try:
        memory = mmap.mmap(descriptor, HEADER + handle.capacity)
    finally:
        os.close(descriptor)
    memory[_MAPPED] = 1
    return memory


def _give_back(memory: mmap.mmap, token: bytes, receiver: int) -> None:
    # A forked child holds copies of the receiver's arrays; only the receiver's own release counts.
    if os.getpid() == receiver:
        with _received_lock:
            _held.discard(token)
        memory[_LENT] = 0


def _forget_ended_workers(newcomer: SegmentHandle) -> None:
    """Forget the segments of workers that have ended: those of a pid that is gone, and those of ``newcomer``'s pid
    from another pool (a pid names one process at a time: that pool's process has ended)."""
    others = {mapping.pid for mapping in _received.values()} - {newcomer.pid}
    alive = {pid: _alive(pid) for pid in others}
    for token in [
        token
        for token, mapping in _received.items()
        if mapping.pool != newcomer.pool and not alive.get(mapping.pid, False)
    ]:
        del _received[token]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user: kept, as a live one
        pass
    return True
