"""``datamount mount``: a version as a read-only folder through real FUSE, on a local store and on moto's S3, packed
and unpacked; damaged bytes are an I/O error for that file only; writes are refused; a mount whose process was
killed is found and cleared by the documented step."""

from __future__ import annotations

import bisect
import errno
import io
import itertools
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from datamount.datasets import catalog, layout, pack, upload
from datamount.datasets.file_parts import FileParts
from datamount.datasets.manifest import FileEntry, Kind, Manifest
from datamount.datasets.tree import Tree
from datamount.mount import FSTYPE, mount, unmount
from datamount.readers.stream import import_stream, write_to
from datamount.storage import MountError, Store, UnsafePathError
from datamount.storage.mounts import read_mounts
from tests.generated import tree_of, write_image_list

pytestmark = pytest.mark.timeout(300)
#: The tests that drop the kernel's caches, one at a time (on one worker): a drop of its inodes (``2``) while another
#: test counts reads of files whose pages it dropped (``1``) makes the kernel forget that test's files, which are
#: then put into the page cache again rather than read.
DROPS_CACHES = pytest.mark.xdist_group("drop_caches")


def class_folders(root: Path, count: int, classes: int = 3) -> Path:
    """An ImageFolder-style source: ``cls<k>/img<i>.jpg`` files of random bytes and the list naming them."""
    rows = []
    for i in range(count):
        path = root / f"cls{i % classes}" / f"img{i:04d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\xff\xd8\xff" + os.urandom(200 + 37 * i))
        rows.append(f"{path.relative_to(root).as_posix()}\tcls{i % classes}\n")
    list_file = root / "train.list"
    list_file.write_text("".join(rows), encoding="utf-8")
    return list_file


@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
@pytest.mark.parametrize("packed", [False, True], ids=["objects", "packed"])
def test_a_walk_of_the_mount_gives_the_uploaded_files_byte_for_byte(
    store: Store, tmp_path: Path, mountpoint: Path, packed: bool
) -> None:
    list_file = class_folders(tmp_path / "src", 60)
    manifest = upload(list_file, "pets", store=store, packed=packed).manifest
    mounted = mount("pets", mountpoint, store=store, cache=tmp_path / "cache")
    assert mounted.ref == "pets@1" and mounted.pid != os.getpid()

    expected = tree_of(tmp_path / "src")
    assert tree_of(mountpoint) == expected  # the files and the list, nothing else
    assert (mountpoint / "train.list").read_bytes() == store.read(layout.list_path(manifest))
    # stat comes from the manifest: sizes, read-only modes, one mtime
    info = (mountpoint / "cls1" / "img0001.jpg").stat()
    assert info.st_size == len(expected["cls1/img0001.jpg"]) and info.st_mode & 0o777 == 0o444
    # ImageFolder's walk: each class a folder, every file found with its class
    classes = sorted(entry.name for entry in os.scandir(mountpoint) if entry.is_dir())
    assert classes == ["cls0", "cls1", "cls2"]
    found = {(cls, name) for cls in classes for name in os.listdir(mountpoint / cls)}
    assert found == {(f"cls{i % 3}", f"img{i:04d}.jpg") for i in range(60)}
    # reads at any offset, as tools do them
    with open(mountpoint / "cls2" / "img0050.jpg", "rb") as file:
        file.seek(100)
        assert file.read(50) == expected["cls2/img0050.jpg"][100:150]
    if store.local_path() is None:  # a remote store's objects (or shards), list and index were kept in the cache
        cached = [path for path in (tmp_path / "cache").rglob("*") if path.is_file() and path.parent.name != "locks"]
        assert isinstance(manifest.files, FileParts) and len(manifest.files.parts) == 1
        assert len(cached) == (len(manifest.shards) if packed else len(manifest.files)) + 1 + 1
        unmount(mountpoint)
        mount("pets", mountpoint, store=store, cache=tmp_path / "cache")  # served from the cache, checked again
        assert tree_of(mountpoint) == expected


