"""``DatamountFileSystem``: every dataset version as a read-only fsspec filesystem, ``datamount://`` URLs.

The rules, each kept here once:

- A version is resolved once per filesystem instance (``latest`` too: its number then stays) by one read of its
  manifest (and, for an image version, its list), and its tree is built from them
  (:class:`datamount.datasets.tree.Tree`, the mount's). ``ls``, ``info``, ``find``, ``glob``, ``du`` and ``exists``
  answer from the tree alone: no request to the store after that.
- Every byte handed out was checked first (:class:`datamount.datasets.tree_bytes.TreeBytes`): a damaged one is an
  :class:`~datamount.storage.IntegrityError`, an ``OSError`` with ``errno.EIO`` naming the path.
- Every read call answers as fsspec's ``LocalFileSystem`` answers on the same files in a folder, for every spelling
  of a path (:mod:`datamount.urlfs.urls`): a missing path is a ``FileNotFoundError``, a path through a file a
  ``NotADirectoryError`` (:meth:`DatamountFileSystem._absent` chooses); ``find``, ``du``, ``walk`` and ``glob`` of
  either find nothing (:data:`_NOTHING_THERE`).
- Nothing is ever written: every kind of write is an ``OSError`` with ``errno.EROFS``.
- A pickled filesystem carries its options and, for each version it opened, its number and its manifest's sha256
  (with or without a cache); never a client, never a manifest (:mod:`datamount.urlfs.pinned`).
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import datetime
import errno
import operator
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, NoReturn

from fsspec import AbstractFileSystem
from fsspec.callbacks import DEFAULT_CALLBACK
from fsspec.spec import AbstractBufferedFile

from datamount.datasets import catalog
from datamount.datasets.file_parts import FileParts
from datamount.datasets.manifest import Kind, Manifest
from datamount.datasets.rows import removed_or_missing
from datamount.datasets.rows.listed import list_rows
from datamount.datasets.tree import FOLDER, UNKNOWN, Content, Tree, look_up
from datamount.datasets.tree_bytes import LIST_READ_AHEAD, TreeBytes
from datamount.datasets.tree_index import IndexedTree, folder_end
from datamount.storage import ObjectNotFoundError, Store, open_store, profiles
from datamount.storage.cache import ContentCache
from datamount.urlfs import pinned as pinning
from datamount.urlfs._quiet_exit import counted
from datamount.urlfs.shard_copies import ShardCopies
from datamount.urlfs.urls import DEFAULT_STORE, LATEST, PROTOCOL, VersionPath, parse, strip


@dataclass
class _Version:
    """A version a filesystem opened: its store, manifest, checked bytes and (an image version's) checked list, its
    tree made on first use, and the copies of the shards it read (a Parquet reader opens a file more than once, and
    comes back to its footer's block each time)."""

    store: Store
    manifest: Manifest
    listed: bytes | None
    content: TreeBytes
    pinned: pinning.Pinned | None = None
    #: An indexed version's tree, answered from its indexes (then no list is read and no tree is built).
    indexed: IndexedTree | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)
    shards: ShardCopies = field(init=False)
    _tree: Tree | None = None
    #: Paths found without the tree so far.
    looked_up: int = 0

    #: Paths found without the tree before it is built after all: each costs a search through the list's and the
    #: manifest's bytes (tens of milliseconds for a million files), the tree a pass over them once (seconds).
    LOOK_UPS: ClassVar[int] = 32

    #: The tree's files' paths (``/a/b``), sorted; and its folders' with them (not the root): made on first use.
    files: list[str] | None = None
    everything: list[str] | None = None

    def __post_init__(self) -> None:
        self.shards = ShardCopies(self.content)

    @property
    def tree(self) -> Tree:
        """The version's tree, built on first use (a node per file: seconds for a million files)."""
        with self.lock:
            if self._tree is None:
                lines = list_rows(self.listed) if self.listed is not None else None
                self._tree = Tree(self.manifest, lines, image_shards=True)
                self.listed = None
            return self._tree

    def content_at(self, inner: str) -> Content | None:
        """The content of the file at ``inner`` (``a/b``), ``None`` for a folder; ``KeyError`` when there is
        neither. A path of an image version is found in its list and manifest without building its tree, up to
        :attr:`LOOK_UPS` of them."""
        if self.indexed is not None:
            found = self.indexed.content_at(inner)
            if found is None:
                raise KeyError(inner)
            return None if found == FOLDER else found
        listed = self.listed
        if self._tree is None and listed is not None and self.looked_up < self.LOOK_UPS:
            self.looked_up += 1
            found = look_up(self.manifest, listed, inner)
            if found is None:
                raise KeyError(inner)
            if found != UNKNOWN:
                return None if found == FOLDER else found
        node = self.tree.find("/" + inner)
        if node is None:
            raise KeyError(inner)
        return node.content

    def under(self, inner: str, *, withdirs: bool, maxdepth: int | None = None) -> list[str]:
        """The sorted paths (``/a/b``) of the files under the folder ``inner`` (``""``: the root), and of the
        folders with ``withdirs``, down to ``maxdepth`` levels: a slice of a list sorted once, found by bisection;
        or, to a depth, the folders' children level by level (what is visited, not the whole slice)."""
        if maxdepth is not None:
            return self._near(inner, withdirs=withdirs, maxdepth=maxdepth)
        with self.lock:
            if self.files is None or self.everything is None:
                nodes = self.tree.nodes
                self.everything = sorted(key for key in nodes if key != "/")
                self.files = [key for key in self.everything if not nodes[key].is_folder]
        keys = self.everything if withdirs else self.files
        prefix = f"/{inner}/" if inner else "/"
        return keys[bisect.bisect_left(keys, prefix) : bisect.bisect_left(keys, folder_end(prefix))]

    def walked(self, inner: str, *, withdirs: bool, maxdepth: int | None) -> Iterator[tuple[str, Content | None]]:
        """The paths (``/a/b``) under the folder ``inner`` (as :meth:`under` finds them, in no set order) and what
        each is (``None``: a folder). An indexed version's files are streamed from its entries, a part at a time,
        with no tree beside them; the folders seen on the way follow them (with ``withdirs``)."""
        if self.indexed is None:
            nodes = self.tree.nodes
            for key in self.under(inner, withdirs=withdirs, maxdepth=maxdepth):
                yield key, nodes[key].content
            return
        depth = inner.count("/") + 1 if inner else 0
        folders: set[str] = set()
        for path, content in self.indexed.walk(inner):
            parts = path.split("/")
            if withdirs:  # the folders above it, down to maxdepth
                last = len(parts) - 1 if maxdepth is None else min(len(parts) - 1, depth + maxdepth)
                folders.update("/" + "/".join(parts[:end]) for end in range(depth + 1, last + 1))
            if maxdepth is None or len(parts) - depth <= maxdepth:
                yield "/" + path, content
        for folder in folders:
            yield folder, None

    def children(self, inner: str) -> Iterator[tuple[str, Content | None]]:
        """The names in the folder ``inner`` and what each is (``None``: a folder), in no set order: an indexed
        version's read from its entries as they are iterated."""
        if self.indexed is not None:
            return self.indexed.children(inner)
        node = self.tree.find(f"/{inner}" if inner else "/")
        assert node is not None
        return ((name, child.content) for name, child in node.children.items())

    def _near(self, inner: str, *, withdirs: bool, maxdepth: int) -> list[str]:
        """:meth:`under`'s paths down to ``maxdepth`` levels below the folder ``inner``, sorted."""
        folder = self.tree.find(f"/{inner}")
        level = [(f"/{inner}" if inner else "", folder)] if folder is not None else []
        keys = []
        for _ in range(maxdepth):
            level = [(f"{path}/{name}", child) for path, node in level for name, child in node.children.items()]
            keys += [path for path, child in level if withdirs or not child.is_folder]
            level = [(path, child) for path, child in level if child.is_folder]
        return sorted(keys)

    def view(self, content: Content, start: int, end: int, name: str) -> memoryview | bytes:
        """Bytes ``start`` to ``end - 1`` of a file (offsets within it), checked: a shard with block checksums'
        from its copy (no copy made: a ``memoryview``), a list's with blocks from its blocks that hold the range, any
        other file's from its bytes read and checked whole."""
        if content.kind == "list" and self.content.ranged(content):
            first, data = self.list_run(start, end, 0, name)
            return memoryview(data)[start - first : end - first]
        if self.content.ranged(content):
            with self.explained():
                return self.shards.span(content, start, end, name)
        return self.whole(content, name)[start:end]

    def whole(self, content: Content, name: str) -> bytes:
        """A file's bytes, read and checked whole."""
        with self.explained():
            return self.content.read(content, name=name)

    def list_run(self, start: int, end: int, ahead: int, name: str) -> tuple[int, bytes]:
        """The checked blocks of a list with blocks that hold its bytes ``start`` to ``end - 1`` (and ``ahead``
        bytes more): where they start, and their bytes."""
        with self.explained():
            return self.content.list_blocks(start, end, ahead=ahead, name=name)

    @contextlib.contextmanager
    def explained(self) -> Iterator[None]:
        """A part of the version not found is named as removed when the version was removed since it was opened."""
        try:
            yield
        except ObjectNotFoundError as missing:
            raise removed_or_missing(self.store, self.manifest, missing) from missing


#: What a listing (``find``, ``du``, ``walk``, ``glob``) takes for nothing there: fsspec's listings answer ``[]`` (or
#: ``0``) for them, as for a missing folder on a disk. Any other error (an ``IntegrityError`` above all) is raised.
_NOTHING_THERE = (FileNotFoundError, NotADirectoryError)


def _read_only(path: object = "") -> NoReturn:
    raise OSError(errno.EROFS, "datamount:// is read-only: a dataset version never changes", str(path or ""))


class DatamountFileSystem(AbstractFileSystem):
    """Dataset versions as a read-only filesystem: ``fsspec.open("datamount://_/pets@3/data/cat/1.jpg")``.

    Parameters
    ----------
    store
        The store that ``_`` names in paths: a URL, a path or a profile's name; by default the default store.
    options
        Backend options for ``store`` (``endpoint_url``...), as :func:`datamount.storage.open_store` takes them.
    cache
        The content cache's folder for a remote store's files and the manifests of opened versions; ``False`` for
        none; by default ``$DATAMOUNT_CACHE_DIR`` (else the XDG cache folder).
    """

    protocol = PROTOCOL
    root_marker = ""

    def __init__(
        self,
        store: str | None = None,
        options: dict[str, Any] | None = None,
        cache: str | bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(store=store, options=options, cache=cache, **kwargs)
        if store is not None and not isinstance(store, str):
            raise TypeError(f"store is a URL, a path or a profile's name, not {type(store).__name__}")
        self._given = store
        self._options = dict(options or {})
        self._cache_folder = cache
        self._cache: ContentCache | None = None
        self._lock = threading.RLock()
        self._stores: dict[str, Store] = {}
        self._opened: dict[tuple[str, str, str], _Version] = {}
        #: Versions a parent process resolved, found again by their manifest's sha256 (see :meth:`__reduce__`).
        self._pinned: dict[tuple[str, str, str], pinning.Pinned] = {}

    # ------------------------------------------------------------------------------------------------ paths

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        return strip(str(path))

    @staticmethod
    def _get_kwargs_from_urls(path: str) -> dict[str, Any]:
        # A URL holds no option: its <store> is part of the path (as an S3 URL's bucket), so that one filesystem
        # serves every store and `_` stays the store it was given.
        return {}

    # --------------------------------------------------------------------------------------------- versions

    def invalidate_cache(self, path: str | None = None) -> None:
        """Resolve ``latest`` again on its next use (a numbered version never changes: it stays)."""
        with self._lock:
            for key in [key for key in self._opened if key[2] == LATEST]:
                del self._opened[key]
                self._pinned.pop(key, None)

    def _content_cache(self) -> ContentCache | None:
        if self._cache is None and self._cache_folder is not False:
            folder = None if self._cache_folder in (None, True) else self._cache_folder
            self._cache = ContentCache(folder)
        return self._cache

    def _store(self, name: str) -> Store:
        """The store ``name`` (a path's ``<store>``) names, opened once."""
        store = self._stores.get(name)
        if store is not None:
            return store
        if name == DEFAULT_STORE:
            store = open_store(self._given, check=False, **self._options)
        elif self._given is not None:
            raise ValueError(
                f"datamount://{name}/...: this filesystem was given the store {self._given!r}, "
                f"which its paths name {DEFAULT_STORE}"
            )
        else:
            config = profiles.load_config()
            if name not in config.profiles:
                known = ", ".join(sorted(config.profiles)) or "none"
                raise FileNotFoundError(
                    errno.ENOENT,
                    f"no store profile {name!r} in {config.path} (profiles: {known}); "
                    f"write {DEFAULT_STORE} for the default store",
                    f"datamount://{name}",
                )
            store = open_store(name, check=False, **self._options)
        self._stores[name] = store
        return store

    def _version(self, where: VersionPath) -> _Version:
        """The version ``where`` names, resolved and its tree built on first use."""
        opened = self._opened.get(where.key)
        if opened is not None:
            return opened
        with self._lock:
            opened = self._opened.get(where.key)
            if opened is None:
                opened = self._opened[where.key] = self._open_version(where)
        return opened

    def _open_version(self, where: VersionPath) -> _Version:
        store = self._store(where.store)
        cache = self._content_cache()
        pinned = self._pinned.get(where.key)
        manifest = None
        if pinned is not None and cache is not None:
            manifest = pinning.recall(cache, pinned, f"datamount://{where.root}", store)
        if manifest is None:
            if pinned is not None:  # by the number and sha256 the sender resolved, never `latest` again
                manifest = pinning.fetch(store, pinned, f"datamount://{where.root}")
            else:
                manifest = catalog.resolve(
                    store, where.name if where.version == LATEST else f"{where.name}@{where.version}"
                )
            if isinstance(manifest.files, FileParts):  # its entries' parts kept with the manifest, for workers
                manifest = dataclasses.replace(manifest, files=manifest.files.cached_in(cache))
        if manifest.row_parts is not None:
            manifest = dataclasses.replace(manifest, row_parts=manifest.row_parts.cached_in(cache))
        content = TreeBytes(store, manifest, cache=cache)
        if manifest.indexed and manifest.kind is Kind.IMAGE:
            return _Version(store, manifest, None, content, pinned, IndexedTree(manifest, image_shards=True))
        listed = None
        if manifest.kind is Kind.IMAGE and manifest.has_list:
            the_list = Content("list", manifest.list_size)
            listed = content.read(the_list, name=f"datamount://{where.root} (its list)")
        return _Version(store, manifest, listed, content, pinned)

    def _find(self, path: str) -> tuple[VersionPath, _Version, Content | None]:
        """The version of ``path`` and what is at it: a file's content, ``None`` for a folder; the error of
        :meth:`_absent` where nothing is."""
        where = parse(path)
        version = self._version(where)
        try:
            content = version.content_at(where.inner)
        except KeyError:
            raise self._absent(where, version) from None
        if content is not None and where.folder:
            raise self._absent(where, version)
        return where, version, content

    def _absent(self, where: VersionPath, version: _Version) -> OSError:
        """Why nothing is at ``where``, as a disk says it: ``NotADirectoryError`` when a file of the version stands
        where the path needs a folder (``file/x``, ``file/.``), else ``FileNotFoundError``."""
        name = f"datamount://{where.joined(where.inner)}"
        parts = where.inner.split("/")
        for count in range(1, len(parts) + 1):
            prefix = "/".join(parts[:count])
            try:
                content = version.content_at(prefix)
            except KeyError:
                break
            if content is not None and (count < len(parts) or where.folder):
                return NotADirectoryError(
                    errno.ENOTDIR, f"{prefix} is a file of {version.manifest.ref}, not a folder", name
                )
        return FileNotFoundError(errno.ENOENT, f"no such file or folder in {version.manifest.ref}", name)

    # -------------------------------------------------------------------------------------------- listing

    def _details(self, where: VersionPath, version: _Version, inner: str, content: Content | None) -> dict[str, Any]:
        path = where.joined(inner)
        info: dict[str, Any] = {
            "name": path,
            "size": 0,
            "type": "directory",
            "version": version.manifest.version,
            "created": version.manifest.created,
        }
        if content is not None:
            info["type"] = "file"
            info["size"] = content.size
            kind, digest = _digest_of(version.manifest, content)
            if digest:
                info[kind] = info["etag"] = info["ukey"] = digest
        return info

    @counted
    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        where, version, content = self._find(path)
        return self._details(where, version, where.inner, content)

    @counted
    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        where, version, content = self._find(path)
        if content is not None:
            return [self._details(where, version, where.inner, content) if detail else where.joined(where.inner)]
        prefix = f"{where.inner}/" if where.inner else ""
        entries = version.children(where.inner)
        # One list, made as the names are read, sorted where it is (a folder may hold a million files).
        if detail:
            details = [self._details(where, version, prefix + name, child) for name, child in entries]
            details.sort(key=operator.itemgetter("name"))
            return details
        names = [where.joined(prefix + name) for name, _ in entries]
        names.sort()
        return names

    def _found(
        self, path: str, maxdepth: int | None, withdirs: bool
    ) -> tuple[VersionPath, _Version, Content | None, Iterator[tuple[str, Content | None]]] | None:
        """What ``find`` finds at ``path``: its content (``None``: a folder) and the paths in the version (``/a/b``)
        under a folder with what each is (:meth:`_Version.walked`); ``None`` where nothing is at ``path``."""
        if maxdepth is not None and maxdepth < 1:
            raise ValueError("maxdepth must be at least 1")
        try:
            where, version, content = self._find(path)
        except _NOTHING_THERE:
            return None
        walked = iter(()) if content is not None else version.walked(where.inner, withdirs=withdirs, maxdepth=maxdepth)
        return where, version, content, walked

    @counted
    def find(
        self, path: str, maxdepth: int | None = None, withdirs: bool = False, detail: bool = False, **kwargs: Any
    ) -> Any:
        found = self._found(path, maxdepth, withdirs)
        if found is None:
            return {} if detail else []
        where, version, content, walked = found
        if content is not None:  # a file finds itself, answered without the tree
            name = where.joined(where.inner)
            return {name: self._details(where, version, where.inner, content)} if detail else [name]
        root = where.root
        # The folder itself with withdirs, named as the path was written (as fsspec's find names it).
        itself = self._strip_protocol(path) if withdirs else None
        if not detail:
            names = [root + key for key, _ in walked]
            if itself is not None:
                names.append(itself)
            names.sort()
            return names
        details = {root + key: self._details(where, version, key[1:], child) for key, child in walked}
        if itself is not None:
            details[itself] = {**self._details(where, version, where.inner, None), "name": itself}
        return {name: details[name] for name in sorted(details)}

    def du(
        self, path: str, total: bool = True, maxdepth: int | None = None, withdirs: bool = False, **kwargs: Any
    ) -> Any:
        found = self._found(path, maxdepth, withdirs)
        if found is None:
            return 0 if total else {}
        where, _, content, walked = found
        if content is not None:
            return content.size if total else {where.joined(where.inner): content.size}
        if total:  # a folder's size is 0
            return sum(child.size for _, child in walked if child is not None)
        sizes = {where.root + key: 0 if child is None else child.size for key, child in walked}
        if withdirs:
            sizes[self._strip_protocol(path)] = 0
        return dict(sorted(sizes.items()))

    def get_file(
        self, rpath: str, lpath: Any, callback: Any = DEFAULT_CALLBACK, outfile: Any = None, **kwargs: Any
    ) -> None:
        """A path that names no file or folder (through a file too) is a ``FileNotFoundError`` here, as
        ``LocalFileSystem.get`` says, before anything is made at ``lpath``."""
        try:
            self._find(rpath)
        except _NOTHING_THERE as error:
            raise FileNotFoundError(errno.ENOENT, f"nothing to copy: {error.strerror}", error.filename) from error
        super().get_file(rpath, lpath, callback=callback, outfile=outfile, **kwargs)

    def exists(self, path: str, **kwargs: Any) -> bool:
        try:
            self._find(path)
        except (*_NOTHING_THERE, ValueError):
            return False
        return True

    def modified(self, path: str) -> datetime.datetime:
        """When the version was committed: every file of it was made then and never changed."""
        _, version, _ = self._find(path)
        return datetime.datetime.fromisoformat(version.manifest.created)

    def created(self, path: str) -> datetime.datetime:
        return self.modified(path)

    def ukey(self, path: str) -> str:
        """The file's recorded digest (a folder's path and version): a key that changes only with the content."""
        info = self.info(path)
        return info.get("etag") or f"{info['name']}#{info['version']}"

    def checksum(self, path: str) -> int:
        info = self.info(path)
        return int(info["etag"][:16], 16) if "etag" in info else super().checksum(path)

    # -------------------------------------------------------------------------------------------- reading

    def _file(self, path: str) -> tuple[_Version, Content, str]:
        where, version, content = self._find(path)
        if content is None:
            raise IsADirectoryError(
                errno.EISDIR, "a folder of a dataset version", f"datamount://{where.joined(where.inner)}"
            )
        return version, content, f"datamount://{where.joined(where.inner)}"

    @counted
    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        version, content, name = self._file(path)
        start, end = _clip(start, end, content.size)
        return bytes(version.view(content, start, end, name))

    @counted
    def cat_ranges(
        self,
        paths: list[str],
        starts: int | list[int] | None,
        ends: int | list[int] | None,
        max_gap: Any = None,
        on_error: str = "return",
        **kwargs: Any,
    ) -> list[bytes | Exception]:
        count = len(paths)
        firsts: list[int | None] = list(starts) if isinstance(starts, list) else [starts] * count
        lasts: list[int | None] = list(ends) if isinstance(ends, list) else [ends] * count
        if len(firsts) != count or len(lasts) != count:
            raise ValueError("paths, starts and ends must be as long as each other")
        whole: dict[str, bytes] = {}  # a file read whole is read once for all its ranges
        answers: list[bytes | Exception] = []
        for path, start, end in zip(paths, firsts, lasts, strict=True):
            try:
                version, content, name = self._file(path)
                first, stop = _clip(start, end, content.size)
                if version.content.ranged(content):
                    answers.append(bytes(version.view(content, first, stop, name)))
                else:
                    if name not in whole:
                        whole[name] = version.whole(content, name)
                    answers.append(whole[name][first:stop])
            except Exception as exc:
                if on_error == "raise":
                    raise
                answers.append(exc)
        return answers

    @counted
    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | None = None,
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> DatamountFile:
        if mode != "rb":
            _read_only(path)
        version, content, name = self._file(path)
        return DatamountFile(self, path, version, content, name, block_size=block_size)

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if "r" not in mode or "+" in mode:
            _read_only(path)
        return super().open(path, mode, **kwargs)

    # ------------------------------------------------------------------------------------ never written

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> NoReturn:
        _read_only(path)

    def makedirs(self, path: str, exist_ok: bool = False) -> NoReturn:
        _read_only(path)

    def rmdir(self, path: str) -> NoReturn:
        _read_only(path)

    def rm_file(self, path: str) -> NoReturn:
        _read_only(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> NoReturn:
        _read_only(path)

    def _rm(self, path: str) -> NoReturn:
        _read_only(path)

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> NoReturn:
        _read_only(path)

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> NoReturn:
        _read_only(path)

    def pipe(self, path: Any, value: bytes | None = None, **kwargs: Any) -> NoReturn:
        _read_only(path)

    def put_file(
        self, lpath: str, rpath: str, callback: Any = None, mode: str = "overwrite", **kwargs: Any
    ) -> NoReturn:
        _read_only(rpath)

    def put(self, lpath: Any, rpath: Any, recursive: bool = False, callback: Any = None, **kwargs: Any) -> NoReturn:
        _read_only(rpath)

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> NoReturn:
        _read_only(path2)

    def copy(self, path1: Any, path2: Any, recursive: bool = False, **kwargs: Any) -> NoReturn:
        _read_only(path2)

    def mv(
        self, path1: Any, path2: Any, recursive: bool = False, maxdepth: int | None = None, **kwargs: Any
    ) -> NoReturn:
        _read_only(path1)

    # ----------------------------------------------------------------------------------------- pickling

    def __reduce__(self) -> tuple[Any, ...]:
        return _reopen, (type(self), self._given, self._options, self._cache_folder, self._pins())

    def _pins(self) -> dict[tuple[str, str, str], pinning.Pinned]:
        """What finds each opened version again: its number and manifest's sha256 (its JSON put in the content
        cache once, when there is one)."""
        cache = self._content_cache()
        pins = dict(self._pinned)
        with self._lock:
            for key, version in self._opened.items():
                if version.pinned is None:
                    version.pinned = pinning.pin(version.manifest, cache)
                pins[key] = version.pinned
        return pins


def _reopen(
    cls: type[DatamountFileSystem],
    store: str | None,
    options: dict[str, Any],
    cache: str | bool | None,
    pins: dict[tuple[str, str, str], pinning.Pinned],
) -> DatamountFileSystem:
    """A filesystem in another process: the same options, the versions its sender opened pinned to their manifests."""
    filesystem = cls(store=store, options=options, cache=cache, skip_instance_cache=True)
    filesystem._pinned = {key: pinning.Pinned(*pin) for key, pin in pins.items()}
    return filesystem


class DatamountFile(AbstractBufferedFile):
    """A file of a version, read-only: a shard with block checksums is fetched by whole blocks as they are asked for,
    each checked and kept (:class:`~datamount.urlfs.shard_copies.ShardCopies`); a list with blocks by its blocks of
    lines, each checked, :data:`LIST_READ_AHEAD` bytes of them at a time, the last run kept; any other file is read
    and checked whole on its first read."""

    def __init__(
        self,
        fs: DatamountFileSystem,
        path: str,
        version: _Version,
        content: Content,
        name: str,
        *,
        block_size: int | None = None,
    ) -> None:
        self._version = version
        self._content = content
        self._name = name
        self._whole: bytes | None = None
        #: The run of a list's checked blocks read last: where it starts, and its bytes.
        self._list_run: tuple[int, bytes] = (0, b"")
        # No buffer of fsspec's: every read comes from checked bytes, fetched in whole blocks.
        super().__init__(fs, path, mode="rb", block_size=block_size or 1 << 20, cache_type="none", size=content.size)

    @counted
    def _fetch_range(self, start: int, end: int) -> bytes:
        return bytes(self._view(start, end))

    @counted
    def read_buffer(self, length: int = -1) -> memoryview | bytes:
        """:meth:`read`, but the checked bytes themselves, not a copy of them: what pyarrow asks a Python file
        for (a Parquet reader's column chunks come without a copy in Python)."""
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        end = self.size if length is None or length < 0 else min(self.size, self.loc + length)
        data = self._view(self.loc, end)
        self.loc += len(data)
        return data

    def _view(self, start: int, end: int) -> memoryview | bytes:
        if self._content.kind == "list" and self._version.content.ranged(self._content):
            end = min(end, self._content.size)
            first, data = self._list_run
            if not first <= start <= end <= first + len(data):
                first, data = self._list_run = self._version.list_run(start, end, LIST_READ_AHEAD, self._name)
            return memoryview(data)[start - first : end - first]
        if self._version.content.ranged(self._content):
            return self._version.view(self._content, start, end, self._name)
        if self._whole is None:
            self._whole = self._version.whole(self._content, self._name)
        return memoryview(self._whole)[start:end]


def _clip(start: int | None, end: int | None, size: int) -> tuple[int, int]:
    """``start`` and ``end`` as offsets in a file of ``size`` bytes (negatives from its end, ``None`` its ends)."""
    first = 0 if start is None else start + size if start < 0 else start
    stop = size if end is None else end + size if end < 0 else end
    first, stop = max(0, min(first, size)), max(0, min(stop, size))
    return first, max(first, stop)


def _digest_of(manifest: Manifest, content: Content) -> tuple[str, str]:
    """The digest of a file's bytes that the manifest records, and its kind: its sha256, or for a file held only in
    shards from format 8, which records none, its xxh3-64 (``("", "")`` where there is neither)."""
    if content.kind == "shard" and content.shard is not None:
        return "sha256", content.shard.sha256
    if content.kind == "list":
        return "sha256", manifest.list_sha256
    if content.entry is None:
        return "", ""
    return ("sha256", content.entry.sha256) if content.entry.sha256 else ("xxh3", content.entry.xxh3)
