"""An indexed image version (format 7) mounted from its indexes (mount/lazy_tree.py): the same paths, listings,
attributes and bytes as the tree built from its whole list (a format-6 copy of the version, mounted as before); the
first stat and a folder's listing read no list and only the parts of the index they need; the serving process keeps
the folders the kernel holds and a bounded few more nodes."""

from __future__ import annotations

import dataclasses
import errno
import os
import random
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from datamount.datasets import catalog, file_parts_writer, layout, locks, pack, upload
from datamount.datasets.file_parts import FileParts
from datamount.datasets.file_parts_writer import write_file_parts
from datamount.datasets.manifest import Manifest
from datamount.datasets.tree import ROOT_INODE, Node
from datamount.mount import mount, unmount
from datamount.mount.lazy_tree import LazyTree
from datamount.storage import Store
from datamount.storage.mounts import read_mounts

pytestmark = pytest.mark.timeout(300)

#: Folders and files whose names sort either side of "/" ("-" and "." before it, "0" after it), a file named as a
#: folder with an extension beside it, and folders inside folders.
FOLDERS = ["a", "a-b", "a0", "b", "b/c", "b/c/d", ""]
NAMES = ["x.jpg", "a.jpg", "a-b.jpg", "0.png", "z z.jpg"]


def source(root: Path, seed: int = 1) -> Path:
    """Files in :data:`FOLDERS`, listed out of path order, some of them several times."""
    rng = random.Random(seed)
    paths = [f"{folder}/{name}" if folder else name for folder in FOLDERS for name in NAMES]
    for number, path in enumerate(paths):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(os.urandom(300 + 17 * number))
    rows = paths + [rng.choice(paths) for _ in range(12)]
    rng.shuffle(rows)
    list_file = root / "train.list"
    list_file.write_text("".join(f"{path}\t{n % 4}\n" for n, path in enumerate(rows)), encoding="utf-8")
    return list_file


@pytest.fixture
def other_mountpoint(tmp_path: Path, fuse: None) -> Iterator[Path]:
    """A second empty folder, unmounted at the end whatever the test did."""
    folder = tmp_path / "other"
    folder.mkdir()
    yield folder
    if any(entry.target == str(folder) for entry in read_mounts()):
        unmount(folder)


def format_6_copy(store: Store, manifest: Manifest) -> str:
    """The same version committed again as format 6 (entries without their rows, no row index), as version 2:
    mounted by building its tree from its whole list."""
    name = manifest.name
    parts = write_file_parts(store, name, list(manifest.files))
    files = FileParts(store, layout.dataset_folder(name), parts, f"{name}@2")
    old = dataclasses.replace(manifest, files=files, row_parts=None, format_version=6, version=2)
    store.write(layout.manifest_path(name, 2), old.to_json())
    read = catalog.resolve(store, f"{name}@2")
    assert read.format_version == 6 and not read.indexed
    return f"{name}@2"


def snapshot(root: Path) -> dict[str, tuple[object, ...]]:
    """Every path under ``root``: a folder's sorted names and mode, a file's bytes, size, mode and times."""
    found: dict[str, tuple[object, ...]] = {}
    for parent, folders, files in os.walk(root):
        here = Path(parent)
        info = here.stat()
        found[here.relative_to(root).as_posix()] = (sorted(folders + files), info.st_mode, info.st_mtime_ns)
        for name in files:
            path = here / name
            info = path.stat()
            found[path.relative_to(root).as_posix()] = (path.read_bytes(), info.st_size, info.st_mode, info.st_mtime_ns)
    return found


def first_rows(list_file: Path) -> dict[str, int]:
    rows: dict[str, int] = {}
    for row, line in enumerate(list_file.read_text(encoding="utf-8").splitlines()):
        rows.setdefault(line.split("\t")[0], row)
    return rows


@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
@pytest.mark.parametrize("form", ["objects", "packed", "objects-and-shards"])
def test_an_indexed_version_mounts_as_the_tree_built_from_its_whole_list(
    store: Store, tmp_path: Path, mountpoint: Path, other_mountpoint: Path, form: str
) -> None:
    list_file = source(tmp_path / "src")
    manifest = upload(
        list_file, "d", store=store, packed=form == "packed", shard_bytes=6_000, row_group_bytes=2_000
    ).manifest
    if form == "objects-and-shards":
        manifest = pack("d", store=store, shard_bytes=6_000, row_group_bytes=2_000)
    assert manifest.indexed and bool(manifest.shards) == (form != "objects")
    old = format_6_copy(store, manifest)
    mount("d@1", mountpoint, store=store, cache=False)
    mount(old, other_mountpoint, store=store, cache=False)
    shown = snapshot(mountpoint)
    assert shown == snapshot(other_mountpoint)
    assert {path for path, value in shown.items() if len(value) == 4} == {*first_rows(list_file), "train.list"}
    # Made from the indexes: each file numbered by its first row (the built tree numbers nodes as it adds them).
    numbers = {path: (mountpoint / path).stat().st_ino for path in first_rows(list_file)}
    assert numbers == {path: ROOT_INODE + 1 + row for path, row in first_rows(list_file).items()}
    assert numbers != {path: (other_mountpoint / path).stat().st_ino for path in numbers}