@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
@pytest.mark.parametrize("packed", [False, True], ids=["objects", "packed"])
def test_files_a_walk_reads_next_reach_the_kernel_before_their_reads(
    store: Store, tmp_path: Path, mountpoint: Path, packed: bool
) -> None:
    """The files of each read-ahead window go into the kernel's page cache as they come: a walk (``os.walk`` and
    the files of each folder in turn, as ``find | xargs cat`` reads them) by a reader that does some work with each
    file takes no read request to the serving process for most files, and gets the same bytes."""
    list_file = class_folders(tmp_path / "src", 120)
    upload(list_file, "pets", store=store, packed=packed)
    log_file = tmp_path / "mount.log"
    mounted = mount("pets", mountpoint, store=store, cache=False, log_file=log_file)
    walked = 0
    for parent, _, names in os.walk(mountpoint):
        for name in names:
            path = Path(parent, name).relative_to(mountpoint)
            assert (mountpoint / path).read_bytes() == (tmp_path / "src" / path).read_bytes()
            walked += 1
            time.sleep(0.005)  # a training step's worth of work
    assert walked == 121  # the files and the list
    report = _push_report_after_unmount(mountpoint, mounted.pid, log_file)
    assert report.pushed >= walked // 2 and report.missed <= walked // 2, report


@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
@pytest.mark.parametrize("packed", [False, True], ids=["objects", "packed"])
def test_files_fetched_before_their_folder_is_listed_reach_the_kernel_when_it_is(
    store: Store, tmp_path: Path, mountpoint: Path, packed: bool
) -> None:
    """A list sorted by folder: the read-ahead window a walk starts reaches into folders it has not listed yet, whose
    files the kernel cannot take before it knows them. They go to the page cache when their folder is listed, so that
    the walk takes a read request for a few files only."""
    rows = []
    for i in range(240):
        path = tmp_path / "src" / f"cls{i // 40}" / f"img{i:04d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(1000 + 13 * i))
        rows.append(f"{path.relative_to(tmp_path / 'src').as_posix()}\tcls{i // 40}\n")
    (tmp_path / "src" / "train.list").write_text("".join(rows), encoding="utf-8")
    upload(tmp_path / "src" / "train.list", "pets", store=store, packed=packed)
    log_file = tmp_path / "mount.log"
    mounted = mount("pets", mountpoint, store=store, cache=False, log_file=log_file)
    walked = 0
    for parent, _, names in os.walk(mountpoint):
        for name in sorted(names):
            path = Path(parent, name).relative_to(mountpoint)
            assert (mountpoint / path).read_bytes() == (tmp_path / "src" / path).read_bytes()
            walked += 1
            if path.name == "img0001.jpg":  # the window this file started comes, all of it (~370 kB), meanwhile
                time.sleep(2)
    assert walked == 241
    report = _push_report_after_unmount(mountpoint, mounted.pid, log_file)
    assert report.missed <= 20 and report.pushed >= walked - 20, report


@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
def test_a_walk_of_a_packed_version_from_its_first_file_reads_ahead_of_it(
    store: Store, tmp_path: Path, mountpoint: Path
) -> None:
    """The first file a walk opens comes alone, with its row group (which holds the next 399 files): the second,
    in that row group already, starts the walk's read-ahead all the same, so that the rest reach the page cache
    before they are read."""
    rows = []
    for i in range(400):
        path = tmp_path / "src" / "cls0" / f"img{i:04d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(500 + i))
        rows.append(f"{path.relative_to(tmp_path / 'src').as_posix()}\tcls0\n")
    (tmp_path / "src" / "train.list").write_text("".join(rows), encoding="utf-8")
    manifest = upload(tmp_path / "src" / "train.list", "pets", store=store, packed=True).manifest
    assert manifest.shards[0].row_groups == [400]  # one row group holds them all (~280 kB)
    log_file = tmp_path / "mount.log"
    mounted = mount("pets", mountpoint, store=store, cache=False, log_file=log_file)
    for name in sorted(os.listdir(mountpoint / "cls0")):
        assert (mountpoint / "cls0" / name).read_bytes() == (tmp_path / "src" / "cls0" / name).read_bytes()
    report = _push_report_after_unmount(mountpoint, mounted.pid, log_file)
    assert report.missed <= 4 and report.pushed >= 396, report


