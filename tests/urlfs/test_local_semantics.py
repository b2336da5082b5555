"""``datamount://`` answers every read call as fsspec's ``LocalFileSystem`` answers it on the same files in a folder.

A folder of files and its ``train.list`` is uploaded as a version; then each call is made on both, the version through
``datamount://_/tree@1<path>`` and the folder through ``<folder><path>``, for the same ``<path>`` (spelled with
``//``, ``./``, a trailing ``/`` or ``/.``, through a file, missing), and the answers compared: equal values, or the
same built-in error. Names are compared as the version's (``LocalFileSystem`` keeps a caller's spelling in the names
it hands out, ``data//cat/1.jpg``; ``datamount://`` writes every name in one form, ``data/cat/1.jpg``); a folder's
size is compared as a folder's (4096 on a disk, 0 in a version).
"""

from __future__ import annotations

import glob as posix_glob
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fsspec.implementations.local import LocalFileSystem
from hypothesis import given, settings
from hypothesis import strategies as st

from datamount.datasets import upload
from datamount.storage import open_store
from datamount.urlfs import DatamountFileSystem

ROOT = "_/tree@1"
#: The folder's files: nested folders, a file and a folder whose names share a prefix, an empty file, dots.
FILES = {
    "top.txt": b"top level\n",
    "empty.bin": b"",
    "data/a.b": b"a dotted name",
    "data/cat/1.jpg": b"cat one",
    "data/cat/2.jpg": b"cat two, longer",
    "data/dog/1.jpg": b"dog",
    "data/dog/puppy/0.jpg": b"a puppy, four folders down",
    "subdir.txt": b"beside subdir",
    "subdir/x": b"x",
}
FOLDERS = sorted({"/".join(path.split("/")[:end]) for path in FILES for end in range(1, path.count("/") + 1)})

#: Paths in the version (after its root), each spelled as a caller may spell it.
ODD_PATHS = {
    "root": "",
    "root-slash": "/",
    "root-dot": "/.",
    "file": "/top.txt",
    "empty-file": "/empty.bin",
    "folder": "/data",
    "nested": "/data/cat",
    "deep-file": "/data/dog/puppy/0.jpg",
    "doubled": "/data//cat",
    "doubled-first": "//data/cat",
    "doubled-file": "/data//cat//1.jpg",
    "dot-first": "/./data",
    "dot-inner": "/data/./cat",
    "dots-and-slashes": "/./data/./cat/./",
    "trailing": "/data/cat/",
    "trailing-doubled": "/data/cat//",
    "folder-dot": "/data/cat/.",
    "file-trailing": "/top.txt/",
    "file-dot": "/top.txt/.",
    "file-dot-slash": "/top.txt/./",
    "under-file": "/top.txt/x",
    "under-file-deep": "/data/cat/1.jpg/x/y",
    "under-file-doubled": "/data/cat/1.jpg//x",
    "missing": "/missing",
    "missing-under": "/missing/x",
    "missing-in-folder": "/data/nothing.jpg",
    "missing-dot": "/missing/.",
    "name-prefix-folder": "/subdir",
    "name-prefix-file": "/subdir.txt",
    "name-prefix-missing": "/subdi",
}


def _kind(error: BaseException) -> type[BaseException]:
    """The built-in class an error is (``DatasetNotFoundError`` is a ``FileNotFoundError``)."""
    return next(cls for cls in type(error).__mro__ if cls.__module__ == "builtins")


def _folder_or(fs: Any, path: str, value: Any) -> Any:
    return "a folder" if fs.isdir(path) else value


def _got(fs: Any, source: str, *, recursive: bool) -> dict[str, bytes | None]:
    """What ``get`` writes: each path under a new target, a file's bytes or ``None`` for a folder."""
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "target"
        fs.get(source, str(target), recursive=recursive)
        return {
            path.relative_to(folder).as_posix(): None if path.is_dir() else path.read_bytes()
            for path in Path(folder).rglob("*")
        }


def _read(fs: Any, path: str) -> bytes:
    with fs.open(path, "rb") as file:
        first = file.read(3)
        file.seek(1)
        return first + file.read()


def _walked(fs: Any, path: str, **options: Any) -> list[tuple[str, list[str], list[str]]]:
    return sorted((root, sorted(dirs), sorted(files)) for root, dirs, files in fs.walk(path, **options))


