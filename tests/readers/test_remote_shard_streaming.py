"""A pass over a packed version on a remote store streams its shards row group by row group: the first sample comes
before the shard has, and every byte still arrives checked."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

from datamount.datasets import layout, pack, upload
from datamount.datasets.manifest import ShardEntry
from datamount.datasets.rows import shards
from datamount.datasets.rows.shards import SparseFile
from datamount.readers import reader
from datamount.storage import DatamountError, IntegrityError, Store, open_store
from tests.generated import MakeImageList, image_rows
from tests.servers.fault_proxy import Fault, FaultProxy, FaultProxyFactory, RequestRecord
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server

pytestmark = pytest.mark.s3


def bytes_asked(ranges: list[str | None]) -> int:
    """The bytes ``Range: bytes=START-END`` headers asked for (END included)."""
    total = 0
    for header in ranges:
        assert header is not None and header.startswith("bytes="), f"a GET of the whole shard ({header})"
        start, end = header.removeprefix("bytes=").split("-")
        total += int(end) - int(start) + 1
    return total


@dataclass
class Packed:
    """A one-shard version of 30 row groups on moto: its list, a store through a proxy and the proxy, a store that
    talks to moto directly, and the shard's path."""

    list_file: Path
    far: Store
    proxy: FaultProxy
    direct: Store
    shard: str


def packed_behind_a_proxy(
    list_file: Path, s3_server: S3Server, url: str, fault_proxy: FaultProxyFactory, **pack_options: int
) -> tuple[Packed, ShardEntry]:
    """``list_file`` uploaded to ``url`` on moto and packed into one shard, and a store reaching it through a proxy."""
    keys = {"key": S3_TEST_KEY, "secret": S3_TEST_SECRET}
    direct = open_store(url, endpoint_url=s3_server.endpoint_url, **keys)
    upload(list_file, "d", store=direct)
    [shard] = pack("d", store=direct, **pack_options).shards
    proxy = fault_proxy(s3_server.endpoint_url)
    far = open_store(url, endpoint_url=proxy.endpoint_url, **keys)
    return Packed(list_file, far, proxy, direct, layout.shard_path("d", shard)), shard


@pytest.fixture
def packed(
    s3_server: S3Server, s3_bucket: str, fault_proxy: FaultProxyFactory, make_image_list: MakeImageList
) -> Packed:
    list_file = make_image_list(60, size=20_000)
    found, shard = packed_behind_a_proxy(
        list_file, s3_server, f"s3://{s3_bucket}/root", fault_proxy, row_group_bytes=40_000
    )
    assert len(shard.row_groups) == 30
    return found


def test_the_first_sample_comes_before_the_shard_has(packed: Packed) -> None:
    size = packed.direct.info(packed.shard).size
    samples = reader("d", packed.far)()
    first = next(samples)
    asked = [r.range for r in packed.proxy.requests if r.method == "GET" and packed.shard in unquote(r.target)]
    assert bytes_asked(asked) < size / 2  # the footer and the first row groups, read ahead
    assert [first, *samples] == image_rows(packed.list_file)


