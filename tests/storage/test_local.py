"""Local stores: links that lead out of the root, and stores that must live on a mount."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datamount.storage import MountError, Store, StoreConfigError, UnsafePathError, open_store
from datamount.storage.backends import local
from datamount.storage.checksums import file_digests
from datamount.storage.mounts import mount_of, read_mounts, require_mount


def test_a_link_to_outside_the_root_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    (tmp_path / "store").mkdir()
    store = open_store(tmp_path / "store")
    os.symlink(outside, tmp_path / "store" / "escape")
    with pytest.raises(UnsafePathError, match="outside the store root"):
        store.read("escape/secret")
    with pytest.raises(UnsafePathError):
        store.write("escape/planted", b"x")
    with pytest.raises(UnsafePathError):
        store.local_path("escape/secret")  # to be memory-mapped
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]


@pytest.mark.parametrize("checked", [False, True], ids=["plain", "with-checksums"])
def test_put_many_refuses_a_destination_through_a_link_to_outside(tmp_path: Path, checked: bool) -> None:
    """Every file's destination is checked before it is copied: the one through a link is refused, and nothing is
    written outside the root."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "store").mkdir()
    store = open_store(tmp_path / "store")
    os.symlink(outside, tmp_path / "store" / "escape")
    sources = tmp_path / "sources"
    sources.mkdir()
    names = [f"fine/{i:02d}" for i in range(20)] + ["escape/planted"]
    items = []
    for index, name in enumerate(names):
        local = sources / f"{index:02d}"
        local.write_bytes(name.encode())
        digests = file_digests(local) if checked else ()
        items.append((str(local), name, *digests))
    with pytest.raises(UnsafePathError, match=r"escape/planted.*outside the store root"):
        store.put_many(items, max_requests=4)
    assert list(outside.iterdir()) == []
    assert all(store.read(name) == name.encode() for name in store.list("fine"))


def test_a_link_inside_the_root_is_followed(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store")
    store.write("real/obj", b"data")
    os.symlink(tmp_path / "store" / "real", tmp_path / "store" / "alias")
    assert store.read("alias/obj") == b"data"


def test_a_file_that_is_a_link_is_read_only_where_it_leads_inside(tmp_path: Path) -> None:
    """Reads open a file without following a link in its last part (no lstat per file); a link found that way is
    checked as every path is: followed inside the root, refused outside, by every way of reading."""
    (tmp_path / "secret").write_bytes(b"secret")
    store = open_store(tmp_path / "store")
    store.write("real/obj", b"data")
    os.symlink(tmp_path / "store" / "real" / "obj", tmp_path / "store" / "real" / "alias")
    os.symlink(tmp_path / "secret", tmp_path / "store" / "real" / "escape")
    assert store.read("real/alias") == b"data"
    assert list(store.read_many(["real/obj", "real/alias"])) == [b"data", b"data"]
    assert [data for data, _ in store.read_many_hashed(["real/alias"])] == [b"data"]
    reads = {
        "read": lambda: store.read("real/escape"),
        "read_many": lambda: list(store.read_many(["real/obj", "real/escape"])),
        "read_many_hashed": lambda: list(store.read_many_hashed(["real/obj", "real/escape"])),
    }
    for way, read in reads.items():
        with pytest.raises(UnsafePathError, match="outside the store root"):
            read()
            pytest.fail(f"{way} read through a link to outside the root")


def test_a_listing_never_goes_through_a_link_to_a_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    store = open_store(tmp_path / "store")
    store.write("real/obj", b"data")
    os.symlink(outside, tmp_path / "store" / "escape")
    os.symlink(tmp_path / "store" / "real", tmp_path / "store" / "alias")
    assert store.list() == {"real/obj": 4}
    assert store.list("alias") == {"alias/obj": 4}  # named on purpose, a link inside the root is followed
    with pytest.raises(UnsafePathError):
        store.list("escape")


def test_a_local_store_names_its_files_and_is_shareable(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store")
    store.write("a/b", b"on disk")
    assert store.local_path() == str(tmp_path / "store")
    assert store.local_path("a/b") == str(tmp_path / "store" / "a" / "b")
    assert store.shareable


def test_a_memory_store_is_neither_local_nor_shareable() -> None:
    store = open_store("memory://only-this-process")
    store.write("a/b", b"in memory")
    assert store.local_path() is None and store.local_path("a/b") is None
    assert not store.shareable


def test_the_root_folder_is_made_by_the_first_write_not_by_opening(tmp_path: Path) -> None:
    """Opening a path that does not exist (a mistyped one, most often) to read makes nothing; writing makes it."""
    root = tmp_path / "deep" / "new" / "store"
    store = open_store(root)
    assert store.url == f"file://{root}"
    assert not store.root_exists and store.list("datasets") == {} and not (tmp_path / "deep").exists()
    store.write("datasets/x", b"1")
    assert store.root_exists and (root / "datasets" / "x").read_bytes() == b"1"


def test_a_root_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "store").write_bytes(b"not a folder")
    with pytest.raises(StoreConfigError, match="/store is not a folder"):
        open_store(tmp_path / "store")


@pytest.mark.parametrize("form", ["file://{root}", "file:{root}", "file://localhost{root}"])
def test_every_form_of_a_file_url_is_the_same_store(tmp_path: Path, form: str) -> None:
    open_store(tmp_path).write("x", b"1")
    store = open_store(form.format(root=tmp_path))
    assert store.url == f"file://{tmp_path}" and store.read("x") == b"1"


@pytest.mark.parametrize(
    ("url", "message"),
    [("file://otherhost/data", "names a folder on host 'otherhost'"), ("file:data", "write ./data for a relative")],
)
def test_a_file_url_of_another_host_or_no_absolute_path_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreConfigError, match=message):
        open_store(url)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_fails_clearly_and_keeps_the_old_object(tiny_disk: Path) -> None:
    store = open_store(tiny_disk)
    store.write("obj", b"old")
    with pytest.raises(OSError, match="no space left") as caught:
        store.write("obj", b"x" * (1 << 20))
    assert str(tiny_disk) in str(caught.value)
    assert store.read("obj") == b"old"
    assert sorted(os.listdir(tiny_disk)) == ["obj"]