#: Each read call, as ``call(filesystem, path)``.
CALLS: dict[str, Callable[[Any, str], Any]] = {
    "info": lambda fs, p: fs.info(p),
    "ls": lambda fs, p: sorted(fs.ls(p, detail=False)),
    "ls-detail": lambda fs, p: sorted(fs.ls(p, detail=True), key=lambda info: info["name"]),
    "find": lambda fs, p: fs.find(p),
    "find-withdirs": lambda fs, p: fs.find(p, withdirs=True),
    "find-detail": lambda fs, p: fs.find(p, detail=True),
    "find-maxdepth-1": lambda fs, p: fs.find(p, maxdepth=1),
    "find-maxdepth-2-withdirs": lambda fs, p: fs.find(p, maxdepth=2, withdirs=True),
    "find-maxdepth-2-withdirs-detail": lambda fs, p: fs.find(p, maxdepth=2, withdirs=True, detail=True),
    "find-maxdepth-0": lambda fs, p: fs.find(p, maxdepth=0),
    "walk": lambda fs, p: _walked(fs, p),
    "walk-maxdepth-1": lambda fs, p: _walked(fs, p, maxdepth=1),
    "walk-bottom-up": lambda fs, p: _walked(fs, p, topdown=False),
    "glob": lambda fs, p: fs.glob(p),
    "glob-star": lambda fs, p: fs.glob(p + "/*"),
    "glob-stars": lambda fs, p: fs.glob(p + "/**"),
    "glob-stars-maxdepth-1": lambda fs, p: fs.glob(p + "/**", maxdepth=1),
    "glob-folders": lambda fs, p: fs.glob(p + "/*/"),
    "glob-detail": lambda fs, p: fs.glob(p + "/*", detail=True),
    "du": lambda fs, p: fs.du(p),
    "du-each": lambda fs, p: fs.du(p, total=False),
    "du-maxdepth-1": lambda fs, p: fs.du(p, maxdepth=1),
    "du-withdirs": lambda fs, p: sorted(fs.du(p, total=False, withdirs=True)),
    "exists": lambda fs, p: fs.exists(p),
    "isdir": lambda fs, p: fs.isdir(p),
    "isfile": lambda fs, p: fs.isfile(p),
    "size": lambda fs, p: _folder_or(fs, p, fs.size(p)),
    "sizes": lambda fs, p: _folder_or(fs, p, fs.sizes([p, p])),
    "expand_path": lambda fs, p: fs.expand_path(p),
    "expand_path-recursive": lambda fs, p: fs.expand_path(p, recursive=True),
    "expand_path-maxdepth-1": lambda fs, p: fs.expand_path(p, recursive=True, maxdepth=1),
    "cat_file": lambda fs, p: fs.cat_file(p),
    "cat_file-range": lambda fs, p: fs.cat_file(p, start=1, end=3),
    "cat_file-tail": lambda fs, p: fs.cat_file(p, start=-4),
    "cat": lambda fs, p: fs.cat(p),
    "cat-recursive": lambda fs, p: fs.cat(p, recursive=True, on_error="omit"),
    "cat_ranges": lambda fs, p: fs.cat_ranges([p, p], [0, 2], [3, None], on_error="raise"),
    "open": _read,
    "head": lambda fs, p: fs.head(p, 4),
    "tail": lambda fs, p: fs.tail(p, 4),
    "read_block": lambda fs, p: fs.read_block(p, 1, 5),
    "read_text": lambda fs, p: fs.read_text(p),
    "get": lambda fs, p: _got(fs, p, recursive=False),
    "get-recursive": lambda fs, p: _got(fs, p, recursive=True),
}


class _Tree:
    """The folder, its version, and a filesystem on each."""

    def __init__(self, folder: Path, version_fs: DatamountFileSystem) -> None:
        self.folder = str(folder)
        self.local = LocalFileSystem()
        self.version = version_fs

    def answer(self, fs: Any, call: str, path: str, *, names: str) -> tuple[str, Any]:
        """What ``call`` of ``path`` answers, its names (``names...``) written as the version's."""
        try:
            value = CALLS[call](fs, path)
        except Exception as error:  # every error is an answer to compare, as its built-in class
            return "raised", _kind(error)
        return "answered", _as_version(value, names)

    def compare(self, call: str, path: str, *, local_path: str | None = None, urls: bool = False) -> None:
        """``call`` of ``path`` in the version and of ``local_path`` (else ``path``) in the folder, both as URLs
        (``datamount://``, ``file://``) with ``urls``."""
        ours = self.answer(self.version, call, ("datamount://" if urls else "") + ROOT + path, names=ROOT)
        local_path = path if local_path is None else local_path
        theirs = self.answer(
            self.local, call, ("file://" if urls else "") + self.folder + local_path, names=self.folder
        )
        assert ours == theirs, f"{call}({ROOT}{path!r})"