@DROPS_CACHES
@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
@pytest.mark.parametrize("packed", [False, True], ids=["objects", "packed"])
def test_files_the_kernel_dropped_are_pushed_again(
    store: Store, tmp_path: Path, mountpoint: Path, packed: bool
) -> None:
    """The kernel drops a mount's inodes, and their pages, when it needs the memory (here: ``drop_caches``): a walk
    after that gets the same bytes, and the files fetched ahead go to the page cache again rather than each being
    read by requests."""
    if not os.access("/proc/sys/vm/drop_caches", os.W_OK):
        pytest.skip("dropping the kernel's caches needs root")
    list_file = class_folders(tmp_path / "src", 300)
    upload(list_file, "pets", store=store, packed=packed)
    log_file = tmp_path / "mount.log"
    mounted = mount("pets", mountpoint, store=store, cache=False, log_file=log_file)
    expected = tree_of(tmp_path / "src")
    assert tree_of(mountpoint) == expected
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("2")  # dentries and inodes: the kernel forgets the mount's files
    assert tree_of(mountpoint) == expected
    report = _push_report_after_unmount(mountpoint, mounted.pid, log_file)
    assert report.read <= 150 and report.pushed >= 450, report  # two walks of 301 files, pushed again after the drop


@DROPS_CACHES
def test_files_whose_pages_the_kernel_dropped_before_their_reads_are_counted_apart(
    local_store: Store, tmp_path: Path, mountpoint: Path
) -> None:
    """Pages put into the page cache ahead are the kernel's to drop when it needs the memory (here:
    ``drop_caches``); the files then come by requests, the same bytes, and the log tells those reads apart from
    reads of files that were never put there. (A local store: the window must have come before the drop, which a
    loaded moto does not promise in 2 s; what is counted does not depend on the store.)"""
    store = local_store
    if not os.access("/proc/sys/vm/drop_caches", os.W_OK):
        pytest.skip("dropping the kernel's caches needs root")
    rows = []
    for i in range(60):
        path = tmp_path / "src" / "cls0" / f"img{i:04d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(1000 + 13 * i))
        rows.append(f"cls0/{path.name}\tcls0\n")
    (tmp_path / "src" / "train.list").write_text("".join(rows), encoding="utf-8")
    upload(tmp_path / "src" / "train.list", "pets", store=store)
    log_file = tmp_path / "mount.log"
    mounted = mount("pets", mountpoint, store=store, cache=False, log_file=log_file)
    names = sorted(os.listdir(mountpoint / "cls0"))
    for name in names[:2]:  # the second starts a window of the other 58, put into the page cache as they come
        assert (mountpoint / "cls0" / name).read_bytes() == (tmp_path / "src" / "cls0" / name).read_bytes()
    time.sleep(2)
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("1")  # the page cache: the 58 files' pages go
    for name in names[2:]:
        assert (mountpoint / "cls0" / name).read_bytes() == (tmp_path / "src" / "cls0" / name).read_bytes()
    report = _push_report_after_unmount(mountpoint, mounted.pid, log_file)
    assert report.pushed >= 50 and report.dropped >= 50 and report.missed <= 4, report  # 2: opened before the window


class PushReport(NamedTuple):
    """What the serving process logged when it unmounted: files put into the page cache ahead of their reads, files
    read by requests, and how many of those had been put into the page cache and dropped by the kernel since."""

    pushed: int
    read: int
    dropped: int

    @property
    def missed(self) -> int:
        """Files read by requests that had not been put into the page cache (what the kernel's need for memory,
        which other processes make, has no part in)."""
        return self.read - self.dropped


def _push_report_after_unmount(mountpoint: Path, pid: int, log_file: Path) -> PushReport:
    """Unmount, and what the serving process logged about putting files into the page cache."""
    unmount(mountpoint)
    _wait_gone(pid)
    report = re.search(
        r"(\d+) file\(s\) put into the page cache ahead of their reads; (\d+) read by requests \((\d+) of them put "
        r"into the page cache before, and dropped by the kernel\)",
        log_file.read_text(),
    )
    assert report is not None, log_file.read_text()
    return PushReport(*map(int, report.groups()))