@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
@pytest.mark.parametrize("packed", [False, True], ids=["objects", "packed"])
def test_the_first_stat_and_a_listing_read_no_list_and_only_their_parts(
    store: Store, tmp_path: Path, mountpoint: Path, packed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every part of the index but those that hold one folder is removed, and the list with them: the mount still
    answers a stat of its root and of a file in that folder, lists the folder and reads the file."""
    monkeypatch.setattr(file_parts_writer, "ROWS_PER_PART", 16)
    src = tmp_path / "src"
    rows = []
    for c in range(12):
        for f in range(40):
            path = src / f"c{c:02d}" / f"f{f:03d}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(os.urandom(100 + f))
            rows.append(f"c{c:02d}/f{f:03d}.jpg\t{c}\n")
    (src / "train.list").write_text("".join(rows), encoding="utf-8")
    manifest = upload(src / "train.list", "d", store=store, packed=packed).manifest
    assert isinstance(manifest.files, FileParts) and manifest.row_parts is not None
    parts = manifest.files.parts
    kept = [part for part in parts if part.first.startswith("c05/")]
    kept.insert(0, parts[parts.index(kept[0]) - 1])  # the part that "c05" and "c05/" sort into
    folder = layout.dataset_folder("d")
    for part in [*parts, *manifest.row_parts.parts]:
        if part not in kept:
            store.remove(f"{folder}/{part.path}")
    store.remove(layout.list_path(manifest))

    mount("d", mountpoint, store=store, cache=False)
    assert stat.S_ISDIR(os.stat(mountpoint).st_mode)
    assert (mountpoint / "c05" / "f007.jpg").stat().st_size == 107
    assert sorted(os.listdir(mountpoint / "c05")) == [f"f{f:03d}.jpg" for f in range(40)]
    assert (mountpoint / "c05" / "f007.jpg").read_bytes() == (src / "c05" / "f007.jpg").read_bytes()
    with pytest.raises(OSError) as caught:  # a folder whose part is gone: EIO, the rest of the mount answers on
        os.listdir(mountpoint / "c09")
    assert caught.value.errno == errno.EIO
    assert (mountpoint / "c05" / "f008.jpg").read_bytes() == (src / "c05" / "f008.jpg").read_bytes()


def test_a_packed_file_whose_bytes_are_not_its_entrys_is_an_io_error_for_it_alone(
    local_store: Store, tmp_path: Path, mountpoint: Path
) -> None:
    """A packed version has no row index: each file of a row group is checked against its own entry as it is
    served. Here the shards hold other bytes than one entry says: that file is EIO, its group's others are read."""
    list_file = source(tmp_path / "src")
    manifest = upload(list_file, "d", store=local_store, packed=True).manifest
    assert manifest.row_parts is not None and not len(manifest.row_parts)
    victim = "a0/x.jpg"
    entries = [
        entry._replace(sha256="0" * 64, xxh3="0" * 16) if entry.path == victim else entry for entry in manifest.files
    ]
    with locks.writing(local_store, "d"):
        changed = catalog.commit(local_store, dataclasses.replace(manifest, version=0, files=entries, row_parts=None))
    assert changed.indexed and changed.shards == manifest.shards
    log_file = tmp_path / "mount.log"
    mount(changed.ref, mountpoint, store=local_store, cache=False, log_file=log_file)
    for path in first_rows(list_file):
        if path != victim:
            assert (mountpoint / path).read_bytes() == (tmp_path / "src" / path).read_bytes()
    with pytest.raises(OSError) as caught:
        (mountpoint / victim).read_bytes()
    assert caught.value.errno == errno.EIO
    row = first_rows(list_file)[victim]
    assert re.search(rf"{victim}: d@2, row {row}: the bytes in its shard do not match", log_file.read_text())


@pytest.mark.parametrize("packed", [False, True], ids=["objects", "packed"])
def test_the_next_file_in_the_list_is_found_where_that_is_cheap(
    local_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, packed: bool
) -> None:
    """With a row index, the file of the row after a file's is its list line's path and the row's file, whatever
    the list's order. Without one (packed), it is found in the entries only where it is in the part of the file's
    path or the next: a list in path order is stepped through to its end, one in another order stops."""
    monkeypatch.setattr(file_parts_writer, "ROWS_PER_PART", 4)
    list_file = source(tmp_path / "src")
    rows = list_file.read_text(encoding="utf-8").splitlines(keepends=True)
    in_order = tmp_path / "src" / "in-order.list"
    in_order.write_text("".join(sorted(rows)), encoding="utf-8")
    for listed, name in ((list_file, "shuffled"), (in_order, "sorted")):
        manifest = upload(listed, name, store=local_store, packed=packed).manifest
        tree = LazyTree(manifest, local_store)
        paths = [line.split("\t")[0] for line in listed.read_text(encoding="utf-8").splitlines()]
        stops = 0
        for row in range(len(paths) - 1):
            node = tree.child(tree.root, paths[row])
            assert node is not None and node.content is not None
            following = tree.next_in_list(_at_row(node, row))
            if following is None:
                stops += 1
                continue
            assert following.path == "/" + paths[row + 1] and following.content is not None
            entry = following.content.entry
            assert entry is not None and entry.size == (tmp_path / "src" / paths[row + 1]).stat().st_size
            if not packed:
                assert following.inode == ROOT_INODE + 2 + row and following.content.row == row + 1
        assert stops == 0 if not packed or name == "sorted" else stops > 0, (name, stops)


def _at_row(node: Node, row: int) -> Node:
    """``node`` as reached by list row ``row`` (a window's step from a file the list named before)."""
    assert node.content is not None
    return dataclasses.replace(node, content=node.content._replace(row=row))


def test_the_tree_keeps_the_folders_the_kernel_holds_and_a_few_more(local_store: Store, tmp_path: Path) -> None:
    """Nodes made for a listing and a walk of the list are dropped once more than ``kept`` others were used, but
    for the folders the kernel holds: a file it holds is made again from its number, with the number, content,
    folder and next file it had; a folder held keeps its own number."""
    list_file = source(tmp_path / "src")
    manifest = upload(list_file, "d", store=local_store).manifest
    tree = LazyTree(manifest, local_store, kept=4)
    folder = tree.child(tree.root, "b")
    assert folder is not None and folder.content is None
    tree.looked_up(folder)
    listed = list(tree.listing(folder))
    assert [node.name for node in listed] == sorted(["c", *NAMES])
    for node in listed:  # the kernel holds every name it listed (readdirplus)
        tree.looked_up(node)
    first, second = listed[0], listed[1]
    assert first.content is not None and second.content is not None
    numbers = {node.name: node.inode for node in listed}
    for path in first_rows(list_file):  # each file, then the file of the row after its first
        node = tree.child(tree.root, path)
        assert node is not None and node.inode == ROOT_INODE + 1 + first_rows(list_file)[path]
        tree.next_in_list(node)
    assert tree.nodes <= 3 + 4  # the root, the two folders held ("b", "b/c"), and 4 kept
    assert tree.known(folder.inode) is folder and tree.known(first.inode) is None
    made = tree.node(first.inode)  # made again from its first row
    assert made is not None and made is not first
    assert (made.inode, made.path, made.content, made.parent) == (first.inode, first.path, first.content, folder)
    assert tree.follows(made, second) == "folder"  # a walk of the folder from it is still seen to
    again = list(tree.listing(folder))
    assert {node.name: node.inode for node in again if node.content is not None} == {
        name: number for name, number in numbers.items() if name != "c"
    }
    for node in listed:
        tree.forget(node.inode, 1)
    tree.forget(folder.inode, 1)
    for name in NAMES:
        tree.child(tree.root, name)
    assert tree.known(folder.inode) is None and tree.node(first.inode) is not None
    assert tree.node(first.inode).inode == first.inode  # type: ignore[union-attr]


def test_a_file_made_again_at_random_finds_its_entry_in_a_part_kept_decoded(
    local_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shuffled pass after a scan makes files' nodes again in any order: the parts of the entries they were made
    from stay decoded (up to ``ENTRY_PARTS_KEPT``), so none is read twice: here they are removed from the store after
    a first pass, and a second pass in another order is made from them alone."""
    monkeypatch.setattr(file_parts_writer, "ROWS_PER_PART", 8)
    (tmp_path / "src" / "flat").mkdir(parents=True)
    for i in range(100):
        (tmp_path / "src" / "flat" / f"{i:03d}.jpg").write_bytes(b"%d" % i * (1 + i % 9))
    rows = [f"flat/{i:03d}.jpg\t{i % 3}\n" for i in random.Random(2).sample(range(100), 100)]
    (tmp_path / "src" / "train.list").write_text("".join(rows), encoding="utf-8")
    manifest = upload(tmp_path / "src" / "train.list", "d", store=local_store).manifest
    assert isinstance(manifest.files, FileParts) and len(manifest.files.parts) == 13
    tree = LazyTree(manifest, local_store, kept=4)
    numbers = [ROOT_INODE + 1 + row for row in range(100)]
    first = {number: tree.node(number) for number in random.Random(3).sample(numbers, 100)}
    for part in manifest.files.parts:
        local_store.remove(f"{layout.dataset_folder('d')}/{part.path}")
    for number in random.Random(4).sample(numbers, 100):
        made, before = tree.node(number), first[number]
        assert made is not None and before is not None
        assert (made.inode, made.path, made.content) == (before.inode, before.path, before.content)
