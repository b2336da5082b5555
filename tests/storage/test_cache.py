"""The local content cache: paths only from digests, and several processes sharing one capped cache."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import BinaryIO

import pytest

from datamount.storage import IntegrityError, StoreConfigError, StoreIOError
from datamount.storage.cache import ContentCache

SHARD_SIZE = 32 << 10


def blob(number: int, size: int = SHARD_SIZE) -> tuple[str, bytes]:
    data = number.to_bytes(4, "big") * (size // 4)
    return hashlib.sha256(data).hexdigest(), data


@pytest.mark.parametrize(
    "value",
    ["../precious.txt", "../../" + "0" * 58, "A" * 64, "0" * 63, "0" * 65, "0" * 63 + "/", ""],
    ids=["climbs-out", "climbs-out-64-chars", "upper-case", "short", "long", "slash", "empty"],
)
def test_shared_cache_refuses_a_manifest_sha256_that_is_not_hex(tmp_path: Path, value: str) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_bytes(b"keep me")
    cache = ContentCache(tmp_path / "a" / "cache")
    before = sorted(tmp_path.rglob("*"))

    def fill(out: object) -> None:
        pytest.fail("nothing may be fetched for a value that is not a digest")

    with pytest.raises(IntegrityError, match=r"shard-7\.parquet.*not a sha256") as caught:
        cache.get(value, precious.stat().st_size, fill, name="shard-7.parquet")
    assert repr(value) in str(caught.value)
    with pytest.raises(IntegrityError, match="not a sha256"), cache.use(value, 7, fill):
        pass
    assert precious.read_bytes() == b"keep me"
    assert sorted(tmp_path.rglob("*")) == before


def test_shared_cache_never_evicts_a_shard_a_reader_holds(tmp_path: Path) -> None:
    # Two caches on one folder hold their locks through separate descriptors, as two processes do.
    reading, filling = (ContentCache(tmp_path / "c", max_bytes=2 * SHARD_SIZE) for _ in range(2))
    held, held_data = blob(0)
    with reading.use(held, SHARD_SIZE, lambda out: out.write(held_data)) as path:
        for number in range(1, 5):
            key, data = blob(number)
            filling.get(key, SHARD_SIZE, lambda out, data=data: out.write(data))
            assert path.read_bytes() == held_data
        assert filling.usage() <= 3 * SHARD_SIZE  # the cap, and the one shard held beyond it
    key, data = blob(5)
    filling.get(key, SHARD_SIZE, lambda out: out.write(data))
    assert not path.exists()  # once let go, it is the least recently used
    assert filling.usage() <= 2 * SHARD_SIZE


def test_shared_cache_eviction_removes_the_shards_locks_too(tmp_path: Path) -> None:
    cache = ContentCache(tmp_path / "c", max_bytes=SHARD_SIZE)
    for number in range(6):
        key, data = blob(number)
        cache.get(key, SHARD_SIZE, lambda out, data=data: out.write(data))
    kept = [p.name for p in cache.directory.glob("??/*")]
    assert len(kept) == 1
    locks = [p.name for p in (cache.directory / "locks").iterdir() if not p.name.startswith(".")]
    assert sorted(locks) == [f"{kept[0]}.fill", f"{kept[0]}.use"]


WORKER = textwrap.dedent(
    """
    import hashlib, json, random, sys
    from datamount.storage.cache import ContentCache

    directory, seed = sys.argv[1], sys.argv[5]
    cap, shards, passes = (int(value) for value in sys.argv[2:5])
    size = {size}
    blobs = [number.to_bytes(4, "big") * (size // 4) for number in range(shards)]
    keys = [hashlib.sha256(data).hexdigest() for data in blobs]
    cache = ContentCache(directory, max_bytes=cap)
    order = random.Random(seed)
    errors, largest = [], 0
    for _ in range(passes):
        for number in order.sample(range(shards), shards):
            try:
                with cache.use(keys[number], size, lambda out: out.write(blobs[number])) as path:
                    if hashlib.sha256(path.read_bytes()).hexdigest() != keys[number]:
                        errors.append(f"shard {{number}}: wrong bytes")
                largest = max(largest, cache.usage())
            except Exception as exc:
                errors.append(f"shard {{number}}: {{type(exc).__name__}}: {{exc}}")
    print(json.dumps({{"uses": passes * shards, "errors": errors, "largest": largest, "misses": cache.misses}}))
    """
).format(size=SHARD_SIZE)


@pytest.mark.slow
def test_shared_cache_under_three_processes_keeps_its_cap_and_never_loses_a_shard(tmp_path: Path) -> None:
    shards, cap, passes = 10, 3 * SHARD_SIZE, 40
    sampler = ContentCache(tmp_path / "cache", max_bytes=cap)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(sampler.directory), str(cap), str(shards), str(passes), f"seed-{n}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(3)
    ]
    sizes = []
    while any(child.poll() is None for child in children):
        sizes.append(sampler.usage())
        time.sleep(0.002)
    results = []
    for child in children:
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        results.append(json.loads(out))
    assert [error for result in results for error in result["errors"]] == []
    assert sum(result["uses"] for result in results) == 3 * passes * shards
    assert sum(result["misses"] for result in results) > shards  # eviction did happen, and shards came back
    largest = max([*sizes, *(result["largest"] for result in results)])
    assert largest <= cap + SHARD_SIZE, f"the cache held {largest} bytes, over its cap of {cap} plus one shard"


def test_a_file_larger_than_the_cache_disk_is_refused_before_it_is_fetched(tiny_disk: Path) -> None:
    cache = ContentCache(tiny_disk / "cache")
    sha256, data = blob(1, size=400 << 10)  # more than the whole 256 KiB disk

    def fill(out: object) -> None:
        pytest.fail("nothing may be fetched that cannot be kept")

    with pytest.raises(StoreIOError) as caught:
        cache.get(sha256, len(data), fill, name="s3://bucket/shard-1.parquet")
    message = str(caught.value)
    assert message.startswith(f"cannot keep s3://bucket/shard-1.parquet (409,600 bytes) in the cache {tiny_disk}")
    assert "its disk is too small even with every file not in use evicted (" in message and "cache=False" in message
    assert [
        path.name for path in (tiny_disk / "cache").rglob("*") if path.is_file() and "locks" not in path.parts
    ] == []


def test_a_disk_that_fills_up_while_a_file_is_fetched_is_named(tiny_disk: Path) -> None:
    cache = ContentCache(tiny_disk / "cache")
    sha256, data = blob(1, size=100 << 10)

    def fill(out: BinaryIO) -> None:  # more bytes than said (a server that sends more, another writer)
        out.write(data * 4)

    with pytest.raises(StoreIOError, match=r"^cannot keep s3://b/s\.parquet \(102,400 bytes\) .*filled up while it"):
        cache.get(sha256, len(data), fill, name="s3://b/s.parquet")
    assert [path for path in (tiny_disk / "cache").rglob("*") if path.is_file() and "locks" not in path.parts] == []


def test_files_not_in_use_are_evicted_to_make_room_on_a_full_disk(tiny_disk: Path) -> None:
    cache = ContentCache(tiny_disk / "cache")  # its cap (20 GiB by default) is far above the disk's 256 KiB
    stored = [blob(number, size=96 << 10) for number in range(3)]
    for sha256, data in stored:
        with cache.use(sha256, len(data), lambda out, data=data: out.write(data)) as path:
            assert path.read_bytes() == data
    kept = {path.name for path in (tiny_disk / "cache").rglob("*") if path.name in {s for s, _ in stored}}
    assert stored[2][0] in kept and stored[0][0] not in kept  # the least recently used went


def test_a_file_in_use_is_not_evicted_for_room_on_the_disk(tiny_disk: Path) -> None:
    cache = ContentCache(tiny_disk / "cache")
    (first, first_data), (second, second_data) = blob(1, size=150 << 10), blob(2, size=150 << 10)
    with cache.use(first, len(first_data), lambda out: out.write(first_data)) as held:
        with pytest.raises(StoreIOError, match=r"cannot keep .* in the cache .*bytes free"):
            cache.get(second, len(second_data), lambda out: out.write(second_data))
        assert held.read_bytes() == first_data


@pytest.mark.parametrize(("written", "cap"), [("512MiB", 512 << 20), ("20GB", 20 * 10**9), ("1000", 1000)])
def test_the_cache_size_variable_takes_a_size_as_people_write_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written: str, cap: int
) -> None:
    monkeypatch.setenv("DATAMOUNT_CACHE_SIZE", written)
    assert ContentCache(tmp_path / "cache").max_bytes == cap


def test_a_cache_size_variable_that_is_not_a_size_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATAMOUNT_CACHE_SIZE", "lots")
    with pytest.raises(StoreConfigError, match=r"^\$DATAMOUNT_CACHE_SIZE: 'lots' is not a size; write e\.g\. 256MB"):
        ContentCache(tmp_path / "cache")