@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
@pytest.mark.parametrize("packed_after", [False, True], ids=["objects", "objects-and-shards"])
def test_files_opened_at_random_are_fetched_alone(
    store: Store, tmp_path: Path, mountpoint: Path, packed_after: bool
) -> None:
    """A shuffled training pass opens files at random: each is fetched on its own (from its object, in a version
    packed after its upload too), never with a read-ahead window of files nobody asked for."""
    list_file = class_folders(tmp_path / "src", 300)
    upload(list_file, "pets", store=store)
    if packed_after:
        pack("pets", store=store, shard_bytes=200_000, row_group_bytes=40_000)
    log_file = tmp_path / "mount.log"
    mounted = mount("pets", mountpoint, store=store, cache=False, log_file=log_file)
    paths = [line.split("\t")[0] for line in list_file.read_text(encoding="utf-8").splitlines()]
    picked = random.Random(5).sample(paths, 20)
    for path in picked:
        assert (mountpoint / path).read_bytes() == (tmp_path / "src" / path).read_bytes()
    unmount(mountpoint)
    _wait_gone(mounted.pid)
    assert _fetched(log_file) == {"object": 20}


@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
@pytest.mark.parametrize(
    ("order", "memory", "by_group"),
    [("sorted", None, True), ("shuffled", None, True), ("interleaved", 150_000, False)],
    ids=["listed-by-folder", "listed-at-random", "listed-otherwise-larger-than-memory"],
)
def test_a_walk_of_a_version_packed_after_upload_fetches_row_groups(
    store: Store, tmp_path: Path, mountpoint: Path, order: str, memory: int | None, by_group: bool
) -> None:
    """A version with objects and shards on a remote store: a walk gets its files by row group (one request for many
    files) where its read-ahead window holds half of a group's bytes or the version's row groups all fit in the
    mount's memory, else by object; the same bytes as uploaded either way. (A local store: objects, no request.)"""
    list_file = class_folders(tmp_path / "src", 120, classes=6)  # listed cls0, cls1... cls5, cls0...
    lines = list_file.read_text(encoding="utf-8").splitlines(keepends=True)
    if order == "sorted":
        list_file.write_text("".join(sorted(lines)), encoding="utf-8")  # by folder: find and os.walk follow the list
    elif order == "shuffled":
        random.Random(3).shuffle(lines)
        list_file.write_text("".join(lines), encoding="utf-8")
    upload(list_file, "pets", store=store)
    manifest = pack("pets", store=store, shard_bytes=100_000, row_group_bytes=20_000)
    assert sum(entry.size for entry in manifest.files) > 150_000
    groups = sum(len(shard.row_groups) for shard in manifest.shards)
    log_file = tmp_path / "mount.log"
    sizes = {} if memory is None else {"memory": memory}
    mounted = mount("pets", mountpoint, store=store, cache=False, log_file=log_file, **sizes)
    assert tree_of(mountpoint) == tree_of(tmp_path / "src")
    unmount(mountpoint)
    _wait_gone(mounted.pid)
    fetched = _fetched(log_file)
    if store.local_path() is not None:
        assert "row group" not in fetched and 120 <= fetched["object"] <= 200, fetched  # a few fetched again at most
        return
    if not by_group:  # a walk taking a sixth of each group: its files, not whole groups (but where it follows the list)
        assert fetched.get("row group", 0) <= groups // 2 and fetched["object"] >= 60, fetched
        return
    assert 1 <= fetched.get("row group", 0) <= groups, fetched
    assert fetched.get("object", 0) <= 6, fetched  # the first file, read on its own


@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
def test_a_mount_with_little_memory_fetches_each_file_about_once(
    store: Store, tmp_path: Path, mountpoint: Path
) -> None:
    """Files fetched ahead stay in memory until they are read: the read-ahead is at most a quarter of the memory by
    default (it was 32 MB whatever the memory), files already served leave memory first, and a file already put into
    the kernel's page cache is not fetched again when it is opened. A walk of a version three times the memory
    fetches few files twice (1,048 fetches for these 120 files before, 2,727 with the 32 MB read-ahead)."""
    list_file = class_folders(tmp_path / "src", 120)
    upload(list_file, "pets", store=store)
    log_file = tmp_path / "mount.log"
    mounted = mount("pets", mountpoint, store=store, cache=False, log_file=log_file, memory=100_000)
    assert tree_of(mountpoint) == tree_of(tmp_path / "src")
    unmount(mountpoint)
    _wait_gone(mounted.pid)
    fetched = _fetched(log_file)
    assert 120 <= fetched["object"] <= 200, fetched  # 348 (moto) to 2,727 before, by timing


