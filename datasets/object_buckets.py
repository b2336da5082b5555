"""The objects that versions name, compared with a store's a folder at a time: memory bounded whatever the rows.

The rule: a file's object is stored at ``objects/ab/abcdef…`` (:func:`~datamount.datasets.layout.object_key`), so
the first two hex digits of its sha256 name its folder. What a check or a removal needs of the objects that
versions name (each one's sha256 and size) is put, as their entries are read part by part, in the bucket of its
folder: in memory while there are at most :data:`HELD_RECORDS` of them, then in one file per bucket in a temporary
folder. Each bucket is then compared with the listing of its own folder alone, so that memory holds one bucket and
a few folders' listings (about 1/256 of the objects each), never a set of every object a version names, nor a
listing of the whole objects area.
"""

from __future__ import annotations

import os
import posixpath
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType

from datamount.datasets import layout
from datamount.datasets.file_entry import FileEntry
from datamount.storage import Store

#: Objects kept in memory before the buckets go to disk (40 bytes each: about 2.6 MB).
HELD_RECORDS = 1 << 16
#: Folders of objects listed at once (each listing is held until its bucket is compared).
LISTINGS_IN_FLIGHT = 8
#: A bucket's record: the object's sha256 (32 bytes) and size (8 bytes, big-endian).
_RECORD = 40
_BUCKETS = 256


class ObjectBuckets:
    """The distinct objects ``entries`` name (sha256 and size), by the folder of ``objects/`` that holds each.

    Reads ``entries`` once; a context manager (the buckets that went to disk are removed at its exit).
    """

    def __init__(self, entries: Iterable[FileEntry], *, held_records: int = HELD_RECORDS) -> None:
        if held_records < 1:
            raise ValueError(f"held_records must be >= 1, got {held_records}")
        self._held = [bytearray() for _ in range(_BUCKETS)]
        self._counts = [0] * _BUCKETS
        self._spill: tempfile.TemporaryDirectory[str] | None = None
        try:
            self._add(entries, held_records)
        except BaseException:
            self.close()
            raise

    def _add(self, entries: Iterable[FileEntry], held_records: int) -> None:
        held = 0
        for entry in entries:
            digest = bytes.fromhex(entry.sha256)
            bucket = digest[0]
            self._held[bucket] += digest + entry.size.to_bytes(8, "big")
            self._counts[bucket] += 1
            held += 1
            if held >= held_records:
                self._write_out()
                held = 0

    def _write_out(self) -> None:
        """Append each bucket held in memory to its file."""
        if self._spill is None:
            self._spill = tempfile.TemporaryDirectory(prefix="datamount-objects-")
        for bucket, records in enumerate(self._held):
            if records:
                with open(os.path.join(self._spill.name, f"{bucket:02x}"), "ab") as out:
                    out.write(records)
                self._held[bucket] = bytearray()

    @property
    def folders(self) -> list[str]:
        """The folders of ``objects/`` that hold an object named (``"ab"``), in order."""
        return [f"{bucket:02x}" for bucket, count in enumerate(self._counts) if count]

    def bucket(self, folder: str) -> dict[str, int]:
        """The size of each object named whose folder is ``folder`` (``"ab"``), by sha256 (empty for a name that
        is no folder of ``objects/``)."""
        try:
            number = int(folder, 16) if len(folder) == 2 else -1
        except ValueError:
            return {}
        if not 0 <= number < _BUCKETS or not self._counts[number]:
            return {}
        records: bytes | bytearray = self._held[number]
        if self._spill is not None and os.path.exists(path := os.path.join(self._spill.name, f"{number:02x}")):
            with open(path, "rb") as spilled:
                records = spilled.read() + records
        view = memoryview(records)
        return {
            view[at : at + 32].hex(): int.from_bytes(view[at + 32 : at + _RECORD], "big")
            for at in range(0, len(records), _RECORD)
        }

    def close(self) -> None:
        if self._spill is not None:
            self._spill.cleanup()
            self._spill = None

    def __enter__(self) -> ObjectBuckets:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def compared(store: Store, name: str, entries: Iterable[FileEntry]) -> Iterator[tuple[str, int, bool]]:
    """Each distinct object of dataset ``name`` that ``entries`` name: its sha256, its size, and whether ``store``
    holds it at that size; a folder of ``objects/`` at a time (so in the order of their folders, not of
    ``entries``)."""
    area = f"{layout.dataset_folder(name)}/{layout.OBJECTS}"
    with ObjectBuckets(entries) as named:
        folders = named.folders
        for folder, listing in zip(folders, listings(store, [f"{area}/{f}" for f in folders]), strict=True):
            for sha256, size in named.bucket(folder).items():
                yield sha256, size, listing.get(f"{area}/{folder}/{sha256}") == size


def absent(store: Store, name: str, entries: Iterable[FileEntry]) -> Iterator[str]:
    """The store paths of the objects of dataset ``name`` that ``entries`` name and ``store`` lacks (or holds at
    another size), a folder of ``objects/`` at a time."""
    for sha256, _, stored in compared(store, name, entries):
        if not stored:
            yield layout.object_path(name, sha256)


def unused(store: Store, name: str, entries: Iterable[FileEntry]) -> Iterator[list[str]]:
    """The store paths of the objects of dataset ``name`` that ``store`` holds and ``entries`` do not name, a folder
    of ``objects/`` at a time (with what lies in ``objects/`` itself, outside any folder, first)."""
    area = f"{layout.dataset_folder(name)}/{layout.OBJECTS}"
    with ObjectBuckets(entries) as used:
        yield list(store.list(area, recursive=False))  # no object is kept there
        folders = store.list_folders(area)
        for folder, listing in zip(folders, listings(store, folders), strict=True):
            kept = used.bucket(posixpath.basename(folder))
            yield [path for path in listing if posixpath.basename(path) not in kept]


def listings(store: Store, prefixes: list[str]) -> Iterator[dict[str, int]]:
    """The listing of each of ``prefixes`` (:meth:`Store.list`), in order, :data:`LISTINGS_IN_FLIGHT` asked for at
    once (remote listings wait on the network)."""
    if not prefixes:
        return
    with ThreadPoolExecutor(min(LISTINGS_IN_FLIGHT, len(prefixes)), thread_name_prefix="datamount-list") as pool:
        pending: deque[Future[dict[str, int]]] = deque()
        try:
            for prefix in prefixes:
                pending.append(pool.submit(store.list, prefix))
                if len(pending) >= LISTINGS_IN_FLIGHT:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