def test_a_flipped_byte_in_a_streamed_shard_is_an_integrity_error(packed: Packed) -> None:
    data = bytearray(packed.direct.read(packed.shard))
    data[len(data) // 3] ^= 0x01  # inside a data page of a middle row group
    packed.direct.write(packed.shard, bytes(data))
    with pytest.raises(IntegrityError, match=r"row group \d+ of shard .* is damaged"):
        list(reader("d", packed.far)())


def test_a_fetched_row_group_reaches_arrow_as_a_view_of_the_fetched_buffer() -> None:
    fetched = bytearray(b"0123456789")
    sparse = SparseFile(100, {40: fetched}, name="s3://bucket/shard")
    sparse.seek(42)
    chunk = sparse.read(5)
    assert bytes(chunk) == b"23456"
    fetched[3] = ord("X")  # no copy: the view shows the fetched buffer itself
    assert bytes(chunk) == b"2X456"
    sparse.seek(0)
    with pytest.raises(OSError, match=r"s3://bucket/shard: bytes 0\.\.4 were not fetched"):
        sparse.read(4)


def test_the_footer_is_fetched_once_though_several_row_groups_start_at_once(packed: Packed) -> None:
    size = packed.direct.info(packed.shard).size
    assert len(list(reader("d", packed.far)())) == 60
    tails = [
        r.range
        for r in packed.proxy.requests
        if r.method == "GET" and packed.shard in unquote(r.target) and str(r.range).endswith(f"-{size - 1}")
    ]
    assert len(tails) == 1, tails  # the shard's last 64 KiB hold the footer and its length


def test_a_footer_larger_than_the_first_read_is_completed_by_a_second(
    packed: Packed, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shards, "FOOTER_GUESS", 100)  # less than this shard's footer
    assert list(reader("d", packed.far)()) == image_rows(packed.list_file)
    size = packed.direct.info(packed.shard).size
    tails = [r.range for r in packed.proxy.requests if r.method == "GET" and str(r.range).endswith(f"-{size - 1}")]
    assert tails == [f"bytes={size - 100}-{size - 1}"]
    footer_length = int.from_bytes(packed.direct.read_range(packed.shard, size - 8, size - 4), "little")
    rest = f"bytes={size - 8 - footer_length}-{size - 101}"
    assert [r.range for r in packed.proxy.requests].count(rest) == 1


def test_a_pass_reads_its_first_row_group_alone_then_several_at_once(packed: Packed) -> None:
    """The first row group's GET has the whole bandwidth (the first sample does not wait for a window's share of
    it); the next ones go out together once it has come."""
    packed.proxy.inject(Fault.delay(0.3), methods={"GET"}, containing=packed.shard)
    assert list(reader("d", packed.far)()) == image_rows(packed.list_file)
    size = packed.direct.info(packed.shard).size
    groups = [
        r.received
        for r in packed.proxy.requests
        if r.method == "GET" and packed.shard in unquote(r.target) and not str(r.range).endswith(f"-{size - 1}")
    ]
    assert len(groups) == 30
    assert groups[1] - groups[0] >= 0.3, "the second row group was asked for before the first had come"
    assert groups[-1] - groups[1] < 0.3 * (len(groups) - 1) / 2, "the following row groups were read one at a time"


def test_a_pass_starts_its_read_ahead_threads_before_its_first_row_group_is_asked_for(packed: Packed) -> None:
    """Started later, once the first row group has come, each thread's start waits for the GIL among busy threads:
    up to a switch interval (5 ms) each, between the first row group's arrival and its first sample."""
    packed.proxy.inject(Fault.delay(0.3), methods={"GET"}, containing=packed.shard)
    running_at_first_get: list[int] = []

    def count_when_the_shard_is_asked_for() -> None:
        deadline = time.monotonic() + 10
        while not _shard_gets(packed) and time.monotonic() < deadline:
            time.sleep(0.005)
        running_at_first_get.append(sum(t.name.startswith("datamount-span") for t in threading.enumerate()))

    watcher = threading.Thread(target=count_when_the_shard_is_asked_for)
    watcher.start()
    samples = reader("d", packed.far)()
    first = next(samples)
    watcher.join()
    assert running_at_first_get == [shards.PIECES_AHEAD_REMOTE]
    assert [first, *samples] == image_rows(packed.list_file)


def _shard_gets(packed: Packed) -> list[RequestRecord]:
    return [r for r in packed.proxy.requests if r.method == "GET" and packed.shard in unquote(r.target)]


def test_a_shards_first_row_group_is_asked_for_with_its_footer(packed: Packed) -> None:
    """Both at once, each GET delayed 0.3 s: the first sample comes one round trip sooner, and the first row group
    is not asked for again."""
    packed.proxy.inject(Fault.delay(0.3), methods={"GET"}, containing=packed.shard)
    size = packed.direct.info(packed.shard).size
    samples = reader("d", packed.far)()
    first = next(samples)
    tail, head = sorted(_shard_gets(packed)[:2], key=lambda r: not str(r.range).endswith(f"-{size - 1}"))
    assert str(head.range).startswith("bytes=4-")
    assert abs(head.received - tail.received) < 0.15, "the first row group waited for the footer"
    assert [first, *samples] == image_rows(packed.list_file)
    assert sum(str(r.range).startswith("bytes=4-") for r in _shard_gets(packed)) == 1


def test_a_first_row_group_longer_than_its_guess_is_completed_by_one_more_read(
    packed: Packed, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shards, "FIRST_GROUP_MARGIN", 0.01)
    monkeypatch.setattr(shards, "FOOTER_GUESS", 4096)  # also the head's fixed margin
    assert list(reader("d", packed.far)()) == image_rows(packed.list_file)
    [head] = [r for r in _shard_gets(packed) if str(r.range).startswith("bytes=4-")]
    head_end = int(str(head.range).rsplit("-", 1)[1])
    assert [r.range for r in _shard_gets(packed) if str(r.range).startswith(f"bytes={head_end + 1}-")]


def test_a_small_shard_is_read_whole_in_one_request(
    s3_server: S3Server, s3_bucket: str, fault_proxy: FaultProxyFactory, make_image_list: MakeImageList
) -> None:
    list_file = make_image_list(5, size=2_000)
    small, shard = packed_behind_a_proxy(list_file, s3_server, f"s3://{s3_bucket}/small", fault_proxy)
    assert list(reader("d", small.far)()) == image_rows(list_file)
    assert [r.range for r in small.proxy.requests if r.method == "GET" and small.shard in unquote(r.target)] == [
        f"bytes=0-{shard.size - 1}"
    ]


def test_a_manifest_and_its_pack_record_are_asked_for_at_once(packed: Packed) -> None:
    packed.proxy.inject(Fault.delay(0.3), methods={"GET"}, containing="/versions/1.")
    assert list(reader("d", packed.far)()) == image_rows(packed.list_file)
    asked = {
        unquote(r.target).rsplit("/", 1)[1]: r.received for r in packed.proxy.requests if "/versions/1." in r.target
    }
    assert set(asked) == {"1.json", "1.pack.json"}
    assert abs(asked["1.json"] - asked["1.pack.json"]) < 0.15, "the pack record waited for the manifest"


def test_a_pinned_version_is_found_in_one_round_trip_without_listing_the_versions(packed: Packed) -> None:
    """``reader("d@1")``: the manifest, the pack record and the removal mark are asked for at once, and the versions
    folder is not listed (a listing, then the manifest, was two round trips before the shard)."""
    packed.proxy.inject(Fault.delay(0.3), methods={"GET", "HEAD"}, containing="/versions")
    before = len(packed.proxy.requests)
    samples = reader("d@1", packed.far)
    asked = [r for r in packed.proxy.requests[before:] if "/versions" in unquote(r.target)]
    assert not [r for r in asked if "list-type" in r.target], "the versions folder was listed"
    names = {unquote(r.target).rsplit("/", 1)[1].split("?")[0]: r.received for r in asked}
    assert set(names) == {"1.json", "1.pack.json", "1.removed"}, names
    assert max(names.values()) - min(names.values()) < 0.15, "one waited for another"
    assert samples.manifest.shards and list(samples()) == image_rows(packed.list_file)


def test_a_pinned_version_marked_removed_is_not_read(packed: Packed) -> None:
    """A removal marks a version before it deletes its manifest: a pinned reader that finds the mark is told the
    version is gone, as the listing says, even while the manifest is still there."""
    packed.direct.create(layout.removed_path("d", 1), b"2026-01-01T00:00:00+00:00")
    with pytest.raises(DatamountError, match=r"d@1 was removed from .* on 2026-01-01T00:00:00"):
        reader("d@1", packed.far)


def test_a_reader_opened_by_url_checks_the_store_while_it_finds_the_version(
    packed: Packed, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opened here (from a URL, as a job's script does), the store's check and the version's look-up go together."""
    for name, value in {
        "AWS_ENDPOINT_URL": packed.proxy.endpoint_url,
        "AWS_ACCESS_KEY_ID": S3_TEST_KEY,
        "AWS_SECRET_ACCESS_KEY": S3_TEST_SECRET,
    }.items():
        monkeypatch.setenv(name, value)
    packed.proxy.inject(Fault.delay(0.3), methods={"GET"})
    before = len(packed.proxy.requests)
    samples = reader("d", f"s3://{s3_bucket}/root")
    first, second = packed.proxy.requests[before : before + 2]
    listed = {"versions" if "versions/" in unquote(r.target) else "check": r.received for r in (first, second)}
    assert set(listed) == {"check", "versions"}
    assert abs(listed["check"] - listed["versions"]) < 0.15, "the version was looked up only after the check"
    assert list(samples()) == image_rows(packed.list_file)


def test_a_reader_opened_by_url_on_a_missing_bucket_says_what_opening_it_says(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        "AWS_ENDPOINT_URL": s3_server.endpoint_url,
        "AWS_ACCESS_KEY_ID": S3_TEST_KEY,
        "AWS_SECRET_ACCESS_KEY": S3_TEST_SECRET,
    }.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(DatamountError) as opening:
        open_store("s3://no-such-bucket-here/root")
    with pytest.raises(type(opening.value)) as reading:
        reader("d", "s3://no-such-bucket-here/root")
    assert str(reading.value) == str(opening.value)


#: A script that takes a remote pass's first sample and exits with the rest of the pass still being fetched.
LEAVES_A_PASS_UNFINISHED = """
import sys
from datamount.readers import reader
samples = reader("d", sys.argv[1])()
next(samples)
print("took one")
"""


def test_a_script_that_leaves_a_remote_pass_unfinished_exits_cleanly(
    s3_server: S3Server, s3_bucket: str, make_image_list: MakeImageList
) -> None:
    """Exiting while a pass's row groups are being fetched and decoded ends the process normally: before, Arrow's
    pool threads could drop the fetched bytes after the interpreter had begun to exit, and ~40% of such runs were
    aborted ("terminate called without an active exception", exit code -6)."""
    url = f"s3://{s3_bucket}/root"
    store = open_store(url, endpoint_url=s3_server.endpoint_url, key=S3_TEST_KEY, secret=S3_TEST_SECRET)
    upload(make_image_list(240, size=50_000), "d", store=store)
    pack("d", store=store, row_group_bytes=400_000)
    environment = {
        **os.environ,
        "AWS_ENDPOINT_URL": s3_server.endpoint_url,
        "AWS_ACCESS_KEY_ID": S3_TEST_KEY,
        "AWS_SECRET_ACCESS_KEY": S3_TEST_SECRET,
    }
    for _ in range(8):
        done = subprocess.run(
            [sys.executable, "-c", LEAVES_A_PASS_UNFINISHED, url],
            env=environment,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert (done.returncode, done.stdout, done.stderr) == (0, "took one\n", "")