def test_a_read_ahead_larger_than_the_memory_is_refused(local_store: Store, tmp_path: Path, mountpoint: Path) -> None:
    upload(class_folders(tmp_path / "src", 6), "pets", store=local_store)
    with pytest.raises(ValueError, match="read-ahead of 2,000,000 bytes does not fit in the mount's memory"):
        mount("pets", mountpoint, store=local_store, memory=1_000_000, read_ahead=2_000_000)
    done = _cli("mount", "pets", str(mountpoint), "--store", local_store.url, "--memory", "1MB", "--read-ahead", "2MB")
    assert done.returncode == 2 and "does not fit in the mount's memory" in done.stderr, done.stderr
    assert not any(entry.target == str(mountpoint) for entry in read_mounts())


def _fetched(log_file: Path) -> dict[str, int]:
    """What the serving process logged it fetched as it unmounted: units by kind (``object``, ``row group``...)."""
    found = re.search(r"fetched ([^;]*);", log_file.read_text())
    assert found is not None, log_file.read_text()
    counts = re.findall(r"(\d+) ([a-z ]+?)(?:\(s\))?(?:,|$)", found.group(1))
    return {kind: int(number) for number, kind in counts}


@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
def test_several_walkers_at_once_read_the_same_bytes(store: Store, tmp_path: Path, mountpoint: Path) -> None:
    list_file = class_folders(tmp_path / "src", 90)
    upload(list_file, "pets", store=store)
    mount("pets", mountpoint, store=store, cache=False, memory=64 << 10, read_ahead=16 << 10)  # much evicted
    walkers = [
        subprocess.Popen(
            f"find {mountpoint}/cls{k} -type f | sort | xargs cat | sha256sum", shell=True, stdout=subprocess.PIPE
        )
        for k in range(3)
    ]
    for k, walker in enumerate(walkers):
        out, _ = walker.communicate(timeout=120)
        expected = subprocess.run(
            f"find {tmp_path}/src/cls{k} -type f | sort | xargs cat | sha256sum", shell=True, capture_output=True
        ).stdout
        assert out.split()[0] == expected.split()[0]


@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
@pytest.mark.parametrize("packed", [False, True], ids=["objects", "packed"])
def test_a_damaged_file_is_an_io_error_for_that_file_only(
    store: Store, tmp_path: Path, mountpoint: Path, packed: bool
) -> None:
    list_file = write_image_list(tmp_path / "src", 8, size=3000)
    manifest = upload(list_file, "pets", store=store, packed=packed).manifest
    victim = next(entry for entry in manifest.files if entry.path == "data/img0003.jpg")
    if packed:
        stored = layout.shard_path(manifest.name, manifest.shards[0])
        data = bytearray(store.read(stored))
        at = bytes(data).index((tmp_path / "src" / victim.path).read_bytes()[100:140]) + 10  # in that file's value
    else:
        stored = layout.object_path(manifest.name, victim.sha256)
        data, at = bytearray(store.read(stored)), 50
    data[at] ^= 0xFF
    store.write(stored, bytes(data))
    log_file = tmp_path / "mount.log"
    mount("pets", mountpoint, store=store, cache=False, log_file=log_file)

    if not packed:  # a packed version's damaged page spoils its row group: the others are intact
        for entry in manifest.files:
            if entry.path != victim.path:
                assert (mountpoint / entry.path).read_bytes() == (tmp_path / "src" / entry.path).read_bytes()
    with pytest.raises(OSError) as caught:
        (mountpoint / victim.path).read_bytes()
    assert caught.value.errno == errno.EIO
    assert "data/img0003.jpg" in log_file.read_text()


