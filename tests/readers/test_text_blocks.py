"""A text version whose list is longer than a reader's head (1 MiB) is read a block of 1,024 lines at a time: every
row on every backend and in worker processes, row ``i`` with its block alone, each block checked."""

from __future__ import annotations

import gc
import itertools
import random
import time
from pathlib import Path

import pytest

from datamount.datasets import layout, upload
from datamount.datasets.list_blocks import LINES_PER_BLOCK
from datamount.datasets.manifest import Manifest
from datamount.datasets.rows.listed import BLOCKS_IN_FLIGHT, HEAD_BYTES
from datamount.readers import multiprocess_reader, reader
from datamount.storage import IntegrityError, Store, open_store
from tests.servers.fault_proxy import Action, Fault, FaultProxyFactory
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server
from tests.stores import STORE_BACKENDS

#: Rows of about 40 bytes: a list of about 1.6 MB, 40 blocks.
ROWS = 40 * LINES_PER_BLOCK - 17


def text_rows(count: int = ROWS) -> list[tuple[str, str]]:
    return [(f"source sentence {i} " + "w" * (i % 13), f"target {i}") for i in range(count)]


def upload_text(store: Store, tmp_path: Path, rows: list[tuple[str, str]], name: str = "pairs") -> Manifest:
    (tmp_path / "pairs.list").write_text("".join(f"{a}\t{b}\n" for a, b in rows), encoding="utf-8")
    manifest = upload(tmp_path / "pairs.list", name, store=store, kind="text").manifest
    assert manifest.list_size > HEAD_BYTES and manifest.list_blocks is not None
    assert len(manifest.list_blocks) == -(-len(rows) // LINES_PER_BLOCK)
    return manifest


@pytest.mark.parametrize("store", STORE_BACKENDS, indirect=True)
def test_every_row_in_order_shuffled_by_rank_and_by_index(store: Store, tmp_path: Path) -> None:
    rows = text_rows()
    upload_text(store, tmp_path, rows)
    samples = reader("pairs", store)
    assert list(samples()) == rows
    shuffled = [
        list(reader("pairs", store, shuffle=True, seed=5, rank=rank, world_size=2, remainder="uneven")())
        for rank in (0, 1)
    ]
    assert sorted(shuffled[0] + shuffled[1]) == sorted(rows) and shuffled[0] != rows[: len(shuffled[0])]
    for index in random.Random(1).sample(range(ROWS), 60):
        assert samples[index] == rows[index]
    assert (
        samples[-1] == rows[-1]
        and list(samples.rows(5 * LINES_PER_BLOCK - 2, 5 * LINES_PER_BLOCK + 3)) == rows[5118:5123]
    )


@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3, id="s3-moto")], indirect=True)
def test_worker_processes_read_their_blocks(store: Store, tmp_path: Path, method: str) -> None:
    rows = text_rows()
    upload_text(store, tmp_path, rows)
    halves = [
        reader("pairs", store, rank=rank, world_size=2, remainder="uneven", shuffle=True, seed=2) for rank in (0, 1)
    ]
    assert sorted(multiprocess_reader(halves, mp_context=method)()) == sorted(rows)


def test_a_row_and_a_first_sample_fetch_their_blocks_not_the_list(
    s3_server: S3Server, s3_bucket: str, fault_proxy: FaultProxyFactory, tmp_path: Path
) -> None:
    direct = open_store(
        f"s3://{s3_bucket}/root", endpoint_url=s3_server.endpoint_url, key=S3_TEST_KEY, secret=S3_TEST_SECRET
    )
    rows = text_rows()
    manifest = upload_text(direct, tmp_path, rows)
    proxy = fault_proxy(s3_server.endpoint_url, flavour="s3")
    store = open_store(
        f"s3://{s3_bucket}/root", endpoint_url=proxy.endpoint_url, key=S3_TEST_KEY, secret=S3_TEST_SECRET
    )
    blocks = manifest.list_blocks
    assert blocks is not None
    largest = max(end - start for start, end in map(blocks.byte_range, range(len(blocks)), [manifest.list_size] * 40))

    def list_reads() -> tuple[int, int]:
        reads = [record for record in proxy.requests if "/lists/" in record.target]
        assert all(record.range is not None for record in reads), reads  # never the whole list
        return len(reads), sum(record.answered or 0 for record in reads)

    samples = reader("pairs", store)
    assert samples[31_000] == rows[31_000] and samples[31_001] == rows[31_001]  # one block, read once
    assert list_reads()[0] == 1 and list_reads()[1] <= largest
    proxy.clear()
    pass_ = samples()
    assert next(pass_) == rows[0]
    pass_.close()
    count, fetched = list_reads()
    assert 1 <= count <= 9 and fetched <= 9 * largest < manifest.list_size // 4, (count, fetched)


