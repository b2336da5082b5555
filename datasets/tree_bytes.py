"""The bytes of a version's tree (:mod:`datamount.datasets.tree`), checked before anyone sees them: what every front
end that serves the tree's files (the mount, ``datamount://`` URLs) reads through.

A file is served only from bytes checked against its manifest: an object against its xxh3-64 (its sha256 before
format 4), the list and a shard without block checksums against their sha256, a packed image file (a row) against
its file's checksum after its row group passed its pages' CRCs. A range of a shard that records the xxh3-64 of each
of its blocks (format 5) is read in whole blocks, each checked, so that a column read from a large shard fetches
about its column chunks and not the shard; so is a range of a list whose blocks of lines the manifest records
(format 6); any other file is checked whole on its first read (through the content
cache on a remote store, which keys it by sha256). A mismatch is an :class:`~datamount.storage.IntegrityError`
(an ``OSError`` with ``errno.EIO``) naming the file; no byte of it is returned.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable

from datamount.datasets import layout
from datamount.datasets.manifest import Manifest, ShardEntry
from datamount.datasets.row_folders import encoder_of
from datamount.datasets.rows import ShardRows, closing
from datamount.datasets.tree import Content
from datamount.storage import IntegrityError, Store
from datamount.storage.cache import ContentCache
from datamount.storage.checksums import matches, xxh3

#: A list longer than this whose blocks of lines the manifest records is read by ranges of its blocks; a shorter one
#: whole, once (through the content cache on a remote store).
RANGED_LIST_BYTES = 4 << 20
#: Bytes of such a list's blocks read at once for a reader going on in order (the mount, ``datamount://``).
LIST_READ_AHEAD = 4 << 20


class TreeBytes:
    """Checked bytes of the files of ``manifest``'s tree, from ``store`` (a remote store's whole objects, lists and
    shards through ``cache`` when given)."""

    def __init__(self, store: Store, manifest: Manifest, *, cache: ContentCache | None = None) -> None:
        self.store = store
        self.manifest = manifest
        self.cache = cache
        self._remote = store.local_path() is None
        self._rows: ShardRows | None = None

    def ranged(self, content: Content) -> bool:
        """Whether ranges of the file are read on their own (a shard with block checksums: :meth:`fill_blocks`; a
        list longer than :data:`RANGED_LIST_BYTES` whose blocks the manifest records: :meth:`list_blocks`);
        otherwise the file is read whole (:meth:`read`) and its ranges served from those bytes."""
        if content.kind == "list":
            return self.manifest.list_blocks is not None and self.manifest.list_size > RANGED_LIST_BYTES
        return content.kind == "shard" and content.shard is not None and bool(content.shard.blocks)

    def list_blocks(self, start: int, end: int, *, ahead: int = 0, name: str) -> tuple[int, bytes]:
        """The whole blocks of the list that hold its bytes ``start`` to ``end - 1``, and those that start less than
        ``ahead`` bytes after ``end`` (read ahead of a reader going on in order), in one read, each checked: where
        the first starts, and their bytes."""
        blocks = self.manifest.list_blocks
        assert blocks is not None
        size = self.manifest.list_size
        numbers = blocks.holding(start, min(max(end, start + 1), size))
        if not numbers:
            return start, b""
        last = min(max(numbers[-1], bisect.bisect_left(blocks.offsets, end + ahead) - 1), len(blocks) - 1)
        first_byte, last_byte = blocks.offsets[numbers[0]], blocks.byte_range(last, size)[1]
        path = layout.list_path(self.manifest)
        data = self.store.read_range(path, first_byte, last_byte)
        view = memoryview(data)
        for block in range(numbers[0], last + 1):
            low, high = blocks.byte_range(block, size)
            try:
                blocks.check(block, view[low - first_byte : high - first_byte], self.store.url_for(path))
            except IntegrityError as damaged:
                if block > numbers[-1]:  # read ahead only: the run ends before it, and a read of it raises
                    return first_byte, data[: low - first_byte]
                raise IntegrityError(f"{name}: {damaged}") from damaged
        return first_byte, data

    def fill_blocks(self, content: Content, first: int, stop: int, into: memoryview, *, name: str) -> None:
        """Blocks ``first`` to ``stop - 1`` of a shard with block checksums, read into ``into`` (as long as they
        are) in one read, each then checked: a caller uses them only once this returns. A local store's shard is
        read straight into ``into`` (no bytes object in between)."""
        shard = content.shard
        assert shard is not None and shard.blocks
        path = layout.shard_path(self.manifest.name, shard)
        start, end = first * shard.block_bytes, min(stop * shard.block_bytes, shard.size)
        if not _read_into(None if self._remote else self.store.local_path(path), start, into):
            data = self.store.read_range(path, start, end)
            into[: len(data)] = data
        _check_blocks(shard, first, into, name)

    def read(self, content: Content, *, name: str) -> bytes:
        """The whole file, checked; ``name`` names it in errors."""
        if content.kind == "shard":
            assert content.shard is not None
            shard = content.shard
            return self._checked(layout.shard_path(self.manifest.name, shard), shard.size, shard.sha256, "", name)
        if content.kind == "object":
            assert content.entry is not None
            entry = content.entry
            path = layout.object_path(self.manifest.name, entry.sha256)
            return self._checked(path, entry.size, entry.sha256, entry.xxh3, name)
        if content.kind == "list":
            path = layout.list_path(self.manifest)
            return self._checked(path, self.manifest.list_size, self.manifest.list_sha256, "", name)
        return self._rows_bytes(content, name)

    def _checked(self, path: str, size: int, sha256: str, fast: str, name: str) -> bytes:
        """The object at ``path``, which must have ``size`` bytes and that xxh3-64 (``fast``) or sha256: through the
        cache for a remote store (which checks what it takes in), and checked again here, as it is handed out."""
        intact: Callable[[bytes], bool] = lambda data: len(data) == size and matches(data, sha256, fast)  # noqa: E731
        if self.cache is not None and self._remote:
            fill = lambda out: out.write(self.store.read(path))  # noqa: E731
            try:  # a kept copy damaged since it was hashed is fetched again: only the store's copy is blamed
                return self.cache.read(sha256, size, fill, check=intact, name=self.store.url_for(path))
            except IntegrityError as damaged:
                raise IntegrityError(f"{name}: {damaged}") from damaged
        data = self.store.read(path)
        if not intact(data):
            got = f"{len(data):,} bytes" if len(data) != size else "other bytes"
            raise IntegrityError(
                f"{name}: {self.store.url_for(path)} holds {got} than the manifest of {self.manifest.ref} records "
                "(a damaged copy)"
            )
        return data

    def _rows_bytes(self, content: Content, name: str) -> bytes:
        """A file made of rows (a packed image version's file: one row; a version without a list's: rows
        ``content.row`` to ``content.stop - 1``), from its shards, checked against its file's checksum."""
        if self._rows is None:
            # No cache: a file of one row comes with its row group (a ranged read), not its whole shard.
            self._rows = ShardRows(self.store, self.manifest)
        stop = content.row + 1 if content.kind == "row" else content.stop
        encode = encoder_of(self.manifest)
        with closing(self._rows.rows(content.row, stop)) as rows:
            data = b"".join(map(encode, itertools.islice(rows, stop - content.row)))
        entry = content.entry
        assert entry is not None
        if len(data) != content.size or not matches(data, entry.sha256, entry.xxh3):
            raise IntegrityError(
                f"{name}: the bytes of {self.manifest.ref}'s shards for it do not match its checksum (a damaged shard)"
            )
        return data


