"""The folder tree of a version, built from its manifest and list alone (no store listing): the one tree both front
ends show, ``datamount mount`` (:mod:`datamount.mount`) and ``datamount://`` URLs (:mod:`datamount.urlfs`).

An image version shows each row's file at its list path and the list itself; a text version its list; a table
version its Parquet shards at its root. A packed text version also shows its shards, in ``shards/``, and so does a
packed image version when asked (``datamount://`` URLs do, so that tools that scan Parquet read them as they are;
the mount does not, so that an ``ImageFolder`` finds only class folders). A version without a list (a public
dataset) shows its rows as files in its dataset's form, and the files kept with it: their paths and sizes come from a
pass over its rows (:mod:`datamount.datasets.row_folders`, the rule ``export`` follows too); a front end that does
not make that pass shows its shards in ``shards/`` instead. Every path in the tree is checked: none can climb out of
it.
"""

from __future__ import annotations

import bisect
import stat
from dataclasses import dataclass, field
from typing import NamedTuple

from datamount.datasets.export import list_name
from datamount.datasets.file_parts import FileParts
from datamount.datasets.manifest import FileEntry, FileList, Kind, Manifest, ShardEntry, collector_paused
from datamount.datasets.row_folders import RowFile, shows_rows
from datamount.datasets.rows.listed import Line
from datamount.storage import UnsafePathError

#: Where a packed version's shards appear (but a table version's, at its root).
SHARDS_FOLDER = "shards"
#: The root folder's inode number (FUSE's); the others are numbered from it in the order they are added.
ROOT_INODE = 1


class Content(NamedTuple):
    """What a file's bytes are: a stored object (``entry``), row ``row`` of a packed version, rows ``row`` to
    ``stop - 1`` of a version without a list, the version's list, or one of its shards. An image version's file
    knows its (first) list row either way: a version packed after its upload has both objects and shards. A row's
    file of a version without a list has an ``entry`` too, with no sha256: its size and xxh3-64 as its rows were
    read when it was mounted. (A tuple: a version has one per file, made when it is mounted.)"""

    kind: str  # "object", "row", "rows", "list" or "shard"
    size: int
    entry: FileEntry | None = None
    row: int = -1
    shard: ShardEntry | None = None
    stop: int = -1


@dataclass(slots=True, eq=False)
class Node:
    """A file or folder of the tree. A file knows its content and its neighbours in its folder; a folder its
    children in list order."""

    name: str
    parent: Node | None
    inode: int
    content: Content | None = None  # None for a folder
    children: dict[str, Node] = field(default_factory=dict)
    #: The file after this one in its folder (in list order): what a walker opens next.
    next_sibling: Node | None = None

    @property
    def is_folder(self) -> bool:
        return self.content is None

    @property
    def mode(self) -> int:
        return stat.S_IFDIR | 0o555 if self.content is None else stat.S_IFREG | 0o444

    @property
    def path(self) -> str:
        parts: list[str] = []
        node: Node | None = self
        while node is not None and node.parent is not None:
            parts.append(node.name)
            node = node.parent
        return "/" + "/".join(reversed(parts))


