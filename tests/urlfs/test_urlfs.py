"""``datamount://``: the tree of a version from its manifest, listing without requests, checked bytes (whole and
ranged), writes refused, unknown stores and versions named, and filesystems sent to other processes."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import pickle
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import fsspec
import pytest

from datamount.datasets import layout, upload
from datamount.storage import IntegrityError, Store
from datamount.urlfs import DatamountFileSystem
from tests.servers.fault_proxy import FaultProxyFactory
from tests.servers.moto import S3Server
from tests.urlfs.conftest import ON_STORES
from tests.urlfs.versions import NAMES, ROWS, Versions, make_versions


def stored_files(versions: Versions) -> dict[str, bytes]:
    """Each file of the uploaded list by its list path."""
    return {
        line.split("\t")[0].removeprefix("./"): (versions.source.parent / line.split("\t")[0]).read_bytes()
        for line in versions.source.read_text().splitlines()
    }


@ON_STORES
@pytest.mark.parametrize("name", NAMES)
def test_the_tree_is_the_versions_files_list_and_shards(versions: Versions, name: str) -> None:
    fs = versions.filesystem()
    manifest = versions.manifests[name]
    files = stored_files(versions)
    root = f"_/{name}@1"
    expected = {f"{root}/{path}" for path in files} | {f"{root}/train.list"}
    expected |= {url.removeprefix("datamount://") for url in versions.shard_urls(name)}
    assert set(fs.find(f"datamount://{root}")) == expected
    assert sorted(fs.ls(root, detail=False)) == [f"{root}/data", f"{root}/shards", f"{root}/train.list"]
    info = fs.info(f"datamount://{root}/data/img0003.png")
    entry = next(entry for entry in manifest.files if entry.path == "data/img0003.png")
    assert info["type"] == "file" and info["size"] == len(files["data/img0003.png"]) == entry.size
    # The file's recorded digest: its object's sha256, or (packed by upload --pack, format 8) its xxh3-64.
    kind, digest = ("sha256", entry.sha256) if entry.sha256 else ("xxh3", entry.xxh3)
    assert (kind, len(digest)) == (("sha256", 64) if name == "unpacked" else ("xxh3", 16))
    assert info[kind] == info["etag"] == info["ukey"] == digest == fs.ukey(f"{root}/data/img0003.png")
    assert fs.checksum(f"{root}/data/img0003.png") == int(digest[:16], 16)
    assert info["version"] == 1 and info["created"] == manifest.created
    assert fs.info(root)["type"] == fs.info(f"{root}/data")["type"] == "directory"
    shard = manifest.shards[0]
    assert fs.info(versions.shard_urls(name)[0])["sha256"] == shard.sha256
    assert fs.du(root) == sum(fs.info(path)["size"] for path in expected)
    assert fs.glob(f"{root}/shards/*.parquet") == sorted(
        u.removeprefix("datamount://") for u in versions.shard_urls(name)
    )
    assert fs.exists(f"{root}/data") and not fs.exists(f"{root}/data/nothing.jpg")
    with pytest.raises(FileNotFoundError, match=r"nothing\.jpg"):
        fs.info(f"{root}/data/nothing.jpg")


@ON_STORES
@pytest.mark.parametrize("name", NAMES)
def test_one_path_is_answered_from_the_list_and_manifest_as_the_tree_answers_it(versions: Versions, name: str) -> None:
    """``info``, ``exists`` and ``open`` of one path find it in the version's list and manifest: the tree (a node
    per file, seconds for a million) is built only for a listing, and answers the same."""
    root = f"_/{name}@1"
    listed = versions.filesystem()
    paths = listed.find(root, withdirs=True)
    missing = [f"{root}/data/img9999.png", f"{root}/data/img0003", f"{root}/dat", f"{root}/shards/x.parquet"]
    for path in [*paths, *missing]:
        one = versions.filesystem()
        assert one.exists(path) == listed.exists(path), path
        if listed.exists(path):
            assert one.info(path) == listed.info(path), path
        assert [version._tree for version in one._opened.values()] == [None], path  # nothing listed: no tree
    one = versions.filesystem()
    assert one.cat_file(f"{root}/data/img0003.png") == stored_files(versions)["data/img0003.png"]
    assert one.ls(f"{root}/data", detail=False) == listed.ls(f"{root}/data", detail=False)


@ON_STORES
@pytest.mark.parametrize("name", NAMES)
def test_every_file_reads_back_exactly_whole_and_by_range(versions: Versions, name: str) -> None:
    fs = versions.filesystem()
    for path, data in stored_files(versions).items():
        url = versions.url(name, path)
        assert fs.cat_file(url) == data
        assert fs.cat_file(url, start=100, end=-7) == data[100:-7]
        with fs.open(url) as file:
            file.seek(50)
            assert file.read(1000) == data[50:1050]
    assert fs.cat_file(versions.url(name, "train.list")) == versions.store.read(
        layout.list_path(versions.manifests[name])
    )
    for url, shard in zip(versions.shard_urls(name), versions.manifests[name].shards, strict=True):
        stored = versions.store.read(layout.shard_path(name, shard))
        assert fs.cat_file(url) == stored
        assert (
            fs.cat_file(url, start=shard.block_bytes - 10, end=shard.block_bytes + 10)
            == stored[shard.block_bytes - 10 : shard.block_bytes + 10]
        )
        assert fs.cat_ranges([url, url], [0, -8], [4, None]) == [stored[:4], stored[-8:]]


def test_latest_is_resolved_once_and_stays(local_store: Store, tmp_path: Path, make_image_list) -> None:
    list_file = make_image_list(3)
    upload(list_file, "cats", store=local_store)
    fs = DatamountFileSystem(store=local_store.url, cache=str(tmp_path / "cache"), skip_instance_cache=True)
    assert fs.info("_/cats@latest/train.list")["version"] == 1
    (list_file.parent / "data" / "img0000.jpg").write_bytes(b"changed")
    upload(list_file, "cats", store=local_store)
    assert fs.info("_/cats@latest/train.list")["version"] == 1  # frozen for this filesystem
    assert fs.info("_/cats@1/train.list")["version"] == 1
    fs.invalidate_cache()  # what fsspec offers to see a store's changes
    assert fs.info("_/cats@latest/train.list")["version"] == 2
    fresh = DatamountFileSystem(store=local_store.url, cache=str(tmp_path / "cache"), skip_instance_cache=True)
    assert fresh.info("_/cats@latest/train.list")["version"] == 2
    assert fresh.cat_file("_/cats@latest/data/img0000.jpg") == b"changed"


@pytest.mark.s3
def test_after_the_manifest_listing_asks_the_store_nothing(
    s3_store: Store, s3_server: S3Server, fault_proxy: FaultProxyFactory, tmp_path: Path
) -> None:
    from tests.urlfs.versions import make_versions

    versions = make_versions(s3_store, tmp_path, s3_server.endpoint_url)
    proxy = fault_proxy(s3_server.endpoint_url)
    fs = versions.filesystem(endpoint_url=proxy.endpoint_url)
    for name in NAMES:
        fs.ls(f"_/{name}@1")  # the manifest (and the list)
    opened = len(proxy.requests)
    # Per version: the manifest, its removal mark and pack record at once, the list, the part of its file entries.
    assert 0 < opened <= 3 * 4
    for name in NAMES:
        root = f"datamount://_/{name}@1"
        fs.ls(root)
        fs.ls(f"{root}/data", detail=True)
        fs.info(f"{root}/data/img0001.png")
        assert len(fs.find(root)) > ROWS
        fs.glob(f"{root}/**/*.png")
        fs.glob(f"{root}/shards/*.parquet")
        fs.du(root)
        assert fs.exists(f"{root}/train.list") and not fs.exists(f"{root}/missing")
        fs.isdir(f"{root}/data")
        fs.isfile(f"{root}/train.list")
    assert len(proxy.requests) == opened, [r.target for r in proxy.requests[opened:]]


@pytest.mark.parametrize(
    "write",
    [
        lambda fs, p: fs.open(p + "/new.txt", "wb"),
        lambda fs, p: fs.open(p + "/train.list", "ab"),
        lambda fs, p: fs.put(__file__, p + "/x.py"),
        lambda fs, p: fs.rm(p + "/train.list"),
        lambda fs, p: fs.mkdir(p + "/new"),
        lambda fs, p: fs.makedirs(p + "/new"),
        lambda fs, p: fs.touch(p + "/new"),
        lambda fs, p: fs.pipe(p + "/new", b"x"),
        lambda fs, p: fs.pipe_file(p + "/new", b"x"),
        lambda fs, p: fs.mv(p + "/train.list", p + "/moved"),
        lambda fs, p: fs.copy(p + "/train.list", p + "/copied"),
        lambda fs, p: fs.rmdir(p + "/data"),
    ],
    ids=["open-wb", "open-ab", "put", "rm", "mkdir", "makedirs", "touch", "pipe", "pipe_file", "mv", "copy", "rmdir"],
)
def test_every_write_is_refused_as_a_read_only_filesystem(local_store: Store, make_image_list, write, tmp_path) -> None:
    upload(make_image_list(2), "cats", store=local_store)
    fs = DatamountFileSystem(store=local_store.url, cache=str(tmp_path / "cache"), skip_instance_cache=True)
    before = sorted(local_store.list())
    with pytest.raises(OSError) as raised:
        write(fs, "_/cats@1")
    assert raised.value.errno == errno.EROFS
    assert sorted(local_store.list()) == before


def test_an_unknown_profile_version_or_dataset_is_named_and_nothing_is_made(tmp_path: Path, make_image_list) -> None:
    missing_root = tmp_path / "nowhere"
    os.environ["DATAMOUNT_STORE"] = str(missing_root)
    try:
        fs = DatamountFileSystem(skip_instance_cache=True, cache=str(tmp_path / "cache"))
        with pytest.raises(FileNotFoundError, match=r"no store profile 'prod'.*profiles: none"):
            fs.ls("datamount://prod/cats@1")
        with pytest.raises(FileNotFoundError, match=r"no dataset named 'cats'.*no such folder"):
            fs.ls("datamount://_/cats@1")
        assert not missing_root.exists()
        upload(make_image_list(2), "cats", store=str(missing_root))
        fs = DatamountFileSystem(skip_instance_cache=True, cache=str(tmp_path / "cache"))
        with pytest.raises(FileNotFoundError, match=r"no version 7.*versions: 1"):
            fs.ls("datamount://_/cats@7")
        with pytest.raises(ValueError, match="names no dataset version"):
            fs.ls("datamount://_/cats")
    finally:
        del os.environ["DATAMOUNT_STORE"]


# ---------------------------------------------------------------------------------------------- damaged bytes


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def flip_in_store(store: Store, path: str, offset: int) -> None:
    data = bytearray(store.read(path))
    data[offset] ^= 0x01
    store.write(path, bytes(data))


@ON_STORES
@pytest.mark.parametrize("name", NAMES)
def test_a_byte_flipped_in_the_store_is_an_eio_naming_the_path(versions: Versions, name: str, tmp_path: Path) -> None:
    manifest = versions.manifests[name]
    if name == "unpacked":
        entry = next(entry for entry in manifest.files if entry.path == "data/img0005.png")
        flip_in_store(versions.store, layout.object_path(name, entry.sha256), 7)
    shard = manifest.shards[0]
    flip_in_store(versions.store, layout.shard_path(name, shard), shard.block_bytes + 3)  # in its second block
    fs = versions.filesystem()
    shard_url = versions.shard_urls(name)[0]
    damaged = [shard_url]
    if name == "unpacked":
        damaged.append(versions.url(name, "data/img0005.png"))
    for url in damaged:
        size = fs.info(url)["size"]
        reads = [
            lambda u: fs.cat_file(u),
            lambda u, size=size: fs.cat_file(u, start=size // 2 if "shard" not in u else shard.block_bytes, end=size),
            lambda u: fs.open(u).read(),
            lambda u, size=size: fs.cat_ranges([u], [0], [size], on_error="raise"),
            lambda u: fs.get(u, str(tmp_path / "got")),
        ]
        for read in reads:
            with pytest.raises(IntegrityError, match=re.escape(url.removeprefix("datamount://"))) as raised:
                read(url)
            assert isinstance(raised.value, OSError) and raised.value.errno == errno.EIO
        assert fs.cat_file(url, start=0, end=4) if "shard" in url else True  # an undamaged block still reads
    # a packed file comes from the damaged shard's row group: checked too (its page CRC, or its own checksum)
    if name == "packed":
        with pytest.raises(OSError):
            for path in stored_files(versions):
                fs.cat_file(versions.url(name, path))


@pytest.mark.s3
def test_a_byte_flipped_in_the_cache_never_reaches_the_caller(
    s3_store: Store, s3_server: S3Server, tmp_path: Path
) -> None:
    from tests.urlfs.versions import make_versions

    versions = make_versions(s3_store, tmp_path, s3_server.endpoint_url)
    url = versions.url("unpacked", "data/img0002.png")
    good = versions.filesystem().cat_file(url)
    cached = [path for path in versions.cache.rglob("*") if path.is_file() and path.stat().st_size == len(good)]
    assert len(cached) == 1
    flip(cached[0], 9)
    # A new process's cache re-hashes what it holds before its first use: the damaged copy is fetched again.
    assert versions.filesystem().cat_file(url) == good
    # Damaged in the cache and in the store: an error, never the bytes.
    entry = next(entry for entry in versions.manifests["unpacked"].files if entry.path == "data/img0002.png")
    flip_in_store(s3_store, layout.object_path("unpacked", entry.sha256), 9)
    flip(cached[0], 9)
    with pytest.raises(IntegrityError, match=r"img0002\.png"):
        versions.filesystem().cat_file(url)


# ------------------------------------------------------------------------------------------ other processes


def _list_in_child(filesystem: DatamountFileSystem, root: str) -> list[str]:
    return filesystem.find(root)


@pytest.mark.s3
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_pickled_filesystem_carries_no_client_nor_manifest_and_reopens_without_a_request(
    s3_store: Store, s3_server: S3Server, fault_proxy: FaultProxyFactory, tmp_path: Path, method: str
) -> None:
    from tests.urlfs.versions import make_versions

    versions = make_versions(s3_store, tmp_path, s3_server.endpoint_url)
    proxy = fault_proxy(s3_server.endpoint_url)
    fs = versions.filesystem(endpoint_url=proxy.endpoint_url)
    root = "_/unpacked@1"
    expected = fs.find(root)
    sent = pickle.dumps(fs)
    assert len(sent) < 2_000, len(sent)  # options and a sha256 per version: no manifest, no list, no client
    assert versions.manifests["unpacked"].files[0].sha256.encode() not in sent and b"obstore" not in sent
    before = len(proxy.requests)
    with multiprocessing.get_context(method).Pool(1) as pool:
        assert pool.apply(_list_in_child, (fs, root)) == expected
    assert pickle.loads(sent).find(root) == expected
    assert len(proxy.requests) == before, [r.target for r in proxy.requests[before:]]


def test_the_entry_point_registers_the_protocol() -> None:
    assert isinstance(fsspec.filesystem("datamount", skip_instance_cache=True), DatamountFileSystem)
    assert fsspec.get_filesystem_class("datamount") is DatamountFileSystem


# ------------------------------------------------------------------------------ shards without block checksums


def without_block_checksums(store: Store, name: str) -> None:
    """Rewrite version 1 of ``name`` as a datamount before format 5 wrote it: its shards without block checksums."""
    path = layout.manifest_path(name, 1)
    body = json.loads(store.read(path))
    for shard in body["shards"]:
        del shard["block_bytes"], shard["blocks"]
    body["format_version"] = 3
    store.write(path, json.dumps(body).encode())


@ON_STORES
def test_a_shard_without_block_checksums_is_checked_whole_on_first_touch(versions: Versions, tmp_path: Path) -> None:
    without_block_checksums(versions.store, "packed")
    shard = versions.manifests["packed"].shards[0]
    stored = versions.store.read(layout.shard_path("packed", shard))
    fs = versions.filesystem()
    url = versions.shard_urls("packed")[0]
    assert fs.cat_file(url, start=10, end=30) == stored[10:30]
    with fs.open(url) as file:
        file.seek(shard.size - 8)
        assert file.read() == stored[-8:]
    if versions.store.local_path() is None:  # kept in the content cache by its sha256
        assert (versions.cache / shard.sha256[:2] / shard.sha256).read_bytes() == stored
    flip_in_store(versions.store, layout.shard_path("packed", shard), shard.size - 3)
    if versions.store.local_path() is None:
        flip(versions.cache / shard.sha256[:2] / shard.sha256, shard.size - 3)
    fresh = versions.filesystem()
    for read in (lambda: fresh.cat_file(url, start=0, end=4), lambda: fresh.open(url).read(4)):
        with pytest.raises(IntegrityError, match="shard-") as raised:
            read()  # the first four bytes are intact, but the shard is not: no byte of it is served
        assert raised.value.errno == errno.EIO


def test_a_process_exits_only_once_its_reads_through_urls_are_done(local_store: Store, tmp_path: Path) -> None:
    """Reads under way in threads other than the main one (as pyarrow's datasets make them) end before the
    interpreter is finalised: its exit waits until no call into the filesystem has been made for a moment. A
    daemon thread reading with short pauses after the script's last line writes its mark only if it was let
    finish (without the wait, Python exits at once and kills it)."""
    versions = make_versions(local_store, tmp_path)
    mark = tmp_path / "done"
    script = tmp_path / "late_reader.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, threading, time
            from datamount.urlfs import DatamountFileSystem

            fs = DatamountFileSystem(**{versions.options()!r})
            url = {versions.shard_urls("packed")[0]!r}

            def late_reads():
                for _ in range(20):
                    fs.cat_file(url, 0, 100)
                    time.sleep(0.02)
                open({str(mark)!r}, "w").close()

            threading.Thread(target=late_reads, daemon=True).start()
            time.sleep(0.05)
            """
        ),
        encoding="utf-8",
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert mark.exists()
