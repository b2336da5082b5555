"""Checked bytes of the files a reader will open next, put into the kernel's page cache before it asks for them.

A walk over a FUSE mount costs this process three requests per file: an open, a read and a release. The read is
the one that carries the bytes; when the kernel already holds a file's pages (FUSE's ``notify_store``) and the open
keeps them (``keep_cache``), reading the file takes no request at all. So the files of each read-ahead window are
handed to the kernel as their checked bytes arrive.

A file goes to the kernel once, and only before it is opened: a read of a file it is storing would make the store
wait, and a file not opened yet has no read under way. So pushes run in the thread that answers requests, between
them (no other thread then takes the interpreter from it), and never wait. Empty files and files larger than
:data:`PUSH_MAX_BYTES` are left to their reads. Only files the kernel knows can be pushed: those it listed (as
``find``, ``os.walk`` and ImageFolder list a folder before they open its files) or looked up, and has not forgotten
since. The kernel makes the inodes of a listing in the process that asked for it, once that process has the answer:
a push right after the answer may come before them, so a file the kernel does not know yet is pushed after the next
request (its process asks again only once it has the answer). A file whose bytes come before the kernel knows it (a
window reaching into a folder the walk has not listed yet) is pushed when its folder is listed, if its bytes are
still in memory. Where the kernel does not take the bytes (an inode it dropped, a mount going away) the file's read
serves it as before: pushing is only ever a shortcut.

What is recorded of each file goes when the kernel forgets it (of files the kernel does not know, the last
:data:`WAITING_KEPT` at most): the filler's memory follows what the kernel holds, not the files a walk went through;
whether the kernel knows a file, and whether it was given or pushed, is a bit each (:mod:`~datamount.mount.inode_bits`).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from datamount.datasets.tree import Node
from datamount.mount.inode_bits import InodeBits
from datamount.mount.recent import Recent

log = logging.getLogger("datamount.mount")

#: Files larger than this are read by requests only.
PUSH_MAX_BYTES = 8 << 20
#: Pushes of a file the kernel was told of but did not know yet, at most (one after each request that follows).
PUSH_TRIES = 3
#: Files whose bytes came before the kernel knew them, kept to be pushed when it does: the last this many.
WAITING_KEPT = 1 << 14

#: Puts ``data`` into the page cache of ``inode`` from byte ``offset`` (``pyfuse3.notify_store``).
StorePages = Callable[[int, int, bytes], None]
#: Runs a call in the thread that answers requests, soon (from any thread).
RunSoon = Callable[[Callable[[], None]], None]
#: The future of a unit holding the file that is in memory or on its way (``None`` when there is none).
UnitOf = Callable[[Node], "Future[Any] | None"]


class PageCacheFiller:
    """Hands files to the kernel's page cache (``store``) once their unit has come, each file once, before it is
    opened; all its methods are called in the thread that answers requests."""

    def __init__(self, store: StorePages, bytes_of: Callable[[Node, Any], bytes], unit_of: UnitOf) -> None:
        self._store = store
        self._bytes_of = bytes_of
        self._unit_of = unit_of
        #: The inodes not to push (any more): pushed, opened or read.
        self._given = InodeBits()
        #: The inodes the kernel knows: listed or looked up, and not forgotten since.
        self._known = InodeBits()
        #: The files whose bytes came before the kernel knew them: pushed when they are listed.
        self._waiting: Recent[int, bool] = Recent(WAITING_KEPT)
        #: Pushes the kernel refused for not knowing the inode yet, for each file refused (the last few).
        self._refusals: Recent[int, int] = Recent(WAITING_KEPT)
        #: Files to push after the next request: the kernel was told of them, and has them by then.
        self._after_next_request: list[Node] = []
        #: The inodes whose bytes were put into the page cache (at least once) since the kernel knew them.
        self._pushed = InodeBits()
        #: Files put into the page cache; files whose reads came to this process, and how many of those had been put
        #: into the page cache (the kernel dropped their pages before they were read: it needed the memory).
        self.pushed = self.read = self.dropped = 0

    def wants(self, node: Node) -> bool:
        """Whether ``node`` is a file to push: not pushed, opened or read yet, neither empty nor too large."""
        content = node.content
        return content is not None and 0 < content.size <= PUSH_MAX_BYTES and node.inode not in self._given

    def offer(self, node: Node, unit: Future[Any], run_soon: RunSoon) -> None:
        """Push ``node`` (which :meth:`wants` it) once ``unit``, the future of its unit, has come, unless it is
        opened first."""
        unit.add_done_callback(lambda _: run_soon(lambda: self._push(node, unit)))

    def given(self, inode: int) -> bool:
        """Whether ``inode``'s bytes went to the kernel, or will go by its reads."""
        return inode in self._given

    def listed(self, node: Node) -> None:
        """The kernel is told of ``node`` (a listing or a lookup, answered right after this call): a file whose bytes
        are waiting for it is pushed after the next request."""
        inode = node.inode
        self._known.add(inode)
        if self._waiting.pop(inode):
            self._after_next_request.append(node)

    def request(self, run_soon: Callable[[], RunSoon]) -> None:
        """A request came (call it before answering it): push the files the kernel was told of before it.
        ``run_soon`` makes the ``RunSoon`` their pushes need, when there are any (most requests have none)."""
        if not self._after_next_request:
            return
        nodes, self._after_next_request = self._after_next_request, []
        runner = run_soon()
        for node in nodes:
            unit = self._unit_of(node)
            if unit is not None and node.inode not in self._given:
                self.offer(node, unit, runner)

    def forgotten(self, inodes: Iterable[int]) -> None:
        """The kernel dropped these inodes, and their pages with them: each may be pushed again once it is listed
        (a read of one after that is a read of a file not pushed)."""
        for inode in inodes:
            self._known.discard(inode)
            self._given.discard(inode)
            self._pushed.discard(inode)
            self._refusals.pop(inode)

    def opened(self, inode: int) -> None:
        """A reader opened ``inode``: its reads serve it from now on, unless it was pushed."""
        self._given.add(inode)

    def served(self, inode: int) -> None:
        """A read of ``inode`` came to this process: it was not in the page cache, or no longer."""
        self.read += 1
        self.dropped += inode in self._pushed

    def summary(self) -> str:
        return (
            f"{self.pushed} file(s) put into the page cache ahead of their reads; {self.read} read by requests "
            f"({self.dropped} of them put into the page cache before, and dropped by the kernel)"
        )

    def _push(self, node: Node, unit: Future[Any]) -> None:
        inode = node.inode
        if inode in self._given or unit.cancelled() or unit.exception() is not None:
            return  # opened already, or not fetched: its reads serve it (and say why they cannot)
        if inode not in self._known:
            self._waiting[inode] = True
            return
        self._given.add(inode)
        try:
            self._store(inode, 0, self._bytes_of(node, unit.result()))
        except OSError as exc:
            self._given.discard(inode)
            if exc.errno == errno.ENOENT:
                refused = self._refusals[inode] = (self._refusals.get(inode) or 0) + 1
                if refused < PUSH_TRIES:  # told of it, not made yet: again after the next request
                    self._after_next_request.append(node)
                else:  # dropped by the kernel: pushed if it is listed again
                    self._known.discard(inode)
                    self._waiting[inode] = True
            log.debug("%s: not put into the page cache (%s); its reads serve it", node.path, exc)
            return
        self._refusals.pop(inode)
        self._pushed.add(inode)
        self.pushed += 1
