"""Ceph with replicas that die: one monitor, three OSDs (pools of size 3, min size 2) and RGW inside a namespace
behind a 1 Gb/s link. An OSD is SIGKILLed in the middle of a packed pass, an unpacked pass, an upload and a copy:
each completes with every byte checked against the source, then the OSD comes back and the cluster recovers. RGW
killed mid-pass fails the reader with the documented error within its retry budget, and the pass resumes from its
state once RGW is back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from datamount.datasets import catalog, pack
from datamount.datasets.copying import copy_version
from datamount.datasets.upload import upload
from datamount.readers import reader
from datamount.readers.dataset import DatasetReader
from datamount.storage import Store, open_store
from datamount.storage.errors import StoreUnreachableError
from tests.datacenter.conftest import (
    FaultRecord,
    LinkBytes,
    SourceImages,
    as_rows,
    counts,
    timed_pass,
)
from tests.servers._launch import cannot_run
from tests.servers.ceph import CephServer, start_ceph_server, why_ceph_cannot_run
from tests.servers.netns import CappedHost

pytestmark = [pytest.mark.datacenter, pytest.mark.ceph, pytest.mark.timeout(300)]

#: The OSD each test kills (any of the three holds a copy of everything).
VICTIM = 1
#: Samples of a pass read before the kill: early, so that most of the pass's requests are still to come.
KILL_AT = 40
#: Bytes an unpacked pass reads ahead (``max_bytes``, which bounds object reads, not shards): 16 MB, so that most of
#: its requests are sent after the kill (the default 256 MB window holds this whole 44 MB dataset).
READ_AHEAD = 16 << 20
#: Seconds the cluster gets to bring a returned OSD up to date (measured: ~10 s for ~150 MB).
RECOVERY_TIMEOUT = 120.0
#: A generous bound on a reader's failure once RGW is gone: with the default retries (2) a refused connection fails
#: after ~0.3 s of backoff; this only says that it does not hang.
RGW_LOSS_BOUND = 60.0


@pytest.fixture(scope="module")
def ceph(capped: CappedHost) -> Iterator[CephServer]:
    reason = why_ceph_cannot_run()
    if reason is not None:
        cannot_run("Ceph RGW", reason)
    server = start_ceph_server(osds=3, host=capped)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def store(ceph: CephServer) -> Store:
    ceph.create_bucket("datacenter")
    return open_store("s3://datacenter/root", endpoint_url=ceph.endpoint_url, key=ceph.key, secret=ceph.secret)


@pytest.fixture(scope="module")
def images(store: Store, source_images: SourceImages) -> SourceImages:
    """The source images uploaded (objects) and packed (shards of ~8 MB) on RGW."""
    upload(source_images.list_file, "images", store=store)
    pack("images", store=store, shard_bytes=8 << 20)
    return source_images


def kill_osd(ceph: CephServer) -> None:
    ceph.kill(f"ceph-osd.{VICTIM}")


def bring_back_osd(ceph: CephServer) -> float:
    """Start the killed OSD again; seconds until every placement group is ``active+clean``."""
    started = time.monotonic()
    ceph.start_osd(VICTIM)
    deadline = started + RECOVERY_TIMEOUT
    while not ceph.clean():
        if time.monotonic() > deadline:
            pytest.fail(f"the cluster did not recover within {RECOVERY_TIMEOUT:g} s: {ceph.pg_states()}")
        time.sleep(0.5)
    return time.monotonic() - started


def wait_osd_down(ceph: CephServer) -> float:
    """Seconds until the monitor counts only two OSDs up."""
    started = time.monotonic()
    while ceph.osds_up() != 2:
        if time.monotonic() - started > RECOVERY_TIMEOUT:
            pytest.fail("the monitor never marked the killed OSD down")
        time.sleep(0.2)
    return time.monotonic() - started


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "unpacked"])
def test_a_pass_survives_a_killed_osd_and_the_osd_recovers(
    ceph: CephServer, store: Store, images: SourceImages, capped: CappedHost, packed: bool
) -> None:
    link = LinkBytes(capped.link.device_a)
    samples = reader("images", store, use_shards=packed, max_bytes=READ_AHEAD)  # max_bytes: unpacked only
    timed_pass(samples)  # the manifest and the shards' footers are read once per reader: not in the comparison
    before, link_before = counts(store), link.read()[0]
    clean = timed_pass(samples)
    clean_counts = {k: v - before.get(k, 0) for k, v in counts(store).items()}
    clean_bytes = link.read()[0] - link_before
    assert as_rows(clean.rows) == images.rows

    before, link_before = counts(store), link.read()[0]
    faulty = timed_pass(samples, fault_after=KILL_AT, fault=lambda: kill_osd(ceph))
    faulty_counts = {k: v - before.get(k, 0) for k, v in counts(store).items()}
    faulty_bytes = link.read()[0] - link_before
    assert as_rows(faulty.rows) == images.rows  # every sample once, in order, each byte as uploaded
    marked_down = wait_osd_down(ceph)

    recovery = bring_back_osd(ceph)
    assert as_rows(timed_pass(samples).rows) == images.rows
    FaultRecord(
        "ceph 3 OSDs",
        f"{'packed' if packed else 'unpacked'} pass",
        "ceph-osd (SIGKILL)",
        f"after {KILL_AT} of {len(images.rows)} samples",
        "completed",
        stall_s=faulty.stall_after_fault(),
        recovery_s=recovery,
        retries=faulty_counts.get("retries", 0),
        requests_repeated=faulty_counts.get("requests", 0) - clean_counts.get("requests", 0),
        bytes_repeated=faulty_bytes - clean_bytes,
        verified=f"{len(images.rows)} samples, {sum(len(r[0]) for r in images.rows)} bytes",
        extra={"osd_marked_down_s": marked_down, "clean_pass_s": clean.seconds(), "pass_s": faulty.seconds()},
    ).save()


class KillAfter:
    """Progress that runs ``fault`` once ``items`` items of phase ``phase`` are done (from the thread reporting)."""

    def __init__(self, phase: str, items: int, fault: object) -> None:
        self.phase, self.items, self.fault = phase, items, fault
        self.current = ""
        self.done = 0
        self.fired_at: float | None = None
        self._lock = threading.Lock()

    def start(self, phase: str, *, items: int, size: int) -> None:
        self.current = phase

    def advance(self, *, items: int = 1, size: int = 0) -> None:
        with self._lock:
            if self.current != self.phase or self.fired_at is not None:
                return
            self.done += items
            if self.done >= self.items:
                self.fault()  # type: ignore[operator]
                self.fired_at = time.monotonic()

    def finish(self) -> None:
        pass


@pytest.mark.parametrize("operation", ["upload", "cp"])
def test_an_upload_and_a_copy_survive_a_killed_osd(
    ceph: CephServer, store: Store, source_images: SourceImages, tmp_path: Path, operation: str
) -> None:
    name = f"{operation}-under-fault"
    phase = "upload" if operation == "upload" else "copy"
    kill = KillAfter(phase, len(source_images.rows) // 2, lambda: kill_osd(ceph))
    before = counts(store)
    started = time.monotonic()
    if operation == "upload":
        upload(source_images.list_file, name, store=store, progress=kill)
    else:
        local = open_store(str(tmp_path / "local"))
        upload(source_images.list_file, name, store=local)
        started = time.monotonic()
        copy_version(name, source=local, target=store, progress=kill)
    took = time.monotonic() - started
    done = {k: v - before.get(k, 0) for k, v in counts(store).items()}
    assert kill.fired_at is not None, "the OSD was never killed: the operation reported no progress"
    assert catalog.latest(store, name) is not None
    assert as_rows(list(reader(name, store, use_shards=False)())) == source_images.rows
    wait_osd_down(ceph)
    recovery = bring_back_osd(ceph)
    FaultRecord(
        "ceph 3 OSDs",
        operation,
        "ceph-osd (SIGKILL)",
        "after half the files",
        "completed, version committed",
        stall_s=took,
        recovery_s=recovery,
        retries=done.get("retries", 0),
        verified=f"{len(source_images.rows)} samples read back",
        extra={"seconds": took},
    ).save()


def test_a_killed_rgw_fails_the_pass_within_its_retry_budget_and_the_pass_resumes(
    ceph: CephServer, store: Store, images: SourceImages
) -> None:
    samples = reader("images", store, use_shards=False, max_bytes=READ_AHEAD)
    got: list[tuple[bytes, str]] = []
    killed_at = 0.0
    with pytest.raises(StoreUnreachableError) as failure:
        for row in samples():
            got.append((bytes(row[0]), str(row[1])))
            if len(got) == KILL_AT:
                ceph.kill("radosgw")
                killed_at = time.monotonic()
    failed_after = time.monotonic() - killed_at
    assert failed_after < RGW_LOSS_BOUND
    assert ceph.endpoint_url.split("//")[1] in str(failure.value)
    state = samples.state_dict()
    assert state["position"] == len(got)

    ceph.start_rgw()
    restarted = time.monotonic()
    while not ceph.answers():
        time.sleep(0.2)
    back_after = time.monotonic() - restarted
    resumed = DatasetReader.from_state_dict(state, store, use_shards=False, max_bytes=READ_AHEAD)
    rest = [(bytes(row[0]), str(row[1])) for row in resumed()]
    assert got + rest == images.rows
    FaultRecord(
        "ceph 3 OSDs",
        "unpacked pass",
        "radosgw (SIGKILL)",
        f"after {KILL_AT} of {len(images.rows)} samples (16 MB read ahead)",
        f"{type(failure.value).__name__} after {failed_after:.1f} s; resumed from its state",
        stall_s=failed_after,
        recovery_s=back_after,
        verified=f"{len(got)} + {len(rest)} samples, none twice",
        extra={"message": str(failure.value)[:300]},
    ).save()
