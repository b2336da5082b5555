"""Where the listing of one open folder is (:class:`FolderCursor`): what the mount holds for a folder the kernel
reads, however many names it has.

The rule: an open folder holds a window of its nodes, at most :data:`LISTING_WINDOW` made at a time from the
tree's listing (:meth:`~datamount.mount.tree_view.MountTree.listing`, an iterator kept from one read to the next,
that goes on from the last node made) and the last :data:`KEPT_BEHIND` of the window before. The kernel reads a
folder a page at a time, each read from the offset after the last name it took (``readdir``'s ``start_id``): an
offset in the window is served from it, the offset right after it from the next window, and any other
(``rewinddir``, ``seekdir``, a second reader of the same open folder, a kernel that asks again from further back)
from the tree's listing made again from that offset (the names before it read and passed over). Each read is right
whatever the offset; it costs one more pass over the folder's names only where a reader goes back. A listing that
fails (an index part lost) is made again at the next read.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

from datamount.datasets.tree import Node

#: Nodes made at a time for an open folder, and held, at most, while it is open (besides those kept behind).
LISTING_WINDOW = 1024
#: Nodes of the window before that an open folder keeps: a kernel that asks again for the last names it was given
#: (a reader's buffer smaller than the kernel's page of names) finds them without a new pass over the folder.
KEPT_BEHIND = 64


class FolderCursor:
    """The listing of ``folder`` as the kernel reads it, from ``listing(folder, start)``: the nodes from offset
    ``start`` on (see the module's rule). Asked by one reader at a time (the kernel reads an open folder in turn)."""

    def __init__(self, folder: Node, listing: Callable[[Node, int], Iterator[Node]]) -> None:
        self.folder = folder
        self._listing = listing
        #: The window: the nodes at offsets ``first`` to ``first + len(window) - 1``.
        self.first = 0
        self.window: list[Node] = []
        #: The nodes from the window's end on; ``None`` before the first read and after a failed one.
        self._rest: Iterator[Node] | None = None

    def held(self, start: int) -> list[Node]:
        """The window's nodes from offset ``start`` on (none where it does not hold ``start``); never reads."""
        if self.first <= start < self.first + len(self.window):
            return self.window[start - self.first :]
        return []

    def move(self, start: int) -> None:
        """Make the window the nodes from offset ``start`` on (none past the folder's last name): the next ones
        where ``start`` is the window's end, else from a listing made again from ``start``. May read the tree's
        indexes."""
        behind: list[Node] = []
        if self._rest is not None and start == self.first + len(self.window):
            behind = self.window[-KEPT_BEHIND:]
        else:
            self._rest = self._listing(self.folder, start)
        self.window = []  # the window before is let go before the next is made
        try:
            made = list(itertools.islice(self._rest, LISTING_WINDOW))
        except BaseException:
            self._rest = None
            raise
        self.first, self.window = start - len(behind), behind + made
