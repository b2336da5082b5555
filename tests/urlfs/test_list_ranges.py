"""``datamount://`` serves a long list (a text version's data) by its blocks of lines: a range fetches the blocks that
hold it, each checked; a file read in order fetches a few MiB at a time; a damaged block is an EIO naming the file."""

from __future__ import annotations

import errno
import random
import re
import time
from pathlib import Path

import pytest

from datamount.datasets import layout, upload
from datamount.datasets.manifest import Manifest
from datamount.datasets.tree_bytes import RANGED_LIST_BYTES
from datamount.storage import IntegrityError, Store, open_store
from datamount.urlfs import DatamountFileSystem
from tests.servers.fault_proxy import FaultProxyFactory
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server
from tests.urlfs.conftest import ON_STORES

URL = "datamount://_/pairs@1/pairs.list"


def upload_pairs(store: Store, tmp_path: Path, rows: int = 130_000) -> tuple[Manifest, bytes]:
    """A text version whose list (about 5 MB) is longer than :data:`RANGED_LIST_BYTES`, and the list's bytes."""
    text = "".join(f"source sentence {i} {'w' * (i % 11)}\ttarget {i}\n" for i in range(rows))
    (tmp_path / "pairs.list").write_text(text, encoding="utf-8")
    manifest = upload(tmp_path / "pairs.list", "pairs", store=store, kind="text").manifest
    assert manifest.list_size > RANGED_LIST_BYTES and manifest.list_blocks is not None
    return manifest, text.encode()


def filesystem(store: Store, tmp_path: Path, endpoint_url: str | None = None) -> DatamountFileSystem:
    options = (
        {} if endpoint_url is None else {"endpoint_url": endpoint_url, "key": S3_TEST_KEY, "secret": S3_TEST_SECRET}
    )
    return DatamountFileSystem(
        store=store.url, options=options, cache=str(tmp_path / "cache"), skip_instance_cache=True
    )


@ON_STORES
def test_a_long_list_reads_back_whole_by_range_and_in_order(
    store: Store, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    _, expected = upload_pairs(store, tmp_path)
    endpoint = request.getfixturevalue("s3_server").endpoint_url if store.local_path() is None else None
    fs = filesystem(store, tmp_path, endpoint)
    assert fs.cat_file(URL) == expected and fs.info(URL)["size"] == len(expected)
    draw = random.Random(7)
    for _ in range(40):
        start = draw.randrange(len(expected))
        end = min(len(expected), start + draw.choice([1, 100, 70_000, 3_000_000]))
        assert fs.cat_file(URL, start=start, end=end) == expected[start:end]
    starts = [0, len(expected) - 10, 1_000_000]
    assert fs.cat_ranges([URL] * 3, starts, [s + 10 for s in starts]) == [expected[s : s + 10] for s in starts]
    with fs.open(URL) as file:  # read in order, a piece at a time, and after a seek backwards
        assert b"".join(iter(lambda: file.read(65_536), b"")) == expected
        file.seek(123)
        assert file.read(50) == expected[123:173]
    fs.get(URL, str(tmp_path / "got.list"))
    assert (tmp_path / "got.list").read_bytes() == expected


def test_a_range_fetches_the_blocks_that_hold_it_and_a_reader_in_order_a_few_mib_at_a_time(
    s3_server: S3Server, s3_bucket: str, fault_proxy: FaultProxyFactory, tmp_path: Path
) -> None:
    direct = open_store(
        f"s3://{s3_bucket}/root", endpoint_url=s3_server.endpoint_url, key=S3_TEST_KEY, secret=S3_TEST_SECRET
    )
    manifest, expected = upload_pairs(direct, tmp_path)
    blocks = manifest.list_blocks
    assert blocks is not None
    largest = max(
        blocks.byte_range(b, len(expected))[1] - blocks.byte_range(b, len(expected))[0] for b in range(len(blocks))
    )
    proxy = fault_proxy(s3_server.endpoint_url, flavour="s3")
    fs = filesystem(direct, tmp_path, proxy.endpoint_url)
    fs.info(URL)  # the manifest

    def list_reads() -> list[int]:
        reads = [record for record in proxy.requests if "/lists/" in record.target and record.received > since]
        assert all(record.range is not None for record in reads), reads  # never the whole list
        return [record.answered or 0 for record in reads]

    since = time.monotonic()
    assert fs.cat_file(URL, start=2_000_000, end=2_000_100) == expected[2_000_000:2_000_100]
    assert len(list_reads()) == 1 and sum(list_reads()) <= 2 * largest
    since = time.monotonic()
    with fs.open(URL) as file:
        assert b"".join(iter(lambda: file.read(65_536), b"")) == expected
    reads = list_reads()
    # 4 MiB at a time; each run after the first starts with the block the one before ended in
    assert len(reads) == -(-len(expected) // (4 << 20)) and sum(reads) <= len(expected) + len(reads) * largest, reads


@ON_STORES
def test_a_damaged_block_is_an_eio_naming_the_file_and_the_rest_reads(
    store: Store, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    manifest, expected = upload_pairs(store, tmp_path)
    blocks = manifest.list_blocks
    assert blocks is not None
    start, end = blocks.byte_range(60, len(expected))
    data = bytearray(expected)
    data[start + 10] ^= 0x01
    store.write(layout.list_path(manifest), bytes(data))
    endpoint = request.getfixturevalue("s3_server").endpoint_url if store.local_path() is None else None
    fs = filesystem(store, tmp_path, endpoint)
    reads = [
        lambda: fs.cat_file(URL, start=start + 5, end=start + 20),
        lambda: fs.cat_ranges([URL], [start - 100], [end + 100], on_error="raise"),
        lambda: fs.open(URL).read(),
        lambda: fs.cat_file(URL),
    ]
    for read in reads:
        with pytest.raises(IntegrityError, match=re.escape("_/pairs@1/pairs.list") + ".*rows 61440 to 62463") as raised:
            read()
        assert isinstance(raised.value, OSError) and raised.value.errno == errno.EIO
    assert fs.cat_file(URL, start=0, end=start - 1) == expected[: start - 1]  # the blocks before it
    with fs.open(URL) as file:  # its read-ahead stops before the damaged block
        assert file.read(1000) == expected[:1000]
    assert fs.cat_file(URL, start=end, end=end + 1000) == expected[end : end + 1000]