def _by_sha256(sha256: str) -> str:
    return f"objects/{sha256[:2]}/{sha256}"


def test_storing_by_content_on_a_full_disk_fails_clearly_and_leaves_no_temporary(
    tiny_disk: Path, tmp_path: Path
) -> None:
    store = open_store(tiny_disk)
    fits, too_big = tmp_path / "fits.bin", tmp_path / "too-big.bin"
    fits.write_bytes(b"f" * 1000)
    too_big.write_bytes(os.urandom(1 << 20))
    results = store.put_many_by_content(
        [(str(fits), 1000), (str(too_big), 1 << 20)], _by_sha256, staging="objects", max_requests=1
    )
    first = next(results)
    with pytest.raises(OSError, match="no space left") as caught:
        next(results)
    assert f"{store.url}/objects/" in str(caught.value)
    assert store.list() == {first.path: 1000}
    assert [name for _, _, names in os.walk(tiny_disk) for name in names] == [first.sha256]


def test_storing_by_content_replaces_a_link_at_the_objects_name_and_never_writes_through_it(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store")
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"not the store's")
    source = tmp_path / "source.bin"
    source.write_bytes(b"the object's bytes")
    path = _by_sha256(hashlib.sha256(source.read_bytes()).hexdigest())
    planted = tmp_path / "store" / path
    planted.parent.mkdir(parents=True)
    planted.symlink_to(outside)
    (stored,) = store.put_many_by_content([(str(source), 18)], _by_sha256, staging="objects")
    assert stored.written and not planted.is_symlink()
    assert planted.read_bytes() == b"the object's bytes"
    assert outside.read_bytes() == b"not the store's"


def test_mount_guard_refuses_a_plain_folder(tmp_path: Path) -> None:
    with pytest.raises(MountError, match=r"must be on a glusterfs mount.*mount the volume first") as caught:
        open_store(tmp_path / "gv0", mount="glusterfs")
    assert isinstance(caught.value, OSError)
    assert not (tmp_path / "gv0").exists()


def test_mount_guard_accepts_the_filesystem_the_folder_is_on(tmp_path: Path) -> None:
    fstype = mount_of(str(tmp_path)).fstype
    store = open_store(tmp_path / "store", mount=fstype)
    store.write("obj", b"ok")
    assert store.read("obj") == b"ok"


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm on this machine")
def test_mount_guard_on_a_real_tmpfs(tmp_path: Path) -> None:
    assert require_mount("/dev/shm/datamount-does-not-exist", "tmpfs").fstype == "tmpfs"
    with pytest.raises(MountError):
        require_mount("/dev/shm", "glusterfs")


def test_mount_guard_is_checked_again_before_writes(tmp_path: Path) -> None:
    fstype = mount_of(str(tmp_path)).fstype
    store = open_store(tmp_path / "store", mount=fstype)
    store.mount = "glusterfs"  # as if the volume had been unmounted since the store was opened
    with pytest.raises(MountError):
        store.write("obj", b"lost")
    assert not (tmp_path / "store").exists()


def test_mount_table_fields_are_unescaped(tmp_path: Path) -> None:
    point = tmp_path / "with space"
    (point / "data").mkdir(parents=True)
    (tmp_path / "with spacer").mkdir()
    escaped = str(point).replace(" ", "\\040")
    table = tmp_path / "mounts"
    table.write_text(f"server:/gv0 {escaped} fuse.glusterfs rw 0 0\n/dev/vda / ext4 rw 0 0\n", encoding="utf-8")
    mounts = read_mounts(str(table))
    assert [m.target for m in mounts] == [str(point), "/"]
    assert mount_of(str(point / "data" / "not-yet"), mounts).fstype == "fuse.glusterfs"
    assert mount_of(str(tmp_path / "with spacer"), mounts).fstype == "ext4"


def test_unknown_local_option_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown local store option endpoint_url; the options are mount"):
        open_store(tmp_path, endpoint_url="http://x")


