"""An indexed image version's tree (format 7) as the mount serves it: a node made when the kernel looks its name up
or lists its folder, from the version's indexes (:class:`~datamount.datasets.tree_index.IndexedTree`), so that a
mount of any number of rows answers at once and holds a bounded number of nodes, not a node per file.

The rule for nodes and their inode numbers: a file's number is fixed by its first list row (``ROOT_INODE + 1 +
row``; the list's is the next one), so a file's node is only ever kept among the last :data:`NODES_KEPT` nodes used,
whether the kernel holds the file or not, and made again from its number when the kernel asks for it after (the
row's path from the list's block, its content from the entries: the same number, attributes and folder; its next
file in its folder, where that is the next entry, so that a walk that opens files in a folder's order is still seen
to). A folder's number is drawn from a counter when its node is made, so a folder's node is held while the kernel
holds it (its lookup count, kept by :meth:`LazyTree.looked_up` and :meth:`LazyTree.forget`: the kernel holds a
file's folder while it holds the file) and kept among the last :data:`NODES_KEPT` after. The memory of the nodes
is the folders the kernel holds and :data:`NODES_KEPT` more, whatever the number of files it holds; what the
kernel holds it drops when it needs the memory.

Read-ahead asks for the file after another: in the list (the list's next row, read from its block, with its file
from the row index, or from the entries where that reads no other part than a list in path order would), or in its
folder (the next entry of the index directly in the folder, or the next one its listing gave). Whether a file comes
right after one opened before is answered without reading: the next row, or the next file its folder's listing (or
a window) named.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from datamount.datasets.export import list_name
from datamount.datasets.file_parts import FileParts
from datamount.datasets.manifest import FileEntry, Manifest
from datamount.datasets.rows.listed import ListRows
from datamount.datasets.tree import FOLDER, ROOT_INODE, Content, Node, check_path
from datamount.datasets.tree_index import IndexedTree
from datamount.mount.tree_view import FOLDER as IN_FOLDER
from datamount.mount.tree_view import LIST as IN_LIST
from datamount.storage import Store, UnsafePathError

#: Nodes kept besides the folders the kernel holds (files, whether the kernel holds them or not, and folders it
#: does not hold any more): the last used this many. About 0.9 KB each (a file's with its entry).
NODES_KEPT = 1 << 15
#: Parts of the entries kept decoded (about 2.5 MB each, 80 MB in all): every part of a version of up to a million
#: files, so that the node of a file opened at random after a scan (which the kernel holds but this tree does not) is
#: made again from a list block and a part already decoded (0.5 ms of CPU, against 2.6 with two parts kept).
ENTRY_PARTS_KEPT = 32
#: :attr:`LazyNode.next_file` of a file whose next file is not known yet, and of one that is the last in its folder.
_NOT_KNOWN, _LAST = 0, -1


@dataclass(slots=True, eq=False)
class LazyNode(Node):
    """A node of a :class:`LazyTree`; a file knows the inode number of the file after it in its folder once that
    is found (by a listing of the folder, or a step of a read-ahead window)."""

    next_file: int = _NOT_KNOWN


class LazyTree:
    """The tree of ``manifest``, an indexed image version, whose list is in ``store``: a
    :class:`~datamount.mount.tree_view.MountTree` whose nodes are made as they are asked for (see the module's
    rule). Safe to call from several threads."""

    blocking = True

    def __init__(self, manifest: Manifest, store: Store, *, kept: int = NODES_KEPT) -> None:
        if isinstance(manifest.files, FileParts):  # a file's node is made again from the part that holds its entry
            manifest = dataclasses.replace(manifest, files=manifest.files.keeping(ENTRY_PARTS_KEPT))
        self.manifest = manifest
        self.index = IndexedTree(manifest)
        self.root: Node = LazyNode("", None, ROOT_INODE)
        self._lines = ListRows(store, manifest)
        self._lines_lock = threading.Lock()
        self._lock = threading.RLock()
        self._list_inode = ROOT_INODE + 1 + manifest.rows
        self._folder_numbers = itertools.count(self._list_inode + 1)
        #: The folders the kernel holds, and how many times it was handed each (no file: see the module's rule).
        self._held: dict[int, Node] = {ROOT_INODE: self.root}
        self._counts: dict[int, int] = {}
        #: Files' nodes and the folders it does not hold, the last used at the end; at most ``kept``.
        self._kept: OrderedDict[int, Node] = OrderedDict()
        self._limit = kept
        #: The inode number of each folder held or kept, by path.
        self._folders: dict[str, int] = {"": ROOT_INODE}
        #: Each row's file, where the version has a row index (its files are objects).
        row_parts = manifest.row_parts
        self._by_row = row_parts if row_parts is not None and len(row_parts) == manifest.rows else None

    @property
    def size(self) -> int:
        return self.manifest.files_size + self.manifest.list_size

    @property
    def count(self) -> int:
        """Files and the root: counting the folders would read every entry."""
        return len(self.manifest.files) + 2

    @property
    def nodes(self) -> int:
        """Nodes in memory: the folders the kernel holds and the nodes kept."""
        with self._lock:
            return len(self._held) + len(self._kept)

    def known(self, inode: int) -> Node | None:
        with self._lock:
            node = self._held.get(inode)
            if node is None:
                node = self._kept.get(inode)
                if node is not None:
                    self._kept.move_to_end(inode)
            return node

    def node(self, inode: int) -> Node | None:
        found = self.known(inode)
        if found is not None:
            return found
        if inode == self._list_inode:
            return self._at(list_name(self.manifest))
        if ROOT_INODE < inode < self._list_inode:  # a file: its first row's path, from the list
            found = self._at(self._row_path(inode - ROOT_INODE - 1))
            if found is None or found.inode != inode:
                return None
            if isinstance(found, LazyNode) and found.next_file == _NOT_KNOWN:
                found.next_file = self._number_after(_path_of(found))
            return found
        return None

    def child(self, folder: Node, name: str) -> Node | None:
        return self._at(_joined(_path_of(folder), name))

    def listing(self, folder: Node, start: int = 0) -> Iterator[Node]:
        """The folder's nodes from the ``start``-th on, made as the index's names are read (the names before
        ``start`` read and passed over, no node made for them); each file linked to the next one in the folder as it
        is made, and the last to none once the names end."""
        folder_path = _path_of(folder)
        previous: Node | None = None
        for name, content in itertools.islice(self.index.children(folder_path), start, None):
            path = _joined(folder_path, name)
            node = self._folder(path) if content is None else self._file(path, content)
            if _is_row_file(node):
                if previous is not None:
                    _link(previous, node.inode)
                previous = node
            yield node
        if previous is not None:
            _link(previous, _LAST)

    def next_in_list(self, node: Node) -> Node | None:
        """The file of the row after ``node``'s: its path from the list's block; its size and checksums from the
        row index where there is one (the file numbered, and its content placed, by that row: a file the list named
        before is the same bytes under another number), else from the entries, where the path is in the part of
        ``node``'s path or the next one (a list in path order; a list in another order is not stepped through
        where each step would read a part of the entries)."""
        content = node.content
        if content is None or not _is_row_file(node) or content.row + 1 >= self.manifest.rows:
            return None
        row = content.row + 1
        path = self._row_path(row)
        try:
            check_path(path, self.manifest)
        except UnsafePathError:
            return None  # a list the built tree refuses whole: its lookups find no such file either
        if self._by_row is not None:
            file = self._by_row.file(row)
            entry = FileEntry(path, file.size, file.sha256, file.xxh3)
            return self._file(path, Content(content.kind, file.size, entry=entry, row=row))
        files = self.index.files
        here, there = files.part_of_path(_path_of(node)), files.part_of_path(path)
        return self._at(path) if here <= there <= here + 1 else None

    def next_sibling(self, node: Node) -> Node | None:
        if not _is_row_file(node):
            return None
        following = node.next_file if isinstance(node, LazyNode) else _NOT_KNOWN
        if following == _LAST:
            return None
        if following != _NOT_KNOWN and (known := self.known(following)) is not None:
            return known
        found = self._file_after(_path_of(node))
        _link(node, _LAST if found is None else found.inode)
        return found

    def follows(self, earlier: Node, node: Node) -> str | None:
        if not (_is_row_file(earlier) and _is_row_file(node)):
            return None
        assert earlier.content is not None and node.content is not None
        if earlier.content.row + 1 == node.content.row:
            return IN_LIST
        return IN_FOLDER if isinstance(earlier, LazyNode) and earlier.next_file == node.inode else None

    def links(self, node: Node) -> int:
        """1, for a folder too: its count of subfolders is not known without listing it (as for btrfs, tools that
        see 1 count nothing on it)."""
        return 1

    def looked_up(self, node: Node) -> None:
        if node.content is not None:
            return  # a file: made again from its number when it is asked for (see the module's rule)
        inode = node.inode
        with self._lock:
            self._counts[inode] = self._counts.get(inode, 0) + 1
            if inode in self._held:
                return
            self._held[inode] = node
            self._kept.pop(inode, None)
            if node.content is None:
                self._folders.setdefault(_path_of(node), inode)

    def forget(self, inode: int, count: int) -> None:
        if ROOT_INODE < inode <= self._list_inode:
            return  # a file: not counted
        with self._lock:
            left = self._counts.get(inode, 0) - count
            if left > 0:
                self._counts[inode] = left
                return
            self._counts.pop(inode, None)
            node = self._held.pop(inode, None) if inode != ROOT_INODE else None
            if node is not None:
                self._keep(node)

    # ---------------------------------------------------------------------------------------------- helpers

    def _at(self, path: str) -> Node | None:
        """The node at ``path`` (``a/b``), made if it is not held or kept."""
        try:
            content = self.index.content_at(path)
        except UnsafePathError:
            return None  # a name no file of the version has (the tree refuses to show such a version whole)
        if content is None:
            return None
        if content == FOLDER:
            return self._folder(path)
        assert isinstance(content, Content)
        return self._file(path, content)

    def _file(self, path: str, content: Content) -> Node:
        inode = self._list_inode if content.kind == "list" else ROOT_INODE + 1 + content.row
        parent = self._folder(path.rpartition("/")[0])
        with self._lock:
            node = self.known(inode)
            if node is None:
                node = LazyNode(path.rpartition("/")[2], parent, inode, content)
                self._keep(node)
            else:
                node.parent = parent  # the folder's node now, where an older one was dropped
            return node

    def _folder(self, path: str) -> Node:
        with self._lock:
            number = self._folders.get(path)
            node = None if number is None else self.known(number)
            if node is not None:
                return node
            parent_path, _, name = path.rpartition("/")
            node = LazyNode(name, self._folder(parent_path), next(self._folder_numbers))
            self._folders[path] = node.inode
            self._keep(node)
            return node

    def _keep(self, node: Node) -> None:
        """Keep ``node``, which the kernel does not hold, as the last used; drop the one used longest ago beyond
        the limit (a folder's number with it)."""
        self._kept[node.inode] = node
        self._kept.move_to_end(node.inode)
        while len(self._kept) > self._limit:
            inode, dropped = self._kept.popitem(last=False)
            if dropped.content is None and self._folders.get(path := _path_of(dropped)) == inode:
                del self._folders[path]

    def _row_path(self, row: int) -> str:
        """Row ``row``'s path: the first field of its line, read from the list's block that holds it."""
        with self._lines_lock:  # ListRows keeps the blocks it read last for the next row, unlocked
            return self._lines.row(row)[0]

    def _number_after(self, path: str) -> int:
        """The number of the file after ``path`` in its folder where that is the next entry there (no subfolder is
        skipped: that may read more parts), :data:`_LAST` where ``path`` is the folder's last, else not known."""
        folder, _, own = path.rpartition("/")
        prefix = f"{folder}/" if folder else ""
        for name, entry, row in itertools.islice(self.index.listing(prefix, path), 2):
            if name != own:
                return _NOT_KNOWN if entry is None else ROOT_INODE + 1 + row
        return _LAST

    def _file_after(self, path: str) -> Node | None:
        """The file after ``path`` in its folder, in the order of the index (a folder's names sorted, each
        subfolder skipped with one search)."""
        folder, _, own = path.rpartition("/")
        prefix = f"{folder}/" if folder else ""
        for name, entry, _row in self.index.listing(prefix, path):
            if entry is not None and name != own:
                return self._at(entry.path)
        return None


def _path_of(node: Node) -> str:
    """``a/b`` for the node at ``/a/b`` (``""``: the root)."""
    return node.path[1:]


def _joined(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def _is_row_file(node: Node) -> bool:
    return node.content is not None and node.content.kind in ("object", "row")


def _link(node: Node, following: int) -> None:
    if isinstance(node, LazyNode):
        node.next_file = following