class Tree:
    """Every path of a version, found in one dictionary look-up: from its manifest, its list's ``lines`` (an image
    version's), and the ``row_files`` of a version without a list (without them, such a version shows its shards)."""

    def __init__(
        self,
        manifest: Manifest,
        lines: list[Line] | None,
        row_files: list[RowFile] | None = None,
        *,
        image_shards: bool = False,
    ) -> None:
        self.manifest = manifest
        self.root = Node("", None, ROOT_INODE)
        self.nodes: dict[str, Node] = {"/": self.root}
        #: Every node by its inode number.
        self.inodes: list[Node | None] = [None] * ROOT_INODE + [self.root]
        #: The file of each list row (image versions): a reader that follows the list opens them in this order.
        self.row_files: list[Node] = []
        self._first_row: dict[int, int] = {}
        self.folders = 1
        #: The folder of the file added last, and its path (see :meth:`_add`).
        self._last_folder: tuple[str, Node] = ("", self.root)
        with collector_paused():  # a node per row: 1.28 million of them set off collection after collection
            if manifest.kind is Kind.IMAGE and lines is not None:
                self._add_row_files(lines)
            elif shows_rows(manifest) and row_files is not None:
                self._add_planned_files(row_files)
            elif shows_rows(manifest):
                self._add_objects()
        if manifest.has_list:
            self._add(list_name(manifest), Content("list", manifest.list_size))
        folder = "" if manifest.kind is Kind.TABLE else SHARDS_FOLDER + "/"
        for shard in manifest.shards if self._shows_shards(row_files, image_shards) else ():
            self._add(folder + shard.path.rsplit("/", 1)[-1], Content("shard", shard.size, shard=shard))
        self._link_siblings(self.root)

    def _shows_shards(self, row_files: list[RowFile] | None, image_shards: bool) -> bool:
        """Whether the tree shows the version's shards: a table or text version's always; an image version's when
        asked (a folder of class folders must not grow a ``shards`` class for an ``ImageFolder`` walking a mount);
        a version without a list's when its rows are not shown as files."""
        kind = self.manifest.kind
        if kind is Kind.IMAGE and self.manifest.has_list:
            return image_shards
        return kind is not Kind.IMAGE or row_files is None if self.manifest.has_list else row_files is None

    def __len__(self) -> int:
        """Files and folders, the root included."""
        return len(self.nodes)

    @property
    def size(self) -> int:
        """Bytes of all files (each once)."""
        return sum(node.content.size for node in self.nodes.values() if node.content is not None)

    @property
    def row_entries(self) -> list[FileEntry]:
        """The manifest's entry of each list row's file (image versions)."""
        return [node.content.entry for node in self.row_files if node.content and node.content.entry]

    def find(self, path: str) -> Node | None:
        return self.nodes.get(path)

    def node(self, inode: int) -> Node | None:
        return self.inodes[inode] if 0 <= inode < len(self.inodes) else None

    def next_in_list(self, node: Node) -> Node | None:
        """The file of the list row after ``node``'s (first) row, if it is a row's file."""
        content = node.content
        if content is None or content.kind not in ("object", "row"):
            return None
        following = self._first_row.get(id(node), -2) + 1
        return self.row_files[following] if 0 < following < len(self.row_files) else None

    def _add_row_files(self, lines: list[Line]) -> None:
        entries = {entry.path: entry for entry in self.manifest.files}
        packed = not self.manifest.objects
        seen: dict[str, Node] = {}
        for row, line in enumerate(lines):
            path = line[0]
            node = seen.get(path)
            if node is None:
                entry = entries.get(path)
                if entry is None:
                    raise UnsafePathError(f"{self.manifest.ref}: the list names {path!r}, which the manifest has not")
                content = Content("row" if packed else "object", entry.size, entry=entry, row=row)
                node = seen[path] = self._add(path, content)
                self._first_row[id(node)] = row
            self.row_files.append(node)

    def _add_planned_files(self, files: list[RowFile]) -> None:
        """The files of a version without a list, and the files kept with it (its manifest's ``files``). Each file
        of one row is a row's file, fetched with its row group; when some file holds several rows, each file is
        fetched on its own."""
        one_row_each = all(file.stop - file.start == 1 for file in files)
        for file in files:
            entry = FileEntry(file.path, file.size, "", file.xxh3)
            if one_row_each:
                node = self._add(file.path, Content("row", file.size, entry=entry, row=file.start))
                self._first_row[id(node)] = file.start
                self.row_files.append(node)
            else:
                self._add(file.path, Content("rows", file.size, entry=entry, row=file.start, stop=file.stop))
        self._add_objects()

    def _add_objects(self) -> None:
        """The files kept with a version without a list (its manifest's ``files``), each its object."""
        for entry in self.manifest.files:
            self._add(entry.path, Content("object", entry.size, entry=entry))

    def _add(self, path: str, content: Content) -> Node:
        check_path(path, self.manifest)
        folder_path, _, name = path.rpartition("/")
        # Files come folder by folder (a list's order, mostly): the previous file's folder is found without a walk.
        if folder_path == self._last_folder[0]:
            folder = self._last_folder[1]
        else:
            folder = self._folder(path, folder_path)
            self._last_folder = (folder_path, folder)
        if name in folder.children:
            raise UnsafePathError(f"{self.manifest.ref}: two files at {path!r} (is the list named like a file?)")
        node = folder.children[name] = self._node(name, folder, content, "/" + path)
        return node

    def _folder(self, path: str, folder_path: str) -> Node:
        """The folder ``folder_path`` (of the file ``path``), made with its parents where they are not yet."""
        parts = folder_path.split("/") if folder_path else []
        folder = self.root
        for depth, part in enumerate(parts):
            child = folder.children.get(part)
            if child is None:
                child = folder.children[part] = self._node(part, folder, None, "/" + "/".join(parts[: depth + 1]))
            elif not child.is_folder:
                raise UnsafePathError(f"{self.manifest.ref}: {path!r} puts a file inside the file {child.path!r}")
            folder = child
        return folder

    def _node(self, name: str, parent: Node, content: Content | None, path: str) -> Node:
        """A new node at ``path`` (its :attr:`Node.path`, known to the caller)."""
        node = Node(name, parent, len(self.inodes), content)
        self.inodes.append(node)
        self.nodes[path] = node
        self.folders += content is None
        return node

    def _link_siblings(self, folder: Node) -> None:
        previous: Node | None = None
        for child in folder.children.values():
            if child.is_folder:
                self._link_siblings(child)
                continue
            if previous is not None:
                previous.next_sibling = child
            previous = child


