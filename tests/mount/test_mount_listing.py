"""An open folder of an indexed version is listed a window of nodes at a time (mount/open_folder.py): every reader
(``os.listdir``, ``os.scandir``, two at once, ``rewinddir`` and ``seekdir`` on one open folder) finds the names the
tree built from the whole list shows, and the serving process holds no more than a window of them per open folder
besides the nodes the tree keeps; the files the kernel holds are made again when it asks for them, not held.

The version is served in this process (a thread answers the kernel), so that the window can be made small and what
the serving side holds can be counted while a reader lists."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from datamount.datasets import catalog, upload
from datamount.datasets.export import list_name
from datamount.datasets.manifest import Manifest
from datamount.mount import mount, open_folder, unmount
from datamount.mount.lazy_tree import LazyNode, LazyTree
from datamount.storage import Store
from tests.mount.test_mount_indexed import format_6_copy

pyfuse3 = pytest.importorskip("pyfuse3")
trio = pytest.importorskip("trio")

from datamount.mount.content import Contents  # noqa: E402  (needs the mount extra)
from datamount.mount.filesystem import DatasetFilesystem  # noqa: E402

pytestmark = pytest.mark.timeout(300)

#: Serves a version's lazy tree (keeping ``kept`` nodes the kernel does not hold) in this process.
Serve = Callable[..., DatasetFilesystem]


def write_version(store: Store, root: Path, paths: list[str]) -> Manifest:
    for number, path in enumerate(paths):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(f"{number}".encode())
    (root / "train.list").write_text("".join(f"{path}\t{n % 3}\n" for n, path in enumerate(paths)), encoding="utf-8")
    return upload(root / "train.list", "d", store=store, packed=True).manifest


@pytest.fixture
def served_here(mountpoint: Path) -> Iterator[Serve]:
    """A function that serves a version's lazy tree at ``mountpoint`` from a thread of this process (until the
    test ends) and gives its :class:`DatasetFilesystem`."""
    thread: list[threading.Thread] = []

    def serve(store: Store, manifest: Manifest, *, kept: int) -> DatasetFilesystem:
        assert manifest.row_parts is not None
        tree = LazyTree(manifest, store, kept=kept)
        filesystem = DatasetFilesystem(tree, Contents(store, manifest, row_files=manifest.row_parts))
        pyfuse3.init(filesystem, str(mountpoint), {"ro", "fsname=datamount-test", "subtype=datamount"})
        thread.append(threading.Thread(target=trio.run, args=(pyfuse3.main,)))
        thread[0].start()
        return filesystem

    yield serve
    if thread:
        unmount(mountpoint)
        thread[0].join(timeout=30)
        pyfuse3.close(unmount=False)


class Directory:
    """A folder read through libc's ``opendir``: ``telldir``, ``seekdir`` and ``rewinddir`` on one open folder."""

    class Entry(ctypes.Structure):
        _fields_ = [  # glibc's struct dirent on 64-bit Linux
            ("d_ino", ctypes.c_uint64),
            ("d_off", ctypes.c_int64),
            ("d_reclen", ctypes.c_ushort),
            ("d_type", ctypes.c_ubyte),
            ("d_name", ctypes.c_char * 256),
        ]

    def __init__(self, path: Path) -> None:
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self.libc.opendir.restype = ctypes.c_void_p
        self.libc.readdir.restype = ctypes.POINTER(self.Entry)
        self.libc.readdir.argtypes = self.libc.telldir.argtypes = self.libc.rewinddir.argtypes = [ctypes.c_void_p]
        self.libc.closedir.argtypes = [ctypes.c_void_p]
        self.libc.telldir.restype = ctypes.c_long
        self.libc.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]
        self.handle = self.libc.opendir(os.fsencode(path))
        assert self.handle, os.strerror(ctypes.get_errno())

    def read(self) -> list[tuple[int, str]]:
        """The names from where the folder is read to its end, each with the position before it (``telldir``)."""
        found: list[tuple[int, str]] = []
        while True:
            position = self.libc.telldir(self.handle)
            ctypes.set_errno(0)
            entry = self.libc.readdir(self.handle)
            if not entry:
                assert ctypes.get_errno() == 0, os.strerror(ctypes.get_errno())
                return found
            name = os.fsdecode(entry.contents.d_name)
            if name not in (".", ".."):
                found.append((position, name))

    def seek(self, position: int) -> None:
        self.libc.seekdir(self.handle, position)

    def rewind(self) -> None:
        self.libc.rewinddir(self.handle)

    def close(self) -> None:
        self.libc.closedir(self.handle)


