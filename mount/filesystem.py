"""The FUSE operations of a mounted version (pyfuse3 over libfuse 3): a read-only tree (a
:class:`~datamount.mount.tree_view.MountTree`: built whole, or made a node at a time from an indexed version's
indexes), bytes from :class:`~datamount.mount.content.Contents`, and read-ahead of the files a reader will open next.

Requests are served by trio tasks in one thread; fetching and checking bytes happens in the contents' threads, and
a tree that reads its indexes to answer is asked in a thread too, so a request waiting for its bytes or its names
holds up no other. Names and attributes come with directory listings (readdirplus) and are kept by the kernel: the
tree never changes while it is mounted. Each node handed to the kernel (a lookup, an entry of a listing) is counted,
and each ``forget`` counted off, so that a tree made node by node keeps no more than the kernel holds (an indexed
version's, the folders it holds: a file's node is made again from its number, see lazy_tree.py); an open folder
holds a window of its nodes, made from the tree's listing as the kernel reads on (:mod:`~datamount.mount.open_folder`).

Read-ahead follows each reader: a file opened right after its list predecessor starts a window of the next files in
list order, one opened right after the file before it in its folder a window of the files after it there (what
``find``, ``os.walk`` and ``ImageFolder``'s scan open next); a file opened at random (a shuffled training pass) is
fetched alone. When the reader reaches the middle of its window, the next window is fetched, so that each reader
keeps between half a window and a window of bytes ahead; concurrent readers each keep their own. The
files of a window go into the kernel's page cache as their bytes come (:mod:`~datamount.mount.push`), so that most
files are read with no request to this process.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import logging
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import pyfuse3
import trio

from datamount.datasets.rows import removed_or_missing
from datamount.datasets.tree import Node
from datamount.mount.content import DEFAULT_READ_AHEAD, Contents
from datamount.mount.open_folder import FolderCursor
from datamount.mount.push import PageCacheFiller, RunSoon
from datamount.mount.recent import Recent
from datamount.mount.tree_view import FOLDER, LIST, MountTree
from datamount.storage import DatamountError, ObjectNotFoundError
from datamount.storage.redact import redact_url

log = logging.getLogger("datamount.mount")

#: Files in one read-ahead window, at most.
WINDOW_FILES = 256
#: Files offered to the kernel after a file that a reader opened before it was pushed (a reader caught up with them).
PUSH_AFTER_MISS = 32
#: Opens remembered to tell which order a reader follows.
RECENT_OPENS = 64
#: Seconds the kernel keeps names and attributes: a mounted version never changes.
METADATA_SECONDS = 3600.0
#: Files remembered as in a read-ahead window, and windows' middle files waiting to be opened: the last this many.
WINDOWED_KEPT = 1 << 16

Answer = TypeVar("Answer")

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class DatasetFilesystem(pyfuse3.Operations):
    """``tree`` as a read-only filesystem, its files' bytes from ``contents`` (checked before they are served)."""

    def __init__(
        self, tree: MountTree, contents: Contents, *, read_ahead: int = DEFAULT_READ_AHEAD, created_ns: int = 0
    ) -> None:
        super().__init__()
        self.tree = tree
        self.contents = contents
        self.read_ahead = read_ahead
        self._time = created_ns
        self._uid, self._gid = os.getuid(), os.getgid()
        self._handles: dict[int, tuple[Node, bytes | None]] = {}
        #: For each open handle of a file served by ranges (a long list), the run of checked blocks it read last.
        self._runs: dict[int, tuple[int, bytes]] = {}
        self._next_handle = itertools.count(1)
        #: Where each open folder's listing is: a window of its nodes (see open_folder.py).
        self._listings: dict[int, FolderCursor] = {}
        self._recent: deque[Node] = deque(maxlen=RECENT_OPENS)
        #: The files that were in a read-ahead window (the last :data:`WINDOWED_KEPT`).
        self._windowed: Recent[int, bool] = Recent(WINDOWED_KEPT)
        #: A file whose opening fetches the next window: the window's last file and the order it follows.
        self._triggers: Recent[int, tuple[Node, str]] = Recent(WINDOWED_KEPT)
        self.filler = PageCacheFiller(
            pyfuse3.notify_store,
            lambda node, unit: contents.file_of(node.content, unit),
            lambda node: None if node.content is None else contents.coming(node.content),
        )

    # --------------------------------------------------------------------------------------------- metadata

    async def lookup(self, parent_inode: int, name: bytes, ctx: Any = None) -> pyfuse3.EntryAttributes:
        parent = await self._node(parent_inode)
        text = os.fsdecode(name)
        if text in (".", ".."):
            node: Node | None = parent if text == "." else parent.parent or parent
        else:
            node = await self._ask(self.tree.child, parent, text)
        if node is None:
            missing = pyfuse3.EntryAttributes()
            missing.st_ino = 0  # a negative entry, kept by the kernel
            missing.entry_timeout = METADATA_SECONDS
            return missing
        self.filler.request(_run_soon)
        self.filler.listed(node)
        attributes = self._attributes(node)
        self.tree.looked_up(node)
        return attributes

    async def getattr(self, inode: int, ctx: Any = None) -> pyfuse3.EntryAttributes:
        self.filler.request(_run_soon)
        return self._attributes(await self._node(inode))

    async def opendir(self, inode: int, ctx: Any) -> int:
        folder = await self._node(inode)
        if not folder.is_folder:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        handle = next(self._next_handle)
        self._listings[handle] = FolderCursor(folder, self.tree.listing)
        return handle

    async def readdir(self, fh: int, start_id: int, token: Any) -> None:
        cursor = self._listings[fh]
        self.filler.request(_run_soon)
        offset = start_id
        while True:
            nodes = cursor.held(offset)
            if not nodes:
                await self._ask(cursor.move, offset)
                nodes = cursor.held(offset)
                if not nodes:
                    return  # the folder's end
            for child in nodes:
                if not pyfuse3.readdir_reply(token, os.fsencode(child.name), self._attributes(child), offset + 1):
                    return
                offset += 1
                self.tree.looked_up(child)
                self.filler.listed(child)

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        opened = {node.inode for node, _ in self._handles.values()}  # never pushed while open (see push.py)
        for inode, count in inode_list:
            self.tree.forget(inode, count)
        self.filler.forgotten(inode for inode, _ in inode_list if inode not in opened)

    async def releasedir(self, fh: int) -> None:
        self._listings.pop(fh, None)

    async def statfs(self, ctx: Any) -> pyfuse3.StatvfsData:
        data = pyfuse3.StatvfsData()
        data.f_bsize = data.f_frsize = 4096
        data.f_blocks = (self.tree.size + 4095) // 4096
        data.f_bfree = data.f_bavail = data.f_ffree = data.f_favail = 0
        data.f_files = self.tree.count
        data.f_namemax = 255
        return data

    async def access(self, inode: int, mode: int, ctx: Any) -> bool:
        await self._node(inode)
        return not mode & os.W_OK

    # ------------------------------------------------------------------------------------------------ files

    async def open(self, inode: int, flags: int, ctx: Any) -> pyfuse3.FileInfo:
        node = await self._node(inode)
        if node.is_folder:
            raise pyfuse3.FUSEError(errno.EISDIR)
        if flags & _WRITE_FLAGS:
            raise pyfuse3.FUSEError(errno.EROFS)
        self.filler.request(_run_soon)
        await self._read_ahead(node)
        self.filler.opened(node.inode)
        handle = next(self._next_handle)
        self._handles[handle] = (node, None)
        return pyfuse3.FileInfo(fh=handle, keep_cache=True)

    async def read(self, fh: int, offset: int, size: int) -> bytes:
        node, data = self._handles[fh]
        if node.content is not None and self.contents.by_ranges(node.content):
            return await self._range_of(fh, node, offset, min(offset + size, node.content.size))
        if data is None:
            self.filler.served(node.inode)
            data = await self._bytes_of(node)
            if fh in self._handles:
                self._handles[fh] = (node, data)
        return data[offset : offset + size]

    async def release(self, fh: int) -> None:
        self.filler.request(_run_soon)
        self._handles.pop(fh, None)
        self._runs.pop(fh, None)

    # ---------------------------------------------------------------------------------------------- helpers

    async def _node(self, inode: int) -> Node:
        node = self.tree.known(inode)
        if node is None:
            node = await self._ask(self.tree.node, inode)
        if node is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return node

    async def _ask(self, question: Callable[..., Answer], *arguments: Any) -> Answer:
        """The tree's answer: asked in a thread where the tree may read its indexes to answer; a failure to read
        them (a part lost or damaged, an unreachable store) is ``EIO``, logged."""
        try:
            if not self.tree.blocking:
                return question(*arguments)
            return await trio.to_thread.run_sync(question, *arguments)
        except (DatamountError, OSError) as exc:
            log.error("the version's indexes: %s", redact_url(str(exc)))
            raise pyfuse3.FUSEError(errno.EIO) from exc

    def _attributes(self, node: Node) -> pyfuse3.EntryAttributes:
        """The node's attributes (made each time they are asked for: the kernel keeps them, and a node the kernel
        holds keeps no more than it must)."""
        content = node.content
        entry = pyfuse3.EntryAttributes()
        entry.st_ino = node.inode
        entry.generation = 0
        entry.st_mode = node.mode
        entry.st_nlink = self.tree.links(node)
        entry.st_size = 0 if content is None else content.size
        entry.st_blocks = 0 if content is None else (content.size + 511) // 512
        entry.st_blksize = 128 << 10
        entry.st_uid, entry.st_gid = self._uid, self._gid
        entry.st_atime_ns = entry.st_mtime_ns = entry.st_ctime_ns = self._time
        entry.attr_timeout = entry.entry_timeout = METADATA_SECONDS
        return entry

    async def _bytes_of(self, node: Node) -> bytes:
        """The file's checked bytes; a failure (damaged bytes, an unreachable store) is ``EIO``, logged."""
        assert node.content is not None
        try:
            unit = await _result(self.contents.fetch(node.content))
            return self.contents.file_of(node.content, unit)
        except (DatamountError, OSError) as exc:
            raise await self._failed(node, exc) from exc

    async def _range_of(self, fh: int, node: Node, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end - 1`` of a file served by ranges: from the run of its checked blocks the handle
        read last, else from a new run (read in a thread); a failure is ``EIO``, logged."""
        assert node.content is not None
        first, data = self._runs.get(fh, (0, b""))
        if not first <= start <= end <= first + len(data):
            if fh not in self._runs:
                self.filler.served(node.inode)
            try:
                first, data = await trio.to_thread.run_sync(self.contents.run_of, node.content, start, end)
            except (DatamountError, OSError) as exc:
                raise await self._failed(node, exc) from exc
            self._runs[fh] = (first, data)
        return data[start - first : end - first]

    async def _failed(self, node: Node, exc: Exception) -> pyfuse3.FUSEError:
        """``EIO`` for a read of ``node`` that failed with ``exc``, which is logged (a part not found named as
        removed when the version was removed since it was mounted: the store is asked)."""
        reason: Exception = exc
        if isinstance(exc, ObjectNotFoundError):
            reason = await trio.to_thread.run_sync(removed_or_missing, self.contents.store, self.contents.manifest, exc)
        log.error("%s: %s", node.path, redact_url(str(reason)))
        return pyfuse3.FUSEError(errno.EIO)

    async def _read_ahead(self, node: Node) -> None:
        """Fetch what the reader that opens ``node`` will open next, and hand those files to the kernel as their
        bytes come (see the module's documentation)."""
        if node.content is not None and self.contents.by_ranges(node.content):
            return  # read by ranges as it is read, never fetched whole
        trigger = self._triggers.pop(node.inode)
        if trigger is not None:
            start, order = trigger
            window = await self._files_after(start, order)
        elif self.filler.given(node.inode) or (node.inode in self._windowed and self._is_coming(node)):
            # Inside a window already (its middle fetches the next one); a file in the kernel's page cache already
            # needs no fetch, even once its bytes have left this process's memory. (A file whose row group came
            # with a file opened alone is in no window: it starts one.)
            window = []
        else:
            # A file that follows one opened lately starts a window in that order; one opened at random (a shuffled
            # training pass) is fetched alone: reading ahead of it would fetch files nobody asked for.
            followed = self._followed_order(node)
            order = followed or FOLDER
            window = [node] if followed is None else [node, *await self._files_after(node, followed)]
        for file in window:
            self._windowed[file.inode] = True
        if len(window) > 1:
            self._triggers[window[len(window) // 2].inode] = (window[-1], order)
        if window:
            self.contents.prefetch(file.content for file in window if file.content is not None)
        elif not self.filler.given(node.inode) and (followed := self._followed_order(node)) is not None:
            # A reader going on in order through files fetched with an earlier window, but not handed to the kernel
            # ahead of it (a row group holds files of several folders): those after it that are here or on their way.
            window = await self._files_after(node, followed, coming_only=True)
        self._recent.append(node)
        if window:
            run_soon = _run_soon()
            for file in window:
                if file is not node and self.filler.wants(file):
                    assert file.content is not None
                    self.filler.offer(file, self.contents.fetch(file.content), run_soon)

    def _followed_order(self, node: Node) -> str | None:
        """The order in which the file opened last (by any reader) of those that come right before ``node`` does:
        ``list``, ``folder``, or ``None`` when none does (a reader opening files at random). The latest decides: a
        walk of the folders of a list that interleaves them opened ``node``'s list predecessor too, a while ago."""
        for recent in reversed(self._recent):
            order = self.tree.follows(recent, node)
            if order is not None:
                return order
        return None

    def _is_coming(self, node: Node) -> bool:
        return node.content is not None and self.contents.is_coming(node.content)

    async def _files_after(self, node: Node, order: str, *, coming_only: bool = False) -> list[Node]:
        """:meth:`_after`'s files (``coming_only``: those of them held or on their way, up to the first that is not,
        :data:`PUSH_AFTER_MISS` at most), found in a thread where the tree reads its indexes to step; none where
        they cannot be read (the file opened is served all the same)."""

        def files() -> list[Node]:
            if not coming_only:
                return list(self._after(node, order))
            ahead = itertools.takewhile(self._is_coming, self._after(node, order))
            return list(itertools.islice(ahead, PUSH_AFTER_MISS))

        try:
            return await self._ask(files)
        except pyfuse3.FUSEError:
            return []

    def _after(self, node: Node, order: str) -> Iterator[Node]:
        """The files after ``node`` in ``order`` (list or folder), a window's worth of bytes: each unit fetched (a
        packed version's row group) counted once."""
        budget, current, counted = self.read_ahead, self._step(node, order), set()
        for _ in range(WINDOW_FILES):
            if current is None or current.content is None:
                return
            if self.contents.by_ranges(current.content):  # read by ranges as it is read, never fetched whole
                current = self._step(current, order)
                continue
            yield current
            unit, size = self.contents.unit_of(current.content)
            if unit not in counted:
                counted.add(unit)
                budget -= size
            if budget <= 0:
                return
            current = self._step(current, order)

    def _step(self, node: Node, order: str) -> Node | None:
        return self.tree.next_in_list(node) if order == LIST else self.tree.next_sibling(node)


async def _result(future: Future[Any]) -> Any:
    """The result of a future of the contents' threads, awaited without holding up other requests."""
    if not future.done():
        token = trio.lowlevel.current_trio_token()
        arrived = trio.Event()
        future.add_done_callback(lambda _: _soon(token, arrived.set))
        await arrived.wait()
    return future.result()


def _run_soon() -> RunSoon:
    """A function that runs a call soon in the thread that answers requests, from any thread (``RunSoon``)."""
    return functools.partial(_soon, trio.lowlevel.current_trio_token())


def _soon(token: trio.lowlevel.TrioToken, call: Any) -> None:
    with contextlib.suppress(trio.RunFinishedError):  # the mount ended while the bytes were on their way
        token.run_sync_soon(call)