def _as_version(value: Any, root: str) -> Any:
    """``value`` with its names (``root...``) as the version's: ``ROOT`` and the path in one form; an info's name,
    type, and a file's size (a folder's is the disk's). The version's own names are compared as they are, but for a
    path asked for as ``.../.``, which fsspec's code (``walk``, ``find``'s folder, ``expand_path``) hands back as it
    was asked for, on a disk too."""
    if isinstance(value, str) and root == ROOT and value.startswith(ROOT):
        return value.removesuffix("/.")
    if isinstance(value, str) and (value == root or value.startswith(root + "/")):
        parts = [part for part in value[len(root) :].split("/") if part not in ("", ".")]
        return "/".join([ROOT, *parts])
    if isinstance(value, dict) and "type" in value and "name" in value:
        size = value["size"] if value["type"] == "file" else None
        return {"name": _as_version(value["name"], root), "type": value["type"], "size": size}
    if isinstance(value, dict):
        return {_as_version(key, root): _as_version(item, root) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_as_version(item, root) for item in value)
    return value


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> _Tree:
    """The files of :data:`FILES` and their list in a folder, uploaded as ``tree@1`` from it."""
    folder = tmp_path_factory.mktemp("tree") / "folder"
    for path, data in FILES.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
    (folder / "train.list").write_text("".join(f"{path}\tx\n" for path in FILES), encoding="utf-8")
    store = open_store(tmp_path_factory.mktemp("store") / "store")
    upload(folder / "train.list", "tree", store=store)
    version_fs = DatamountFileSystem(store=store.url, cache=False, skip_instance_cache=True)
    assert version_fs.cat_file(f"{ROOT}/train.list") == (folder / "train.list").read_bytes()
    return _Tree(folder, version_fs)


@pytest.mark.parametrize("path", ODD_PATHS.values(), ids=ODD_PATHS.keys())
@pytest.mark.parametrize("call", CALLS)
def test_each_call_answers_as_local_on_the_same_folder(tree: _Tree, call: str, path: str) -> None:
    tree.compare(call, path, local_path=_posix_pattern(call, path))


def _posix_pattern(call: str, path: str) -> str | None:
    """The folder's path for ``call`` of ``path`` where ``call`` makes a pattern of it (``path + "/*"``): its ``//``
    made ``/``.

    ``LocalFileSystem.glob("data//*")`` matches nothing: it lists ``data`` (its listing drops the ``//``) and then
    matches the names against a pattern that keeps it. A disk's glob (``glob.glob``, the shell) matches
    ``data/cat``...: so does ``datamount://``, and so does ``LocalFileSystem`` given the pattern as POSIX reads it
    (:func:`test_a_doubled_slash_in_a_pattern_matches_as_posix_glob_does`)."""
    if not call.startswith("glob-") or "//" not in path + "/":
        return None
    return re.sub("/+", "/", path).removesuffix("/")


def test_a_doubled_slash_in_a_pattern_matches_as_posix_glob_does(tree: _Tree) -> None:
    expected = sorted(_as_version(name, tree.folder) for name in posix_glob.glob(tree.folder + "/data//*"))
    assert tree.version.glob(f"{ROOT}/data//*") == expected == [f"{ROOT}/data/{name}" for name in ("a.b", "cat", "dog")]
    assert tree.version.glob(f"datamount://{ROOT}//data/./c*//*.jpg") == [
        f"{ROOT}/data/cat/1.jpg",
        f"{ROOT}/data/cat/2.jpg",
    ]


#: Names a random path is made of: the tree's, and some it does not have.
NAMES = sorted({part for path in [*FILES, *FOLDERS] for part in path.split("/")} | {"x", "missing", "1.jpg", "cat"})
SEPARATORS = st.sampled_from(["/", "/", "/", "//", "/./", "/.//"])


@st.composite
def odd_paths(draw: st.DrawFn) -> str:
    """A path after the version's root: a path of the tree (or the root) and maybe more names after it (missing, or
    through a file), its parts joined by ``/``, ``//`` or ``/./``, maybe ending in ``/``, ``//``, ``/.`` or ``/./``."""
    start = draw(st.sampled_from(["", *FOLDERS, *FILES]))
    parts = [*filter(None, start.split("/")), *draw(st.lists(st.sampled_from(NAMES), max_size=2))]
    path = "".join(draw(SEPARATORS) + part for part in parts)
    return path + draw(st.sampled_from(["", "", "/", "//", "/.", "/./"]))


@settings(max_examples=200, deadline=None)
@given(path=odd_paths(), call=st.sampled_from(sorted(CALLS)), urls=st.booleans())
def test_any_path_answers_as_local_on_the_same_folder(tree: _Tree, path: str, call: str, urls: bool) -> None:
    tree.compare(call, path, local_path=_posix_pattern(call, path), urls=urls)