def _read_into(local: str | None, start: int, into: memoryview) -> bool:
    """Whether the bytes from ``start`` of the local file ``local`` were read into ``into`` (up to its end: a short
    file leaves the rest as it was, which its blocks' checks then refuse); ``False`` when there is no local file to
    read, or it cannot be read (the store then reads it, and names what went wrong)."""
    if local is None:
        return False
    try:
        with open(local, "rb", buffering=0) as file:
            file.seek(start)
            done = 0
            while done < len(into):
                got = file.readinto(into[done:])
                if not got:
                    break
                done += got
    except OSError:
        return False
    return True


def _check_blocks(shard: ShardEntry, first: int, data: bytes | memoryview, name: str) -> None:
    """Raise :class:`IntegrityError` unless ``data``, the shard's blocks from block ``first`` on, has their
    checksums."""
    view = memoryview(data)
    for index in range(first, first + -(-len(data) // shard.block_bytes)):
        block = view[(index - first) * shard.block_bytes : (index - first + 1) * shard.block_bytes]
        if index >= len(shard.blocks) or xxh3(block) != shard.blocks[index]:
            raise IntegrityError(
                f"{name}: block {index} of shard {shard.path} ({shard.block_bytes:,} bytes from byte "
                f"{index * shard.block_bytes:,}) does not match its checksum (a damaged shard)"
            )
