"""Checked bytes of the files a reader will open next, put into the kernel's page cache before it asks for them.

A walk over a FUSE mount costs this process three requests per file: an open, a read and a release. The read is
the one that carries the bytes; when the kernel already holds a file's pages (FUSE's ``notify_store``) and the open
keeps them (``keep_cache``), reading the file takes no request at all. So the files of each read-ahead window are
handed to the kernel as their bytes arrive, checked, from a thread of this module's own: never from the thread that
answers requests, since storing a page waits for a read of that page still being answered.

A file goes to the kernel once: not when its read was answered already, nor when it is empty or larger than
:data:`PUSH_MAX_BYTES` (its reads serve it). Only files the kernel knows can be pushed (those it listed, as ``find``,
``os.walk`` and ImageFolder list them first). Where the kernel does not take the bytes (an inode it has forgotten, a
mount going away) the file's read serves it as before: pushing is only ever a shortcut.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from datamount.mount.tree import Node

log = logging.getLogger("datamount.mount")

#: Files larger than this are read by requests only.
PUSH_MAX_BYTES = 8 << 20
#: Seconds to wait, when the mount ends, for a push under way.
STOP_SECONDS = 2.0

#: Puts ``data`` into the page cache of ``inode`` from byte 0 (``pyfuse3.notify_store``).
StorePages = Callable[[int, int, bytes], None]


class PageCacheFiller:
    """Hands files to the kernel's page cache (``store``) once their unit has come, each file once."""

    def __init__(self, store: StorePages, bytes_of: Callable[[Node, Any], bytes], inodes: int) -> None:
        self._store = store
        self._bytes_of = bytes_of
        #: 1 for each inode whose bytes went to the kernel, pushed or read.
        self._given = bytearray(inodes)
        self._waiting: queue.SimpleQueue[tuple[Node, Future[Any]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="datamount-mount-push", daemon=True)
        self._stopped = False
        #: Files put into the page cache, and files whose reads came to this process.
        self.pushed = self.read = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Push nothing more; wait a little for a push under way."""
        self._stopped = True
        self._waiting.put(None)
        if self._thread.is_alive():
            self._thread.join(STOP_SECONDS)
        log.info("%d file(s) put into the page cache ahead of their reads; %d read by requests", self.pushed, self.read)

    def offer(self, node: Node, unit: Future[Any]) -> None:
        """Push ``node``'s bytes once ``unit`` (the future of its unit) has come, unless its read comes first."""
        if node.content is None or not 0 < node.content.size <= PUSH_MAX_BYTES or self._given[node.inode]:
            return
        unit.add_done_callback(lambda _: self._waiting.put((node, unit)))

    def given(self, inode: int) -> bool:
        """Whether ``inode``'s bytes went to the kernel (pushed, or read)."""
        return bool(self._given[inode])

    def served(self, inode: int) -> None:
        """A read of ``inode`` is being answered: its bytes need no push."""
        self._given[inode] = 1
        self.read += 1

    def _run(self) -> None:
        while (item := self._waiting.get()) is not None and not self._stopped:
            node, unit = item
            if self._given[node.inode] or unit.cancelled() or unit.exception() is not None:
                continue  # read already, or not fetched: a read serves it (and says why it cannot)
            self._given[node.inode] = 1
            try:
                self._store(node.inode, 0, self._bytes_of(node, unit.result()))
                self.pushed += 1
            except OSError as exc:
                log.debug("%s: not put into the page cache (%s); its reads serve it", node.path, exc)
