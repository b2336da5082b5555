"""SeaweedFS with a volume server lost and back: a master, two volume servers (replication ``001``: each volume on
both), a filer and S3 inside a namespace behind a 1 Gb/s link. A volume server SIGKILLed in the middle of a packed
and of an unpacked pass: the pass completes with every byte checked against the source; the server comes back,
rejoins, and a pass reads everything again."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from datamount.datasets import pack
from datamount.datasets.upload import upload
from datamount.readers import reader
from datamount.storage import Store, open_store
from tests.datacenter.conftest import FaultRecord, LinkBytes, SourceImages, as_rows, counts, timed_pass
from tests.servers._launch import REQUIRE_SERVERS_ENV, ServerStartError, cannot_run
from tests.servers.netns import CappedHost
from tests.servers.seaweedfs import SeaweedCluster, start_seaweed_cluster, why_seaweedfs_cannot_run

pytestmark = [pytest.mark.datacenter, pytest.mark.timeout(300)]

#: The volume server each test kills (the other holds a copy of every volume).
VICTIM = 0
#: Samples of a pass read before the kill.
KILL_AT = 40
REJOIN_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def weed(capped: CappedHost) -> Iterator[SeaweedCluster]:
    reason = why_seaweedfs_cannot_run()
    if reason is not None:
        cannot_run("SeaweedFS", f"{reason} (${REQUIRE_SERVERS_ENV} needs it: it is in the test extra)")
    try:
        cluster = start_seaweed_cluster(capped)
    except ServerStartError as exc:
        cannot_run("SeaweedFS", str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def store(weed: SeaweedCluster) -> Store:
    import boto3

    options = {"endpoint_url": weed.endpoint_url, "key": "datacenter", "secret": "datacenter-secret"}
    keys = {"aws_access_key_id": options["key"], "aws_secret_access_key": options["secret"]}
    client = boto3.client("s3", endpoint_url=weed.endpoint_url, region_name="us-east-1", **keys)
    client.create_bucket(Bucket="datacenter")
    return open_store("s3://datacenter/root", **options)


@pytest.fixture(scope="module")
def images(store: Store, source_images: SourceImages) -> SourceImages:
    upload(source_images.list_file, "images", store=store)
    pack("images", store=store, shard_bytes=8 << 20)
    return source_images


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "unpacked"])
def test_a_pass_survives_a_lost_volume_server_which_comes_back(
    weed: SeaweedCluster, store: Store, images: SourceImages, capped: CappedHost, packed: bool
) -> None:
    link = LinkBytes(capped.link.device_a)
    samples = reader("images", store, use_shards=packed, max_bytes=16 << 20)  # unpacked: most requests after the kill
    timed_pass(samples)
    before, link_before = counts(store), link.read()[0]
    clean = timed_pass(samples)
    clean_counts = {k: v - before.get(k, 0) for k, v in counts(store).items()}
    clean_bytes = link.read()[0] - link_before

    before, link_before = counts(store), link.read()[0]
    faulty = timed_pass(samples, fault_after=KILL_AT, fault=lambda: weed.kill_volume(VICTIM))
    faulty_counts = {k: v - before.get(k, 0) for k, v in counts(store).items()}
    faulty_bytes = link.read()[0] - link_before
    assert as_rows(faulty.rows) == images.rows

    started = time.monotonic()
    weed.start_volume(VICTIM)
    weed.wait_volume_servers(2, REJOIN_TIMEOUT)
    rejoined = time.monotonic() - started
    assert as_rows(timed_pass(samples).rows) == images.rows
    FaultRecord(
        "seaweedfs 2 volume servers, replication 001",
        f"{'packed' if packed else 'unpacked'} pass",
        "weed volume (SIGKILL)",
        f"after {KILL_AT} of {len(images.rows)} samples",
        "completed",
        stall_s=faulty.stall_after_fault(),
        recovery_s=rejoined,
        retries=faulty_counts.get("retries", 0),
        requests_repeated=faulty_counts.get("requests", 0) - clean_counts.get("requests", 0),
        bytes_repeated=faulty_bytes - clean_bytes,
        verified=f"{len(images.rows)} samples, {sum(len(r[0]) for r in images.rows)} bytes",
        extra={"clean_pass_s": clean.seconds(), "pass_s": faulty.seconds()},
    ).save()
