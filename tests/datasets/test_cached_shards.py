"""Packed shards read through the local cache: what a manifest may name there, and that every shard is let go."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from datamount.datasets import catalog, layout
from datamount.datasets.pack import pack
from datamount.datasets.upload import upload
from datamount.readers import reader
from datamount.storage import IntegrityError, Store
from datamount.storage.cache import ContentCache
from tests.generated import MakeImageList

SMALL = {"shard_bytes": 40_000, "row_group_bytes": 6_000}


def packed(store: Store, make_image_list: MakeImageList) -> list[tuple[bytes, str]]:
    upload(make_image_list(60, size=1500), "d", store=store)
    expected = list(reader("d", store)())
    pack("d", store=store, **SMALL)
    return expected


def opened_under(folder: Path) -> list[str]:
    """Descriptors and memory maps of this process on files under ``folder``."""
    descriptors = [os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")]
    maps = [line.split(maxsplit=5)[-1].strip() for line in Path("/proc/self/maps").read_text().splitlines()]
    return [path for path in descriptors + maps if path.startswith(str(folder.resolve()))]


def test_a_caching_reader_refuses_a_hand_edited_shard_sha256(
    s3_store: Store, make_image_list: MakeImageList, tmp_path: Path
) -> None:
    packed(s3_store, make_image_list)
    manifest = catalog.resolve(s3_store, "d")
    body = json.loads(manifest.to_json())
    body["shards"][0]["sha256"] = "../precious.txt"
    s3_store.write(layout.manifest_path("d", manifest.version), json.dumps(body).encode())
    precious = tmp_path / "precious.txt"  # where the cache's folder/../../precious.txt leads
    precious.write_bytes(b"p" * manifest.shards[0].size)
    cache = ContentCache(tmp_path / "a" / "cache")
    with pytest.raises(IntegrityError, match=r"'\.\./precious\.txt', is not a sha256 digest"):
        list(reader("d", s3_store, cache=cache)())
    assert precious.read_bytes() == b"p" * manifest.shards[0].size
    assert cache.misses == 0


def test_a_cached_reader_lets_every_shard_go(s3_store: Store, make_image_list: MakeImageList, tmp_path: Path) -> None:
    expected = packed(s3_store, make_image_list)
    cache = ContentCache(tmp_path / "cache")
    samples = reader("d", s3_store, cache=cache)
    for _ in range(3):
        assert list(samples()) == expected
    shuffled = reader("d", s3_store, cache=cache, shuffle=True, seed=1)
    assert sorted(shuffled()) == sorted(expected)
    assert [samples[i] for i in (0, 31, 59)] == [expected[i] for i in (0, 31, 59)]
    abandoned = samples()
    assert next(abandoned) == expected[0]
    assert opened_under(cache.directory) != []  # the shard being read is held (its lock) and mapped
    abandoned.close()
    assert opened_under(cache.directory) == []
    # No shard is still held: a new file in a cache capped below it evicts every one of them.
    data = b"new"
    small = ContentCache(cache.directory, max_bytes=1)
    small.get(hashlib.sha256(data).hexdigest(), len(data), lambda out: out.write(data))
    assert small.usage() == len(data)