def test_a_pass_closed_with_reads_in_flight_leaves_no_failure_to_log(
    s3_server: S3Server,
    s3_bucket: str,
    fault_proxy: FaultProxyFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A pass closed after its first sample leaves the blocks it read ahead in flight; when those requests then
    fail (here: their server goes away), nobody is waiting for them, and nothing is logged."""
    direct = open_store(
        f"s3://{s3_bucket}/root", endpoint_url=s3_server.endpoint_url, key=S3_TEST_KEY, secret=S3_TEST_SECRET
    )
    rows = text_rows()
    upload_text(direct, tmp_path, rows)
    proxy = fault_proxy(s3_server.endpoint_url, flavour="s3")
    store = open_store(
        f"s3://{s3_bucket}/root", endpoint_url=proxy.endpoint_url, key=S3_TEST_KEY, secret=S3_TEST_SECRET
    )
    samples = reader("pairs", store)
    # The pass's first window (blocks 0-7, in whatever order they reach the proxy) comes; what it reads next is held.
    proxy.inject(Fault.stall(), containing="/lists/", skip=BLOCKS_IN_FLIGHT)
    pass_ = samples()
    assert list(itertools.islice(pass_, LINES_PER_BLOCK + 1)) == rows[: LINES_PER_BLOCK + 1]  # block 8 is asked for
    deadline = time.monotonic() + 10
    while proxy.count(Action.STALL) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    pass_.close()
    proxy.close()  # the held request fails, its caller gone
    time.sleep(1)
    gc.collect()
    assert proxy.count(Action.STALL) >= 1
    assert not [record for record in caplog.records if "never retrieved" in record.getMessage()]


@pytest.mark.parametrize("list_bytes", ["blocks", "whole"])
def test_a_damaged_list_is_an_integrity_error_naming_the_rows(
    local_store: Store, tmp_path: Path, list_bytes: str
) -> None:
    """A flipped byte in block 7: reading its rows (a pass, a shuffled pass, the row) raises, naming the rows; a list
    no longer than the head is read whole and checked block by block the same way."""
    rows = text_rows() if list_bytes == "blocks" else text_rows(8 * LINES_PER_BLOCK)
    manifest = upload_text(local_store, tmp_path, rows) if list_bytes == "blocks" else None
    if manifest is None:
        (tmp_path / "pairs.list").write_text("".join(f"{a}\t{b}\n" for a, b in rows), encoding="utf-8")
        manifest = upload(tmp_path / "pairs.list", "pairs", store=local_store, kind="text").manifest
        assert manifest.list_size <= HEAD_BYTES and manifest.list_blocks is not None
    path = layout.list_path(manifest)
    data = bytearray(local_store.read(path))
    start, _ = manifest.list_blocks.byte_range(7, manifest.list_size)
    data[start + 5] ^= 0x20
    local_store.write(path, bytes(data))
    message = r"rows 7168 to 8191 .* do not match their xxh3-64: the store holds a damaged copy of the list"
    samples = reader("pairs", local_store)
    with pytest.raises(IntegrityError, match=message):
        list(samples())
    with pytest.raises(IntegrityError, match=message):
        list(reader("pairs", local_store, shuffle=True, seed=1)())
    with pytest.raises(IntegrityError, match=message):
        reader("pairs", local_store)[7500]
    if list_bytes == "blocks":  # the blocks before it read as they are
        assert samples[7000] == rows[7000] and list(samples.rows(0, 100)) == rows[:100]