@pytest.mark.parametrize("packed", [False, True], ids=["objects", "packed"])
def test_a_part_the_store_lost_is_named_in_the_log_with_its_repair(
    local_store: Store, tmp_path: Path, mountpoint: Path, packed: bool
) -> None:
    """A file whose object (or shard) the store lost is an I/O error, and the log names the version, the row, the
    part and the command that puts it back, as a reader does."""
    list_file = write_image_list(tmp_path / "src", 8, size=3000)
    sizes = {"shard_bytes": 10_000, "row_group_bytes": 5_000} if packed else {}
    manifest = upload(list_file, "pets", store=local_store, packed=packed, **sizes).manifest
    victim = next(entry for entry in manifest.files if entry.path == "data/img0003.jpg")
    if packed:  # stored only in shards (upload --pack): its files are the rows of its shards
        starts = list(itertools.accumulate((shard.rows for shard in manifest.shards), initial=0))
        number = bisect.bisect_right(starts, 3) - 1
        lost = layout.shard_path("pets", manifest.shards[number])
        url = re.escape(local_store.url_for(lost))
        rows = f"rows {starts[number]} to {starts[number + 1] - 1}"
        named = rf"pets@1, {rows}: the shard {url} is missing from the store \(the store holds its rows nowhere"
    else:
        lost = layout.object_path("pets", victim.sha256)
        url = re.escape(local_store.url_for(lost))
        named = rf"pets@1, row 3: the object {url} is missing from the store \(datamount verify pets@1 --repair --from"
    log_file = tmp_path / "mount.log"
    mount("pets", mountpoint, store=local_store, cache=False, log_file=log_file)
    local_store.remove(lost)
    with pytest.raises(OSError) as caught:
        (mountpoint / victim.path).read_bytes()
    assert caught.value.errno == errno.EIO
    assert re.search(rf"data/img0003.jpg: {named}", log_file.read_text()), log_file.read_text()


def test_a_version_removed_while_mounted_is_named_in_the_log(
    local_store: Store, tmp_path: Path, mountpoint: Path
) -> None:
    """Files of a version removed (``datamount rm``) while it is mounted, not held yet, are I/O errors, and the log
    says the version was removed rather than that an object is missing."""
    list_file = class_folders(tmp_path / "src", 60)
    upload(list_file, "pets", store=local_store)
    log_file = tmp_path / "mount.log"
    mount("pets", mountpoint, store=local_store, cache=False, memory=8 << 10, read_ahead=4 << 10, log_file=log_file)
    assert (mountpoint / "cls0" / "img0000.jpg").read_bytes() == (
        tmp_path / "src" / "cls0" / "img0000.jpg"
    ).read_bytes()
    catalog.remove(local_store, "pets")
    with pytest.raises(OSError) as caught:
        (mountpoint / "cls2" / "img0059.jpg").read_bytes()
    assert caught.value.errno == errno.EIO
    assert "cls2/img0059.jpg: pets@1 was removed from file://" in log_file.read_text()


def test_writes_are_refused_as_a_read_only_filesystem(local_store: Store, tmp_path: Path, mountpoint: Path) -> None:
    upload(write_image_list(tmp_path / "src", 3), "pets", store=local_store)
    mount("pets", mountpoint, store=local_store)
    attempts = [
        lambda: (mountpoint / "new.txt").write_bytes(b"x"),
        lambda: os.close(os.open(mountpoint / "data" / "img0000.jpg", os.O_RDWR)),
        lambda: (mountpoint / "data" / "img0000.jpg").unlink(),
        lambda: (mountpoint / "made").mkdir(),
        lambda: (mountpoint / "train.list").rename(mountpoint / "other.list"),
    ]
    for attempt in attempts:
        with pytest.raises(OSError) as caught:
            attempt()
        assert caught.value.errno == errno.EROFS
    assert sorted(os.listdir(mountpoint)) == ["data", "train.list"]


def test_text_and_table_versions_show_their_list_and_shards(
    local_store: Store, tmp_path: Path, mountpoint: Path
) -> None:
    pairs = tmp_path / "pairs.list"
    pairs.write_text("".join(f"source {i}\ttarget {i}\n" for i in range(20)), encoding="utf-8")
    upload(pairs, "pairs", store=local_store, packed=True)
    manifest = catalog.resolve(local_store, "pairs")
    mount("pairs", mountpoint, store=local_store)
    assert (mountpoint / "pairs.list").read_bytes() == pairs.read_bytes()
    shards = sorted(os.listdir(mountpoint / "shards"))
    assert len(shards) == len(manifest.shards)
    for shard in manifest.shards:
        name = shard.path.rsplit("/", 1)[-1]
        assert (mountpoint / "shards" / name).read_bytes() == local_store.read(layout.shard_path("pairs", shard))
    unmount(mountpoint)

    buffer = io.BytesIO()
    with write_to(buffer) as out:
        out.set_columns("x", "name")
        out.write_many([(i, f"n{i}") for i in range(50)])
    import_stream(io.BytesIO(buffer.getvalue()), "table", store=local_store)
    manifest = catalog.resolve(local_store, "table")
    mount("table", mountpoint, store=local_store)
    assert sorted(os.listdir(mountpoint)) == sorted(shard.path.rsplit("/", 1)[-1] for shard in manifest.shards)


