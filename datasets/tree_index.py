"""The tree of an indexed image version (format 7), answered a path or a folder at a time from its indexes: what
:class:`~datamount.datasets.tree.Tree` shows, without a node per file.

The rule: an answer reads what it names and nothing else. One path is one binary search over the entries' parts'
first paths plus one part read (:meth:`~datamount.datasets.file_parts.FileParts.located`); a folder's children are
a range of the sorted entries, each subfolder skipped over with one more search (so a root of 21,000 class folders
costs 21,000 searches, not a read of every file); a walk streams the entries from the folder's first path on and
holds nothing but what it returns. A file is an entry some list row names (its first row is recorded by the commit);
beside them, the version's list at the root and, with ``image_shards``, its shards in ``shards/``: the same tree, file
for file, as :class:`~datamount.datasets.tree.Tree` builds from the whole list.
"""

from __future__ import annotations

from collections.abc import Iterator

from datamount.datasets.export import list_name
from datamount.datasets.file_parts import FileParts
from datamount.datasets.manifest import FileEntry, Manifest
from datamount.datasets.tree import FOLDER, SHARDS_FOLDER, Content, check_path

#: The character after ``/``: every path under the folder ``a/`` sorts before ``a0`` (``a/`` with its ``/`` raised).
_AFTER_SLASH = chr(ord("/") + 1)


def folder_end(prefix: str) -> str | None:
    """What every path under the folder ``prefix`` (``a/``, ending in ``/``) sorts before, whatever follows in it:
    ``a0``, the prefix with its ``/`` raised (``None`` for the root, ``""``: nothing sorts after all of it)."""
    return prefix[:-1] + _AFTER_SLASH if prefix else None


class IndexedTree:
    """The tree of ``manifest``, an indexed image version (``manifest.indexed``), answered from its indexes."""

    def __init__(self, manifest: Manifest, *, image_shards: bool = False) -> None:
        if not manifest.indexed or not isinstance(manifest.files, FileParts):
            raise ValueError(f"{manifest.ref} is not indexed by row (format 7): build its Tree")
        self.manifest = manifest
        self.files: FileParts = manifest.files
        self._list = list_name(manifest)
        self._shards = (
            {f"{SHARDS_FOLDER}/{shard.path.rsplit('/', 1)[-1]}": shard for shard in manifest.shards}
            if image_shards
            else {}
        )

    def content_at(self, path: str) -> Content | str | None:
        """What is at ``path`` (``a/b``; ``""``, the root): a file's :class:`Content`, :data:`FOLDER`, or ``None``
        when nothing is."""
        if not path:
            return FOLDER
        if path == self._list or path in self._shards:
            return self._beside(path)
        if path == SHARDS_FOLDER and self._shards:
            return FOLDER
        found = self.files.located(path)
        if found is not None and found[1] >= 0:
            return self._content(path, *found)
        return FOLDER if self._holds_folder(path) else None

    def children(self, folder: str) -> Iterator[tuple[str, Content | None]]:
        """The names in ``folder`` (``""``: the root) and what each is (``None``: a folder), in the index's order
        (:meth:`listing`'s: by path, a folder's name as if it ended in ``/``), read a part of the entries at a time:
        a caller that keeps them all sorts them if it needs them by name."""
        prefix = f"{folder}/" if folder else ""
        # The list and the shards' folder, where they are in it (two names at most), each where its path sorts.
        beside: dict[str, tuple[str, Content | None]] = {}
        for path in [self._list, *self._shards]:
            if path.startswith(prefix):
                name, slash, _ = path[len(prefix) :].partition("/")
                beside[prefix + name + slash] = (name, None if slash else self._beside(path))
        waiting = sorted(beside.items())
        for name, entry, row in self.listing(prefix, prefix):
            key = prefix + name + ("/" if entry is None else "")
            while waiting and waiting[0][0] <= key:
                placed, shown = waiting.pop(0)
                if placed != key:  # an entry at the same path is shown in its place
                    yield shown
            yield name, None if entry is None else self._content(prefix + name, entry, row)
        yield from (shown for _, shown in waiting)

    def listing(self, prefix: str, start: str) -> Iterator[tuple[str, FileEntry | None, int]]:
        """The entries' names in the folder ``prefix`` (``a/``; ``""``: the root) from the path ``start`` on, in
        order: ``(name, entry, first row)`` for a file some row names, ``(name, None, -1)`` for a folder, once, each
        folder skipped over with one search (the list and the shards, beside the entries, are not in it)."""
        end = folder_end(prefix)
        following: str | None = start
        while following is not None:
            entries, following = self.files.entries_from(following, end), None
            for entry, row in entries:
                name, slash, _ = entry.path[len(prefix) :].partition("/")
                if slash:
                    check_path(prefix + name, self.manifest)
                    yield name, None, -1
                    following = folder_end(f"{prefix}{name}/")
                    break
                if row >= 0:
                    yield name, entry, row

    def walk(self, folder: str) -> Iterator[tuple[str, Content]]:
        """Every file under ``folder`` (``""``: the root) and its content, as paths relative to the root, the
        entries' in sorted order (then the list and the shards), a part of the entries at a time."""
        prefix = f"{folder}/" if folder else ""
        for entry, row in self.files.entries_from(prefix, folder_end(prefix)):
            if row >= 0:
                yield entry.path, self._content(entry.path, entry, row)
        for path in [self._list, *self._shards]:
            if path.startswith(prefix):
                yield path, self._beside(path)

    def _beside(self, path: str) -> Content:
        """The content of the list or of a shard."""
        if path == self._list:
            return Content("list", self.manifest.list_size)
        shard = self._shards[path]
        return Content("shard", shard.size, shard=shard)

    def _content(self, path: str, entry: FileEntry, row: int) -> Content:
        check_path(path, self.manifest)
        return Content("object" if self.manifest.objects else "row", entry.size, entry=entry, row=row)

    def _holds_folder(self, path: str) -> bool:
        """Whether some file is under ``path`` as a folder."""
        if any(other.startswith(path + "/") for other in [self._list, *self._shards]):
            return True
        prefix = path + "/"
        return any(row >= 0 for _, row in self.files.entries_from(prefix, folder_end(prefix)))
