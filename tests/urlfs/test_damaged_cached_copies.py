"""A copy in the content cache damaged after this process checked it is dropped and fetched again, once; only the
store's copy failing its check is named as damaged (``ContentCache.read``, ``ShardRows._cached``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from datamount.datasets import layout
from datamount.readers import reader
from datamount.storage import IntegrityError, Store
from datamount.storage.cache import ContentCache
from tests.urlfs.test_urlfs import flip, flip_in_store, without_block_checksums
from tests.urlfs.versions import Versions, make_versions


def test_a_kept_copy_that_fails_its_check_is_fetched_again_and_the_fetch_alone_blames_the_store(
    tmp_path: Path,
) -> None:
    content = b"the stored bytes" * 100
    digest = hashlib.sha256(content).hexdigest()
    cache = ContentCache(tmp_path / "cache")
    fetches: list[int] = []

    def fill(out) -> None:  # type: ignore[no-untyped-def]
        fetches.append(1)
        out.write(stored[0])

    def intact(data: bytes) -> bool:
        return data == content

    stored = [content]
    assert cache.read(digest, len(content), fill, check=intact, name="s3://bucket/object") == content
    kept = cache.path_for(digest)
    flip(kept, 5)  # damaged on this disk after this process hashed it
    assert cache.read(digest, len(content), fill, check=intact, name="s3://bucket/object") == content
    assert len(fetches) == 2 and kept.read_bytes() == content
    stored[0] = content[:5] + b"X" + content[6:]  # now the store's copy is damaged too
    flip(kept, 5)
    for _ in range(2):  # the damaged copy is not taken for whole again
        with pytest.raises(IntegrityError, match=r"s3://bucket/object: the bytes fetched do not match the sha256"):
            cache.read(digest, len(content), fill, check=intact, name="s3://bucket/object")


@pytest.fixture
def s3_versions(s3_store: Store, s3_server, tmp_path: Path) -> Versions:  # type: ignore[no-untyped-def]
    return make_versions(s3_store, tmp_path, s3_server.endpoint_url)


@pytest.mark.s3
def test_the_same_filesystem_fetches_a_damaged_cached_file_again(s3_versions: Versions) -> None:
    manifest = s3_versions.manifests["unpacked"]
    entry = manifest.files[0]
    fs = s3_versions.filesystem()
    url = s3_versions.url("unpacked", entry.path)
    stored = s3_versions.store.read(layout.object_path("unpacked", entry.sha256))
    assert fs.cat_file(url) == stored
    kept = s3_versions.cache / entry.sha256[:2] / entry.sha256
    flip(kept, entry.size // 2)
    assert fs.cat_file(url) == stored  # dropped and fetched again; the intact S3 object is not blamed
    assert kept.read_bytes() == stored
    flip(kept, entry.size // 2)
    flip_in_store(s3_versions.store, layout.object_path("unpacked", entry.sha256), entry.size // 2)
    with pytest.raises(IntegrityError, match=rf"{entry.sha256}: the bytes fetched do not match the sha256"):
        fs.cat_file(url)


@pytest.mark.s3
def test_the_same_filesystem_fetches_a_damaged_cached_shard_again(s3_versions: Versions) -> None:
    without_block_checksums(s3_versions.store, "packed")  # such a shard is read whole, through the cache
    shard = s3_versions.manifests["packed"].shards[0]
    stored = s3_versions.store.read(layout.shard_path("packed", shard))
    fs = s3_versions.filesystem()
    url = s3_versions.shard_urls("packed")[0]
    assert fs.cat_file(url, start=0, end=64) == stored[:64]
    kept = s3_versions.cache / shard.sha256[:2] / shard.sha256
    flip(kept, shard.size - 3)
    assert fs.cat_file(url) == stored


@pytest.mark.s3
@pytest.mark.parametrize("access", ["pass", "row"])
def test_a_reader_fetches_a_damaged_cached_shard_again(s3_versions: Versions, tmp_path: Path, access: str) -> None:
    manifest = s3_versions.manifests["packed"]
    samples = reader("packed@1", s3_versions.store, cache=str(tmp_path / "shards"))
    expected = list(samples())  # the shards fetched into the cache, and hashed there by this process
    for shard in manifest.shards:
        flip(tmp_path / "shards" / shard.sha256[:2] / shard.sha256, shard.size // 2)
    if access == "pass":
        assert list(samples()) == expected
    else:
        assert [samples[index] for index in range(0, len(expected), 7)] == expected[::7]
    for shard in manifest.shards:
        kept = (tmp_path / "shards" / shard.sha256[:2] / shard.sha256).read_bytes()
        assert hashlib.sha256(kept).hexdigest() == shard.sha256