@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
def test_a_long_list_is_served_by_ranges_of_its_checked_blocks(store: Store, tmp_path: Path, mountpoint: Path) -> None:
    """A text version's list longer than 4 MiB is read a run of its blocks at a time, never held whole: read in
    order, at any offset, and a damaged block is EIO for the reads that touch it while the others read on."""
    text = "".join(f"source sentence {i} {'w' * (i % 11)}\ttarget {i}\n" for i in range(130_000)).encode()
    (tmp_path / "pairs.list").write_bytes(text)
    manifest = upload(tmp_path / "pairs.list", "pairs", store=store, kind="text").manifest
    blocks = manifest.list_blocks
    assert blocks is not None and manifest.list_size > 4 << 20
    log_file = tmp_path / "mount.log"
    mounted = mount("pairs", mountpoint, store=store, cache=False, log_file=log_file)
    listed = mountpoint / "pairs.list"
    assert listed.stat().st_size == len(text) and listed.read_bytes() == text
    with open(listed, "rb", buffering=0) as file:
        for offset in (3_000_000, 17, len(text) - 5):
            file.seek(offset)
            assert file.read(100) == text[offset : offset + 100]
    unmount(mountpoint)
    _wait_gone(mounted.pid)
    summary = next(line for line in log_file.read_text().splitlines() if "read by requests" in line)
    assert "run(s) of the list's blocks" in summary and "1 list" not in summary, summary  # never fetched whole

    start, _ = blocks.byte_range(70, len(text))
    damaged = bytearray(text)
    damaged[start + 3] ^= 0x01
    store.write(layout.list_path(manifest), bytes(damaged))
    mount("pairs", mountpoint, store=store, cache=False, log_file=log_file)
    with open(listed, "rb", buffering=0) as file:
        file.seek(start - 5000)
        got = b""
        with pytest.raises(OSError) as caught:  # a read may stop short before the damaged block; the next raises
            while len(got) < 10_000:
                got += file.read(10_000 - len(got))
        assert caught.value.errno == errno.EIO and len(got) <= 5000 and got == text[start - 5000 :][: len(got)]
        file.seek(0)
        assert file.read(1000) == text[:1000]  # blocks before it
    assert "rows 71680 to 72703" in log_file.read_text()


def test_a_mount_point_in_use_or_not_empty_is_refused(local_store: Store, tmp_path: Path, mountpoint: Path) -> None:
    upload(write_image_list(tmp_path / "src", 3), "pets", store=local_store)
    (mountpoint / "mine.txt").write_text("keep")
    with pytest.raises(MountError, match="is not empty"):
        mount("pets", mountpoint, store=local_store)
    (mountpoint / "mine.txt").unlink()
    with pytest.raises(MountError, match="does not exist"):
        mount("pets", tmp_path / "nowhere", store=local_store)
    mount("pets", mountpoint, store=local_store)
    with pytest.raises(MountError, match="mounted already"):
        mount("pets", mountpoint, store=local_store)
    with pytest.raises(MountError, match="is not mounted"):
        unmount(tmp_path)


def test_a_mount_killed_with_sigkill_is_found_and_cleared_by_unmount(
    local_store: Store, tmp_path: Path, mountpoint: Path
) -> None:
    list_file = write_image_list(tmp_path / "src", 4)
    upload(list_file, "pets", store=local_store)
    mounted = mount("pets", mountpoint, store=local_store)
    os.kill(mounted.pid, signal.SIGKILL)
    _wait_gone(mounted.pid)
    with pytest.raises(MountError, match=r"serving process is gone .*datamount unmount"):
        mount("pets", mountpoint, store=local_store)
    result = _cli("unmount", str(mountpoint))
    assert result.returncode == 0, result.stderr
    again = _cli("mount", "pets", str(mountpoint), "--store", local_store.url)
    assert again.returncode == 0, again.stderr
    assert (mountpoint / "data" / "img0002.jpg").read_bytes() == (
        tmp_path / "src" / "data" / "img0002.jpg"
    ).read_bytes()


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_sigterm_and_sigint_unmount_and_exit(local_store: Store, tmp_path: Path, mountpoint: Path, how: int) -> None:
    upload(write_image_list(tmp_path / "src", 3), "pets", store=local_store)
    mounted = mount("pets", mountpoint, store=local_store)
    assert [entry.fstype for entry in read_mounts() if entry.target == str(mountpoint)] == [FSTYPE]
    os.kill(mounted.pid, how)
    _wait_gone(mounted.pid)
    assert not any(entry.target == str(mountpoint) for entry in read_mounts())
    assert os.listdir(mountpoint) == []