def test_reads_ahead_keep_no_file_open_once_done_or_abandoned(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store")
    paths = [f"objs/{i}" for i in range(40)]
    for path in paths:
        store.write(path, path.encode())
    before = len(os.listdir("/proc/self/fd"))
    assert list(store.read_many(paths)) == [path.encode() for path in paths]
    abandoned = store.read_many(paths)
    assert next(abandoned) == b"objs/0"
    assert len(os.listdir("/proc/self/fd")) > before  # the next files are open, read ahead
    abandoned.close()
    assert len(os.listdir("/proc/self/fd")) == before


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.integers(0, 70_000), st.sampled_from(["right", "smaller", "larger", "unknown"])), max_size=8)
)
def test_read_many_gives_each_file_whole_whatever_size_it_was_told(
    tmp_path: Path, files: list[tuple[int, str]]
) -> None:
    """A file is read with one read() of the size it was said to have; a file of another size (damaged, changed) is
    still given whole, for the caller's size check to name."""
    store = open_store(tmp_path / "store")
    contents = [os.urandom(size) for size, _ in files]
    paths = [f"objs/{index}" for index in range(len(files))]
    for path, data in zip(paths, contents, strict=True):
        store.write(path, data)
    told = {"right": 0, "smaller": -1, "larger": 1, "unknown": None}
    sizes = [
        len(data) + told[how] if told[how] is not None else 0 for data, (_, how) in zip(contents, files, strict=True)
    ]
    assert list(store.read_many(paths, sizes=[max(size, 0) for size in sizes])) == contents


_READ_ALL = """
import sys
from datamount.storage import open_store
store = open_store(sys.argv[1])
paths = sys.argv[2:]
print(sum(len(data) for data in store.read_many(paths)))
"""


def stored_with_some_evicted(tmp_path: Path, count: int, size: int, evicted: slice) -> tuple[Store, list[str]]:
    """A store of ``count`` files of ``size`` random bytes, those of ``evicted`` dropped from the page cache; their
    paths."""
    store = open_store(tmp_path / "store")
    paths = [f"objs/{index:03d}" for index in range(count)]
    for path in paths:
        store.write(path, os.urandom(size))  # written with fsync: clean pages, which can be dropped
    for path in paths[evicted]:
        descriptor = os.open(store.local_path(path), os.O_RDONLY)
        try:
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)
    return store, paths


def traced_read_all(tmp_path: Path, store: Store, paths: list[str], calls: str = "all") -> list[str]:
    """The ``calls`` (strace's ``trace=`` list) of a fresh process that reads ``paths`` with ``read_many``."""
    trace = tmp_path / "trace"
    command = ["strace", "-f", "-e", f"trace={calls}", "-o", str(trace), sys.executable, "-c", _READ_ALL]
    done = subprocess.run([*command, store.root, *paths], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(sum(store.info(path).size for path in paths))
    return trace.read_text().splitlines()


def asks_the_page_cache(strace_line: str) -> bool:
    """Whether the traced call asked whether a file is in the page cache (``cachestat``, number 451, or a
    ``RWF_NOWAIT`` read where the kernel lacks it)."""
    return any(call in strace_line for call in ("cachestat(", "syscall_0x1c3(", "RWF_NOWAIT"))


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (.ci/run installs it)")
def test_only_files_not_in_the_page_cache_are_announced_to_the_kernel(tmp_path: Path) -> None:
    """Read-ahead hints (``POSIX_FADV_WILLNEED``) go only with files the disk must be read for: a hint costs a
    warm read more than a tenth of its time, and saves a cold pass most of its."""
    store, paths = stored_with_some_evicted(tmp_path, 24, 50_000, slice(None, None, 3))
    hinted = [line for line in traced_read_all(tmp_path, store, paths, "fadvise64") if "POSIX_FADV_WILLNEED" in line]
    assert len(hinted) == len(paths[::3]), "\n".join(hinted)


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (.ci/run installs it)")
def test_a_warm_pass_asks_fewer_files_whether_they_are_cached_and_still_announces_a_cold_part(tmp_path: Path) -> None:
    """After many cached files in a row only one in ``PROBE_EVERY`` is asked about; the first that is not cached
    sends the pass back to asking each, so a cold part is announced all but its first few files."""
    store, paths = stored_with_some_evicted(tmp_path, 750, 4_000, slice(600, None))
    cold = paths[600:]
    lines = traced_read_all(tmp_path, store, paths)  # all calls: this strace may not know cachestat by name
    asked = [line for line in lines if asks_the_page_cache(line)]
    hinted = [line for line in lines if "POSIX_FADV_WILLNEED" in line]
    # ~64 + 536 / 16 + 150 without a file of the warm part dropped from the cache meanwhile (each costs ~64 more)
    assert len(asked) < 450, f"{len(asked)} of 750 files were asked whether they are cached"
    assert len(cold) - local.PROBE_EVERY <= len(hinted) <= len(cold), f"{len(hinted)} of {len(cold)} announced"
