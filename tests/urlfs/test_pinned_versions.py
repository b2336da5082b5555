"""A ``datamount://`` filesystem serves the version it resolved, in this process and in every worker it is sent to:
``latest`` carried by number and manifest sha256 with or without a cache, a version removed since named as removed,
and never another version's bytes under a number given again."""

from __future__ import annotations

import multiprocessing
import pickle
import shutil
from pathlib import Path
from typing import Any

import fsspec
import pytest

from datamount.datasets import catalog, upload
from datamount.storage import Store
from datamount.urlfs import DatamountFileSystem
from tests.generated import MakeImageList
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET
from tests.urlfs.conftest import ON_STORES

FILE = "data/img0000.jpg"
METHODS = pytest.mark.parametrize("method", ["fork", "spawn"])


def _options(store: Store, request: pytest.FixtureRequest) -> dict[str, Any]:
    if store.local_path() is not None:
        return {}
    endpoint = request.getfixturevalue("s3_server").endpoint_url
    return {"endpoint_url": endpoint, "key": S3_TEST_KEY, "secret": S3_TEST_SECRET}


def _filesystem(store: Store, request: pytest.FixtureRequest, cache: Path | bool) -> DatamountFileSystem:
    cached = str(cache) if isinstance(cache, Path) else cache
    return DatamountFileSystem(
        store=store.url, options=_options(store, request), cache=cached, skip_instance_cache=True
    )


def _upload(list_file: Path, store: Store, content: bytes | None = None) -> int:
    """Upload ``list_file`` as ``d`` (its first file's bytes changed to ``content`` first); the version made."""
    if content is not None:
        (list_file.parent / FILE).write_bytes(content)
    return upload(list_file, "d", store=store).manifest.version


def _cat(filesystem: DatamountFileSystem, path: str) -> bytes | str:
    """``path``'s bytes read by ``filesystem`` (in a worker), or the error it raised, as text."""
    try:
        return filesystem.cat_file(path)
    except FileNotFoundError as exc:
        return f"FileNotFoundError: {exc}"


def _in_worker(method: str, filesystem: DatamountFileSystem, path: str) -> bytes | str:
    with multiprocessing.get_context(method).Pool(1) as pool:
        return pool.apply(_cat, (filesystem, path))


@ON_STORES
@METHODS
@pytest.mark.parametrize("cached", [True, False], ids=["cache", "no-cache"])
def test_latest_stays_in_a_worker_the_version_its_sender_read(
    store: Store, make_image_list: MakeImageList, request: pytest.FixtureRequest, tmp_path: Path, method: str,
    cached: bool,
) -> None:  # fmt: skip
    list_file = make_image_list(3)
    _upload(list_file, store, b"\xff\xd8\xff first")
    filesystem = _filesystem(store, request, tmp_path / "cache" if cached else False)
    assert filesystem.cat_file(f"_/d@latest/{FILE}") == b"\xff\xd8\xff first"
    assert _upload(list_file, store, b"\xff\xd8\xff second") == 2
    assert _in_worker(method, filesystem, f"_/d@latest/{FILE}") == b"\xff\xd8\xff first"
    assert pickle.loads(pickle.dumps(filesystem)).cat_file(f"_/d@latest/{FILE}") == b"\xff\xd8\xff first"


@ON_STORES
@METHODS
def test_a_worker_whose_cache_lacks_the_manifest_reads_the_pinned_number(
    store: Store, make_image_list: MakeImageList, request: pytest.FixtureRequest, tmp_path: Path, method: str
) -> None:
    """As a worker on another machine, whose cache folder holds nothing its sender put there."""
    list_file = make_image_list(3)
    _upload(list_file, store, b"\xff\xd8\xff first")
    filesystem = _filesystem(store, request, tmp_path / "cache")
    assert filesystem.cat_file(f"_/d@latest/{FILE}") == b"\xff\xd8\xff first"
    sent = pickle.dumps(filesystem)
    _upload(list_file, store, b"\xff\xd8\xff second")
    shutil.rmtree(tmp_path / "cache")
    assert _in_worker(method, pickle.loads(sent), f"_/d@latest/{FILE}") == b"\xff\xd8\xff first"


@ON_STORES
@METHODS
def test_a_pinned_version_removed_since_is_named_as_removed(
    store: Store, make_image_list: MakeImageList, request: pytest.FixtureRequest, method: str
) -> None:
    list_file = make_image_list(3)
    _upload(list_file, store, b"\xff\xd8\xff first")
    filesystem = _filesystem(store, request, False)
    assert filesystem.cat_file(f"_/d@latest/{FILE}") == b"\xff\xd8\xff first"
    _upload(list_file, store, b"\xff\xd8\xff second")
    catalog.remove(store, "d@1")
    found = _in_worker(method, filesystem, f"_/d@latest/{FILE}")
    assert isinstance(found, str) and "d@1" in found and "was removed" in found, found


@ON_STORES
def test_a_number_given_again_by_a_datamount_that_reused_numbers_is_refused(
    store: Store, make_image_list: MakeImageList, request: pytest.FixtureRequest
) -> None:
    """A store where every trace of ``d`` was deleted (as removals did before their marks stayed), then ``d@1`` made
    again with other bytes: a worker pinned to the first ``d@1`` says so, and serves none of the second's bytes."""
    list_file = make_image_list(3)
    _upload(list_file, store, b"\xff\xd8\xff first")
    filesystem = _filesystem(store, request, False)
    assert filesystem.cat_file(f"_/d@1/{FILE}") == b"\xff\xd8\xff first"
    sent = pickle.dumps(filesystem)
    store.remove("datasets/d", recursive=True)
    assert _upload(list_file, store, b"\xff\xd8\xff other") == 1
    with pytest.raises(FileNotFoundError, match=r"d@1 .* is not the version the filesystem sent here opened"):
        pickle.loads(sent).cat_file(f"_/d@1/{FILE}")


@ON_STORES
def test_one_url_never_gives_two_versions_bytes_in_a_process(
    store: Store, make_image_list: MakeImageList, request: pytest.FixtureRequest
) -> None:
    """``fsspec.filesystem("datamount")`` is one instance for the process: after ``rm d`` and a new upload, the
    instance that resolved ``d@1`` and a new one both say ``d@1`` was removed; neither serves the new version's
    bytes at its URL."""
    options = {"store": store.url, "options": _options(store, request), "cache": False}
    list_file = make_image_list(3)
    _upload(list_file, store, b"\xff\xd8\xff first")
    kept = fsspec.filesystem("datamount", **options)
    assert kept.cat_file(f"_/d@1/{FILE}") == b"\xff\xd8\xff first"
    catalog.remove(store, "d")
    assert _upload(list_file, store, b"\xff\xd8\xff after the removal") == 2
    assert fsspec.filesystem("datamount", **options) is kept
    with pytest.raises(FileNotFoundError, match=r"d@1 was removed from .* while it was being read"):
        kept.cat_file(f"_/d@1/{FILE}")  # the version it resolved, whose object is gone: named, never d@2's bytes
    fresh = DatamountFileSystem(**options, skip_instance_cache=True)
    with pytest.raises(FileNotFoundError, match=r"d@1 \(manifest sha256 [0-9a-f]{16}…\) was removed"):
        fresh.cat_file(f"_/d@1/{FILE}")
    assert fresh.cat_file(f"_/d@2/{FILE}") == b"\xff\xd8\xff after the removal"
