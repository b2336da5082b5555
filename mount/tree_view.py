"""The tree the FUSE operations serve (:mod:`~datamount.mount.filesystem`), as one small protocol: a version's
:class:`~datamount.datasets.tree.Tree` built whole (:class:`BuiltTree`), or an indexed version's tree made a node at
a time from its indexes (:class:`~datamount.mount.lazy_tree.LazyTree`).

The rule: a node's inode number never changes while the kernel holds it (from the lookup or listing that handed it
out until the kernel forgets it); :meth:`MountTree.looked_up` and :meth:`MountTree.forget` keep that count. A tree
whose answers may read the store (``blocking``) is asked from a thread, never from the one that answers requests.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Protocol

from datamount.datasets.tree import Node, Tree

#: What :meth:`MountTree.follows` answers for a file opened right after the one before it in the list, or in its
#: folder.
LIST = "list"
FOLDER = "folder"


class MountTree(Protocol):
    """A version's files and folders as nodes, each with its inode number (:attr:`Node.inode`)."""

    #: Whether the answers below but :meth:`known`, :meth:`follows`, :meth:`links`, :meth:`looked_up` and
    #: :meth:`forget` may read the store (then they are asked from a thread).
    blocking: bool
    root: Node

    @property
    def size(self) -> int:
        """Bytes of all files (each once)."""

    @property
    def count(self) -> int:
        """Files and folders (folders may be left out where counting them would read every entry)."""

    def known(self, inode: int) -> Node | None:
        """The node numbered ``inode`` where the tree holds it already (never reads)."""

    def node(self, inode: int) -> Node | None:
        """The node numbered ``inode`` (``None``: no node has that number now)."""

    def child(self, folder: Node, name: str) -> Node | None:
        """The node called ``name`` in ``folder`` (``None``: there is none)."""

    def listing(self, folder: Node, start: int = 0) -> Iterator[Node]:
        """The nodes in ``folder`` from the ``start``-th on (0: the first), in the order a walker opens them
        (:meth:`next_sibling`'s), made as they are iterated (never all at once where the tree is made node by
        node: a folder may hold a million files)."""

    def next_in_list(self, node: Node) -> Node | None:
        """The file of the list row after ``node``'s first row, if ``node`` is a row's file."""

    def next_sibling(self, node: Node) -> Node | None:
        """The file after ``node`` in its folder (folders skipped)."""

    def follows(self, earlier: Node, node: Node) -> str | None:
        """Whether ``node`` comes right after ``earlier`` in the list (:data:`LIST`) or in its folder
        (:data:`FOLDER`); ``None`` when neither is known without reading."""

    def links(self, node: Node) -> int:
        """The node's link count (``st_nlink``)."""

    def looked_up(self, node: Node) -> None:
        """The kernel was handed ``node`` once more (a lookup, an entry of a listing)."""

    def forget(self, inode: int, count: int) -> None:
        """The kernel let go of ``inode`` ``count`` times (FUSE's ``forget``)."""


class BuiltTree:
    """A :class:`~datamount.datasets.tree.Tree` as a :class:`MountTree`: every node made when the version was
    mounted, numbered from :data:`~datamount.datasets.tree.ROOT_INODE` on, kept for the life of the mount."""

    blocking = False

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.root = tree.root
        #: Each folder's link count, counted once (a folder may hold a million files).
        self._links: dict[int, int] = {}

    @property
    def size(self) -> int:
        return self.tree.size

    @property
    def count(self) -> int:
        return len(self.tree)

    def known(self, inode: int) -> Node | None:
        return self.tree.node(inode)

    def node(self, inode: int) -> Node | None:
        return self.tree.node(inode)

    def child(self, folder: Node, name: str) -> Node | None:
        return folder.children.get(name)

    def listing(self, folder: Node, start: int = 0) -> Iterator[Node]:
        return itertools.islice(folder.children.values(), start, None)

    def next_in_list(self, node: Node) -> Node | None:
        return self.tree.next_in_list(node)

    def next_sibling(self, node: Node) -> Node | None:
        return node.next_sibling

    def follows(self, earlier: Node, node: Node) -> str | None:
        if self.tree.next_in_list(earlier) is node:
            return LIST
        return FOLDER if earlier.next_sibling is node else None

    def links(self, node: Node) -> int:
        if node.content is not None:
            return 1
        links = self._links.get(node.inode)
        if links is None:
            links = self._links[node.inode] = 2 + sum(child.is_folder for child in node.children.values())
        return links

    def looked_up(self, node: Node) -> None:
        return None  # every node is kept

    def forget(self, inode: int, count: int) -> None:
        return None