def check_path(path: str, manifest: Manifest) -> None:
    """Refuse ``path`` if it is absolute, climbs out, or holds what no file name may (an empty, ``.`` or ``..``
    component, a NUL)."""
    framed = f"/{path}/"
    if not path or "//" in framed or "/./" in framed or "/../" in framed or "\0" in path:
        raise UnsafePathError(
            f"{manifest.ref}: the path {path!r} cannot be shown as a file (it would leave its folder)"
        )


def group_of(starts: list[int], row: int) -> int:
    """The index of the range, among ranges beginning at ``starts``, that holds ``row``."""
    return bisect.bisect_right(starts, row) - 1


#: What :func:`look_up` answers for a folder, and when only the whole tree can answer.
FOLDER = "folder"
UNKNOWN = "unknown"


def look_up(manifest: Manifest, listed: bytes, path: str) -> Content | str | None:
    """What the tree of an image version with a list, which ``listed`` (its normalised list's bytes) names, has at
    ``path`` (``a/b``, ``""`` for the root), found without building the tree: a file's :class:`Content` (the list's,
    a shard's, or a row's, its first row's number counted in ``listed`` and its entry decoded alone from the
    manifest's stored files, or read from the one part of them that holds it), :data:`FOLDER`, ``None`` when there
    is nothing at ``path``, or :data:`UNKNOWN` when only the tree can answer (a path that the list or the manifest
    may spell otherwise than plain ASCII, a list with empty lines, a manifest whose files are decoded already or
    stored with other spacing: see :meth:`~datamount.datasets.manifest.FileList.stored_entry`). The answer is the
    tree's (with ``image_shards``), but for a version that the tree refuses whole (a path of its list it cannot
    show)."""
    if not path:
        return FOLDER
    if path == list_name(manifest):
        return Content("list", manifest.list_size)
    if path.startswith(SHARDS_FOLDER + "/") or path == SHARDS_FOLDER:
        for shard in manifest.shards:
            if path == f"{SHARDS_FOLDER}/{shard.path.rsplit('/', 1)[-1]}":
                return Content("shard", shard.size, shard=shard)
        return FOLDER if path == SHARDS_FOLDER and manifest.shards else None
    plain = path.isascii() and path.isprintable() and '"' not in path and "\\" not in path
    if not plain or not isinstance(manifest.files, FileList | FileParts):
        return UNKNOWN
    if listed.startswith(b"\n") or b"\n\n" in listed:
        return UNKNOWN
    try:
        check_path(path, manifest)
    except UnsafePathError:
        return None
    key = path.encode()
    line = _line_start(listed, key)
    if line < 0:
        folder = key + b"/"
        inside = listed.startswith(folder) or b"\n" + folder in listed or list_name(manifest).startswith(path + "/")
        return FOLDER if inside else None
    entry = manifest.files.stored_entry(path)
    if entry is None:
        return UNKNOWN  # decoded already, or not there (the tree refuses a list naming a file the manifest has not)
    row = listed.count(b"\n", 0, line)
    return Content("object" if manifest.objects else "row", entry.size, entry=entry, row=row)


def _line_start(listed: bytes, key: bytes) -> int:
    """Where the first line of ``listed`` whose first field is ``key`` starts; -1 when none is."""
    starts = []
    for end in (b"\t", b"\n"):
        if listed.startswith(key + end):
            return 0
        found = listed.find(b"\n" + key + end)
        if found >= 0:
            starts.append(found + 1)
    if listed.endswith(b"\n" + key):
        starts.append(len(listed) - len(key))
    elif listed == key:
        return 0
    return min(starts, default=-1)