def test_a_folder_of_many_windows_is_listed_whole_by_every_reader(
    local_store: Store, tmp_path: Path, mountpoint: Path, served_here: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(open_folder, "LISTING_WINDOW", 7)
    monkeypatch.setattr(open_folder, "KEPT_BEHIND", 2)
    # Names either side of "/" ("a-b", "a.jpg", "a0" beside the folder "a"), folders between files.
    paths = [f"big/f{n:03d}.jpg" for n in range(120)] + [
        "big/a/x.jpg", "big/a-b.jpg", "big/a.jpg", "big/a0/y.jpg", "big/m/n/z.jpg", "top.jpg",
    ]  # fmt: skip
    manifest = write_version(local_store, tmp_path / "src", paths)
    built = tmp_path / "built"
    built.mkdir()
    mount(format_6_copy(local_store, manifest), built, store=local_store, cache=False)
    try:
        filesystem = served_here(local_store, manifest, kept=1 << 15)
        for inner in ("", "big", "big/a"):
            folder, expected = mountpoint / inner, sorted(os.listdir(built / inner))
            listed = os.listdir(folder)
            assert sorted(listed) == expected and len(listed) == len(expected), inner
            shown = {entry.name: (entry.is_dir(), entry.stat().st_size) for entry in os.scandir(folder)}
            assert shown == {entry.name: (entry.is_dir(), entry.stat().st_size) for entry in os.scandir(built / inner)}
        folder, expected = mountpoint / "big", sorted(os.listdir(built / "big"))
        assert len(expected) > 10 * open_folder.LISTING_WINDOW

        # Two readers of the folder, in turn: each its own open folder.
        first, second = os.scandir(folder), os.scandir(folder)
        names: tuple[list[str], list[str]] = ([], [])
        for one, other in zip(first, second, strict=True):
            names[0].append(one.name)
            names[1].append(other.name)
        assert sorted(names[0]) == sorted(names[1]) == expected

        # One open folder read again from its start: the offset the reader shares with its copy is set back to 0.
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            assert os.listdir(descriptor) == os.listdir(descriptor) == listed_order(folder)
        finally:
            os.close(descriptor)

        # rewinddir and seekdir on one open folder: back to its start, and to positions it gave, behind and ahead.
        directory = Directory(folder)
        try:
            whole = directory.read()
            assert sorted(name for _, name in whole) == expected
            for index in (len(whole) - 1, 3, len(whole) // 2, 0, len(whole) - 20, 60):
                directory.seek(whole[index][0])
                assert directory.read() == whole[index:], index
            directory.rewind()
            assert directory.read() == whole
        finally:
            directory.close()

        # The read-ahead's order: each file of the folder linked to the next, across windows, the last to none.
        tree = filesystem.tree
        files = [name for name in listed_order(folder) if not (folder / name).is_dir()]
        parent = tree.known(os.stat(folder).st_ino)
        assert parent is not None
        nodes = [tree.child(parent, name) for name in files]
        linked = [node.next_file for node in nodes if isinstance(node, LazyNode)]
        assert linked == [node.inode for node in nodes[1:] if node is not None] + [-1]
    finally:
        unmount(built)


def listed_order(folder: Path) -> list[str]:
    return [entry.name for entry in os.scandir(folder)]


def test_an_open_folder_holds_a_window_of_its_nodes(
    local_store: Store, tmp_path: Path, mountpoint: Path, served_here: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a folder of 50,000 files is read, the nodes in the serving side's memory are those the kernel holds
    (handed to it with the names already read), the few the tree keeps beside them, and one window: not the
    folder's."""
    window, behind, kept = 64, 8, 256
    monkeypatch.setattr(open_folder, "LISTING_WINDOW", window)
    monkeypatch.setattr(open_folder, "KEPT_BEHIND", behind)
    files = 50_000
    manifest = write_version(local_store, tmp_path / "src", [f"flat/{n:06d}.jpg" for n in range(files)])
    assert catalog.resolve(local_store, "d").indexed
    filesystem = served_here(local_store, manifest, kept=kept)
    tree = filesystem.tree
    most, read = 0, 0
    with os.scandir(mountpoint / "flat") as entries:
        for _ in entries:
            read += 1
            if read % 2_500 == 1:
                alive = sum(isinstance(thing, LazyNode) for thing in gc.get_objects())
                most = max(most, alive - tree.nodes)
    assert read == files
    assert most <= window + behind, most  # nodes held for the open folder alone: a window


class _Statx(ctypes.Structure):
    _fields_ = [  # the start of Linux's struct statx (256 bytes in all)
        ("stx_mask", ctypes.c_uint32),
        ("stx_blksize", ctypes.c_uint32),
        ("stx_attributes", ctypes.c_uint64),
        ("stx_nlink", ctypes.c_uint32),
        ("stx_uid", ctypes.c_uint32),
        ("stx_gid", ctypes.c_uint32),
        ("stx_mode", ctypes.c_uint16),
        ("spare", ctypes.c_uint16),
        ("stx_ino", ctypes.c_uint64),
        ("stx_size", ctypes.c_uint64),
        ("rest", ctypes.c_uint8 * 216),
    ]


def asked_stat(path: Path) -> tuple[int, int, int]:
    """``path``'s inode number, size and mode, asked of the serving side (``statx`` with ``AT_STATX_FORCE_SYNC``:
    not the attributes the kernel keeps)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    found = _Statx()
    at_fdcwd, force_sync, basic_stats = -100, 0x2000, 0x7FF
    if libc.statx(at_fdcwd, os.fsencode(path), force_sync, basic_stats, ctypes.byref(found)) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), str(path))
    return found.stx_ino, found.stx_size, found.stx_mode


def test_the_files_the_kernel_holds_are_made_again_not_held(
    local_store: Store, tmp_path: Path, mountpoint: Path, served_here: Serve
) -> None:
    """Listed, walked, stat-ed and read, 1,500 files the kernel holds leave the serving side with the folders the
    kernel holds and ``kept`` nodes; each file dropped and made again has its inode number, attributes and bytes
    (a file opened before its node was dropped is read after), and a walk finds each file once."""
    kept = 64
    paths = [f"flat/{n:05d}.jpg" for n in range(1_500)] + ["flat/sub/a.jpg", "deep/er/b.jpg", "top.jpg"]
    manifest = write_version(local_store, tmp_path / "src", paths)
    listed_name = list_name(manifest)
    filesystem = served_here(local_store, manifest, kept=kept)
    tree = filesystem.tree
    assert isinstance(tree, LazyTree)
    most = kept + 5  # the nodes kept, the root and the folders "flat", "flat/sub", "deep", "deep/er"

    early = open(mountpoint / paths[0], "rb")  # noqa: SIM115  (read once its node was dropped)
    numbers = {f"flat/{entry.name}": entry.inode() for entry in os.scandir(mountpoint / "flat")}
    assert len(numbers) == 1_501 and tree.nodes <= most, tree.nodes
    assert tree.known(numbers[paths[0]]) is None
    walked = [
        (Path(folder) / name).relative_to(mountpoint).as_posix()
        for folder, _, names in os.walk(mountpoint)
        for name in names
    ]
    assert sorted(walked) == sorted([*paths, listed_name])
    for number, path in enumerate(paths):
        asked = asked_stat(mountpoint / path)
        assert asked == (os.stat(mountpoint / path).st_ino, len(f"{number}"), stat.S_IFREG | 0o444), path
        if path in numbers:
            assert asked[0] == numbers[path], path
        assert (mountpoint / path).read_bytes() == f"{number}".encode(), path
    assert asked_stat(mountpoint / listed_name)[1] == len((mountpoint / listed_name).read_bytes())
    assert early.read() == b"0"
    early.close()
    assert tree.nodes <= most, tree.nodes