def test_foreground_serves_until_unmounted(local_store: Store, tmp_path: Path, mountpoint: Path) -> None:
    upload(write_image_list(tmp_path / "src", 3), "pets", store=local_store)
    server = subprocess.Popen(
        [sys.executable, "-m", "datamount.cli.main", "mount", "pets", str(mountpoint), "--foreground"],
        env={**os.environ, "DATAMOUNT_STORE": local_store.url},
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not (mountpoint / "train.list").exists():
        assert server.poll() is None and time.monotonic() < deadline, server.stderr
        time.sleep(0.1)
    assert _cli("unmount", str(mountpoint)).returncode == 0
    assert server.wait(30) == 0


def test_the_command_line_says_what_is_wrong_in_one_line(local_store: Store, tmp_path: Path, mountpoint: Path) -> None:
    result = _cli("mount", "missing", str(mountpoint), "--store", local_store.url)
    assert result.returncode == 3 and result.stderr.count("\n") == 1
    assert "no dataset named 'missing'" in result.stderr
    result = _cli("mount", "x", str(mountpoint), "--cache", str(tmp_path), "--no-cache")
    assert result.returncode == 2 and "exclude each other" in result.stderr


def test_a_list_path_that_would_leave_the_mount_is_refused() -> None:
    for path in ("../escape.jpg", "/etc/passwd", "a//b.jpg", "a/./b.jpg", "a/../../b.jpg"):
        manifest = Manifest(
            name="bad", kind=Kind.IMAGE, columns=["image", "label"], rows=1, files=[FileEntry(path, 1, "0" * 64)]
        )
        with pytest.raises(UnsafePathError, match="would leave it"):
            Tree(manifest, [(path, "0")])


def _cli(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "datamount.cli.main", *arguments], capture_output=True, text=True, timeout=120
    )


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still runs")


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1)")
def test_a_machine_without_fuse_gets_one_line_naming_what_is_missing(tmp_path: Path) -> None:
    # A private mount namespace whose /dev is an empty tmpfs: this machine's own /dev is untouched.
    (tmp_path / "mnt").mkdir()
    command = f"mount -t tmpfs none /dev && exec {sys.executable} -m datamount.cli.main mount pets {tmp_path / 'mnt'}"
    result = subprocess.run(["unshare", "-m", "sh", "-c", command], capture_output=True, text=True, timeout=120)
    assert result.returncode == 6
    assert result.stderr.strip().splitlines() == [
        "datamount: error: FUSE is not available: /dev/fuse is missing (in a container, give it the device /dev/fuse "
        "and the SYS_ADMIN capability; on a machine, install FUSE 3: apt-get install fuse3 (Debian, Ubuntu), dnf "
        "install fuse3 (Fedora))"
    ]


@pytest.mark.skipif(not os.access("/dev/fuse", os.R_OK | os.W_OK), reason="needs /dev/fuse, to get as far as pyfuse3")
def test_a_machine_without_pyfuse3_gets_one_line_naming_the_extra(tmp_path: Path) -> None:
    # As where the mount extra is not installed: a None in sys.modules makes every import of pyfuse3 fail.
    (tmp_path / "mnt").mkdir()
    code = "import sys; sys.modules['pyfuse3'] = None; from datamount.cli.main import main; main()"
    result = subprocess.run(
        [sys.executable, "-c", code, "mount", "pets", str(tmp_path / "mnt")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 6, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("datamount: error: FUSE is not available: ") and "pyfuse3" in line, line
    assert line.endswith("pip install 'datamount[mount]')"), line
