"""Network and server faults between datamount and real S3 and GCS servers, injected by a proxy on loopback.

Under a transient fault (one reset, one 5xx, one answer cut short) reads and uploads complete with the exact bytes;
under a persistent one they fail with a clear error naming the object, within a bounded time (the tests' timeouts),
and an upload commits nothing, then resumes once the fault is gone.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datamount.datasets import catalog, layout, verify
from datamount.datasets.upload import upload
from datamount.readers.dataset import reader
from datamount.storage import (
    DatamountError,
    Store,
    StoreConfigError,
    StoreIOError,
    StoreUnreachableError,
    open_store,
)
from tests.generated import MakeImageList, PackedImages, SharedDatasets, image_rows
from tests.servers.fault_proxy import Action, Fault, FaultProxy, FaultProxyFactory
from tests.servers.gcs import PROJECT as GCS_PROJECT
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server

#: Options that keep persistent faults short: one new attempt, one second of silence at most.
QUICK = {"retries": 1, "read_timeout": 1, "connect_timeout": 1}

RESET_BEFORE = pytest.param(Fault.reset_before(), id="reset-before")
RESET_AFTER = pytest.param(Fault.reset_after(), id="reset-after")
STATUS_500 = pytest.param(Fault.status(500), id="500")
STATUS_503 = pytest.param(Fault.status(503), id="503-slowdown")
CUT = pytest.param(Fault.cut(1000), id="cut")
#: Shard tests also read 8-byte Parquet tails: cut those too.
CUT_EARLY = pytest.param(Fault.cut(4), id="cut")
#: A stall lasts the read timeout of every attempt, and GCS's backoff between them: 3 to 8 s.
STALL = pytest.param(Fault.stall(), id="stall", marks=pytest.mark.slow)

#: The error each persistent fault ends in.
EXPECTED_ERROR: dict[Action, type[DatamountError]] = {
    Action.RESET_BEFORE: StoreUnreachableError,
    Action.RESET_AFTER: StoreUnreachableError,
    Action.STATUS: StoreIOError,
    Action.CUT: StoreIOError,
    Action.STALL: StoreUnreachableError,
}


@dataclass
class ProxiedBackend:
    """A real storage server behind a fault proxy, and how to open stores on it."""

    url: str
    proxy: FaultProxy
    options: dict[str, Any]
    upstream_url: str
    #: The HTTP method that stores an object (S3: PUT; GCS: POST).
    write_method: str

    def open(self, **options: Any) -> Store:
        """A store whose requests go through the proxy."""
        return open_store(self.url, endpoint_url=self.proxy.endpoint_url, **self.options, **options)

    def open_direct(self) -> Store:
        """A store that talks to the server itself: what is really stored, whatever the proxy does."""
        return open_store(self.url, endpoint_url=self.upstream_url, **self.options)


def _s3_backend(
    request: pytest.FixtureRequest, fault_proxy: FaultProxyFactory, *, shared: bool, client: str = "obstore"
) -> ProxiedBackend:
    """The test's own empty bucket on moto or, when ``shared``, the session's shared store, behind a proxy."""
    if shared:
        server: S3Server = request.getfixturevalue("s3_shared_server")
        url = request.getfixturevalue("s3_shared_store").url
    else:
        server = request.getfixturevalue("s3_server")
        url = f"s3://{request.getfixturevalue('s3_bucket')}/root"
    return ProxiedBackend(
        url=url,
        proxy=fault_proxy(server.endpoint_url, flavour="s3"),
        options={"key": S3_TEST_KEY, "secret": S3_TEST_SECRET, "client": client},
        upstream_url=server.endpoint_url,
        write_method="PUT",
    )


def _s3fs_backend(request: pytest.FixtureRequest, fault_proxy: FaultProxyFactory, *, shared: bool) -> ProxiedBackend:
    """As :func:`_s3_backend`, through s3fs."""
    return _s3_backend(request, fault_proxy, shared=shared, client="s3fs")


def _gcs_backend(request: pytest.FixtureRequest, fault_proxy: FaultProxyFactory, *, shared: bool) -> ProxiedBackend:
    """A fresh bucket on the emulator or, when ``shared``, the session's shared store, behind a proxy."""
    server = request.getfixturevalue("gcs_server")
    if shared:
        url = request.getfixturevalue("gcs_shared_store").url
    else:
        url = f"gs://{request.getfixturevalue('gcs_bucket')}/root"
    return ProxiedBackend(
        url=url,
        proxy=fault_proxy(server.endpoint_url, flavour="gcs"),
        options={"token": "anon", "project": GCS_PROJECT},
        upstream_url=server.endpoint_url,
        write_method="POST",
    )


BACKENDS = [
    pytest.param(_s3_backend, id="s3-moto", marks=pytest.mark.s3),
    pytest.param(_s3fs_backend, id="s3fs-moto", marks=pytest.mark.s3),
    pytest.param(_gcs_backend, id="gcs-emulator", marks=pytest.mark.gcs),
]
#: The shard tests on GCS wait out gcsfs's backoff (1, 2, 4 s...) after a fault: most take 2.5 to 4 s.
SHARED_BACKENDS = [
    pytest.param(_s3_backend, id="s3-moto", marks=pytest.mark.s3),
    pytest.param(_s3fs_backend, id="s3fs-moto", marks=pytest.mark.s3),
    pytest.param(_s3fs_backend, id="s3fs-moto", marks=pytest.mark.s3),
    pytest.param(_gcs_backend, id="gcs-emulator", marks=[pytest.mark.gcs, pytest.mark.slow]),
]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, fault_proxy: FaultProxyFactory) -> ProxiedBackend:
    """An empty bucket on each server, behind a proxy that passes everything until told otherwise."""
    make: Callable[..., ProxiedBackend] = request.param
    return make(request, fault_proxy, shared=False)


@pytest.fixture(params=SHARED_BACKENDS)
def shared_backend(request: pytest.FixtureRequest, fault_proxy: FaultProxyFactory) -> ProxiedBackend:
    """The session's shared store on each server (datasets that tests only read), behind a proxy of the test's
    own."""
    make: Callable[..., ProxiedBackend] = request.param
    return make(request, fault_proxy, shared=True)


@pytest.fixture
def s3_backend(request: pytest.FixtureRequest, fault_proxy: FaultProxyFactory) -> ProxiedBackend:
    return _s3_backend(request, fault_proxy, shared=False)


@pytest.fixture
def quick_s3_store(s3_backend: ProxiedBackend) -> Store:
    return s3_backend.open(**QUICK)


def blobs(count: int, size: int = 40_000) -> dict[str, bytes]:
    return {f"blobs/{i:03d}": os.urandom(size + i) for i in range(count)}


def assert_names(error: BaseException, store: Store, path: str, backend: ProxiedBackend) -> None:
    """The message names what failed and where: the object's URL and the endpoint."""
    text = str(error)
    assert store.url_for(path) in text, text
    assert backend.proxy.endpoint_url in text, text


def _local_copies(objects: dict[str, bytes], folder: Path) -> list[tuple[str, str]]:
    """Write ``objects`` into ``folder``; the ``(local, store path)`` pairs to upload them."""
    pairs = []
    for path, data in objects.items():
        local = folder / path.replace("/", "_")
        local.write_bytes(data)
        pairs.append((str(local), path))
    return pairs


# -- reads: one fault, then the exact bytes ------------------------------------------------------------------------


@pytest.mark.parametrize("fault", [RESET_BEFORE, RESET_AFTER, STATUS_500, STATUS_503, CUT])
def test_a_read_survives_one_fault(backend: ProxiedBackend, fault: Fault) -> None:
    store = backend.open()
    data = os.urandom(300_000)
    store.write("blob", data)
    backend.proxy.inject(fault, times=1, methods={"GET"}, containing="root/blob")
    assert store.read("blob") == data
    assert store.read_range("blob", 1_000, 250_000) == data[1_000:250_000]
    assert backend.proxy.count(fault.action) == 1
    assert backend.proxy.count(Action.PASS, method="GET", path_contains="root/blob") == 2


def test_delayed_requests_are_answered_whole_and_no_sooner(backend: ProxiedBackend) -> None:
    """The benchmarks' far-away server: every request held, its answer intact."""
    store = backend.open()
    blobs = {f"slow/{i}": os.urandom(50_000 + i) for i in range(8)}
    for path, data in blobs.items():
        store.write(path, data)
    backend.proxy.inject(Fault.delay(0.2), methods={"GET"}, containing="root/slow/")
    started = time.monotonic()
    assert list(store.read_many(list(blobs), max_requests=8)) == list(blobs.values())
    assert time.monotonic() - started >= 0.2
    assert backend.proxy.count(Action.DELAY) == 8


def test_reads_survive_new_connections_being_reset(backend: ProxiedBackend) -> None:
    data = os.urandom(100_000)
    backend.open().write("blob", data)
    backend.proxy.inject(Fault.reset_before(), times=2, unit="connection")
    fresh = backend.open()  # a new client: new connections, the first two reset as soon as they are accepted
    assert fresh.read("blob") == data
    assert backend.proxy.faulty_connections == 2


@pytest.mark.parametrize("fault", [RESET_BEFORE, STATUS_503, CUT])
def test_read_many_survives_faults_among_many_reads(backend: ProxiedBackend, fault: Fault, tmp_path: Path) -> None:
    store = backend.open()
    objects = blobs(24)
    store.put_many(_local_copies(objects, tmp_path), max_requests=8)
    backend.proxy.inject(fault, skip=3, times=2, methods={"GET"}, containing="root/blobs/")
    got = list(store.read_many(list(objects), sizes=[len(d) for d in objects.values()], max_requests=8))
    assert got == list(objects.values())
    assert backend.proxy.count(fault.action) == 2


@pytest.mark.s3
def test_a_throttling_answer_slows_every_request_while_it_lasts(s3_backend: ProxiedBackend, tmp_path: Path) -> None:
    """503 SlowDown pauses every request of the store, not only the one that got it (s3fs's botocore retries
    delay that request alone, and the others go on at full rate)."""
    store = s3_backend.open()
    objects = blobs(48, size=2_000)
    store.put_many(_local_copies(objects, tmp_path), max_requests=8)
    assert list(store.read_many(list(objects), max_requests=16)) == list(objects.values())  # 16 connections, warm
    before = len(s3_backend.proxy.requests)
    # The reads go out in a window of 16 that advances in order. Of the first 16, blobs/000 is answered at once and
    # the next 15 after 0.05 s; blobs/016, sent as soon as blobs/000 is in, gets the throttling answer at once. So
    # the client has seen it well before the window moves on.
    for i in range(1, 16):
        s3_backend.proxy.inject(Fault.delay(0.05), times=1, methods={"GET"}, containing=f"root/blobs/{i:03d}")
    s3_backend.proxy.inject(Fault.status(503), times=1, methods={"GET"}, containing="root/blobs/016")
    assert list(store.read_many(list(objects), max_requests=16)) == list(objects.values())
    records = s3_backend.proxy.requests[before:]
    gets = [r.received for r in records if r.method == "GET" and "root/blobs/" in r.target]
    throttled = next(record.received for record in records if record.action is Action.STATUS)
    # The pause lasts at least 0.1 s: no read is sent during it. Without it, the 15 slots send their next reads as
    # their answers come in, 0.05 s after the throttling answer. (A few may slip through on a busy machine, when the
    # client takes that long to handle the throttling answer.)
    soon_after = [received for received in gets if throttled < received < throttled + 0.09]
    assert len(soon_after) <= 4, f"{len(soon_after)} reads arrived within 0.09 s of the throttling answer"
    assert len(gets) == 48 + 1, "the throttled read is sent again, once"


@pytest.mark.s3
def test_throttling_answers_to_reads_in_flight_together_pause_once(s3_backend: ProxiedBackend, tmp_path: Path) -> None:
    """A server that throttles answers every read in flight with 503 SlowDown: that is one pause (0.1-0.2 s), not
    one doubling per answer (16 answers would make it the longest, 5-10 s)."""
    store = s3_backend.open()
    objects = blobs(16, size=2_000)
    store.put_many(_local_copies(objects, tmp_path), max_requests=8)
    s3_backend.proxy.inject(Fault.status(503), times=16, methods={"GET"}, containing="root/blobs/")
    assert list(store.read_many(list(objects), max_requests=16)) == list(objects.values())
    gets = [r for r in s3_backend.proxy.requests if r.method == "GET" and "root/blobs/" in r.target]
    assert [r.action for r in gets].count(Action.STATUS) == 16
    last_throttled = max(r.received for r in gets if r.action is Action.STATUS)
    retried = [r.received - last_throttled for r in gets if r.action is not Action.STATUS]
    assert len(retried) == 16
    assert max(retried) < 1.5, f"the reads were sent again {max(retried):.2f} s after the throttling answers"


# -- reads: a persistent fault is a clear error, soon ------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", [RESET_BEFORE, RESET_AFTER, STATUS_500, STATUS_503, CUT, STALL])
def test_a_read_under_a_persistent_fault_fails_clearly(backend: ProxiedBackend, fault: Fault) -> None:
    store = backend.open(**QUICK)
    store.write("blob", os.urandom(300_000))
    backend.proxy.inject(fault, methods={"GET"}, containing="root/blob")
    with pytest.raises(EXPECTED_ERROR[fault.action]) as caught:
        store.read("blob")
    assert_names(caught.value, store, "blob", backend)
    assert "2 attempts" in str(caught.value)
    if fault.action is Action.CUT:
        assert "cut short" in str(caught.value)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", [RESET_BEFORE, CUT, STALL])
def test_read_many_under_a_persistent_fault_yields_what_came_then_fails(
    backend: ProxiedBackend, fault: Fault, tmp_path: Path
) -> None:
    store = backend.open(**QUICK)
    objects = blobs(12)
    store.put_many(_local_copies(objects, tmp_path))
    broken = list(objects)[7]
    backend.proxy.inject(fault, methods={"GET"}, containing=f"root/{broken}")
    got: list[bytes] = []
    with pytest.raises(EXPECTED_ERROR[fault.action]) as caught:
        for data in store.read_many(list(objects), max_requests=4):
            got.append(data)
    assert got == list(objects.values())[:7]
    assert_names(caught.value, store, broken, backend)


# -- packed shards ---------------------------------------------------------------------------------------------------


#: The dataset of the shard tests: 30 images of about 2 kB in a few shards.
CATS = PackedImages("cats", count=30, size=2_000, shard_bytes=20_000, row_group_bytes=6_000)


@pytest.fixture
def packed(shared_backend: ProxiedBackend, shared_datasets: SharedDatasets) -> tuple[Path, str]:
    """:data:`CATS` packed on the shared store (written once, without faults); its list file and name."""
    dataset = shared_datasets.packed(shared_backend.open_direct(), CATS)
    assert dataset.shards >= 3
    return dataset.list_file, dataset.name


def _shard_samples(rows: list[tuple[Any, ...]]) -> list[tuple[bytes, str]]:
    return [(bytes(image), label) for image, label, *_ in rows]


@pytest.mark.parametrize("fault", [RESET_AFTER, STATUS_503, CUT_EARLY])
def test_shard_reads_survive_one_fault(shared_backend: ProxiedBackend, packed: tuple[Path, str], fault: Fault) -> None:
    list_file, name = packed
    proxy = shared_backend.proxy
    dataset = reader(name, shared_backend.open())
    proxy.inject(fault, skip=1, times=1, methods={"GET"}, containing="shard-")
    assert _shard_samples(list(dataset())) == image_rows(list_file)
    proxy.inject(fault, times=1, methods={"GET"}, containing="shard-")
    assert _shard_samples([dataset[17]]) == image_rows(list_file)[17:18]
    assert proxy.count(fault.action) == 2


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", [STATUS_500, CUT_EARLY, STALL])
def test_shard_reads_under_a_persistent_fault_fail_clearly(
    shared_backend: ProxiedBackend, packed: tuple[Path, str], fault: Fault
) -> None:
    _, name = packed
    store = shared_backend.open(**QUICK)
    dataset = reader(name, store)
    shared_backend.proxy.inject(fault, methods={"GET"}, containing="shard-")
    with pytest.raises(EXPECTED_ERROR[fault.action]) as caught:
        list(dataset())
    shard = layout.shard_path(name, dataset.manifest.shards[0])
    assert_names(caught.value, store, shard, shared_backend)
    with pytest.raises(EXPECTED_ERROR[fault.action]):
        dataset[3]


# -- uploads ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", [RESET_BEFORE, RESET_AFTER, STATUS_500, STATUS_503])
def test_an_upload_survives_faults(backend: ProxiedBackend, make_image_list: MakeImageList, fault: Fault) -> None:
    list_file = make_image_list(16)
    backend.proxy.inject(fault, skip=2, times=2, methods={backend.write_method}, containing="/objects/")
    result = upload(list_file, "cats", store=backend.open(), max_requests=4)
    assert result.created and result.sent_files == 16
    assert backend.proxy.count(fault.action) == 2
    direct = backend.open_direct()
    assert list(reader("cats", direct)()) == image_rows(list_file)
    assert verify(direct, result.manifest).ok


@pytest.mark.slow
def test_verify_rehashes_through_an_answer_cut_short(backend: ProxiedBackend, make_image_list: MakeImageList) -> None:
    list_file = make_image_list(8, size=20_000)
    manifest = upload(list_file, "cats", store=backend.open_direct()).manifest
    backend.proxy.inject(Fault.cut(1000), times=2, methods={"GET"}, containing="/objects/")
    report = verify(backend.open(), manifest)
    assert report.ok and report.checked == 11  # the list, the parts of the entries and of the row index, 8 objects
    assert backend.proxy.count(Action.CUT) == 2


def _object_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("fault", [RESET_BEFORE, RESET_AFTER, STATUS_500, STATUS_503, STALL])
def test_an_upload_under_a_persistent_fault_commits_nothing_then_resumes(
    backend: ProxiedBackend, make_image_list: MakeImageList, fault: Fault
) -> None:
    list_file = make_image_list(10)
    broken = _object_of(list_file.parent / "data" / "img0006.jpg")
    backend.proxy.inject(fault, methods={backend.write_method}, containing=broken)
    store = backend.open(**QUICK)
    with pytest.raises(EXPECTED_ERROR[fault.action]) as caught:
        upload(list_file, "cats", store=store, max_requests=4)
    assert broken in str(caught.value) and backend.proxy.endpoint_url in str(caught.value)

    direct = backend.open_direct()
    assert catalog.versions(direct, "cats") == []
    assert direct.list(f"{layout.dataset_folder('cats')}/lists") == {}
    stored = direct.list(f"{layout.dataset_folder('cats')}/objects")
    # Only a reset after the server answered leaves the object stored (the client never heard it was).
    assert (layout.object_path("cats", broken) in stored) is (fault.action is Action.RESET_AFTER)

    backend.proxy.clear()
    result = upload(list_file, "cats", store=store)
    assert result.created and result.manifest.version == 1
    assert result.sent_files == 10 - len(stored)
    assert list(reader("cats", direct)()) == image_rows(list_file)
    assert verify(direct, result.manifest).ok


@pytest.mark.s3
@pytest.mark.slow
@pytest.mark.timeout(90)
def test_the_upload_command_reports_a_stalled_store_and_resumes(
    s3_backend: ProxiedBackend, make_image_list: MakeImageList
) -> None:
    list_file = make_image_list(6)
    s3_backend.proxy.inject(Fault.stall(), methods={"PUT"}, containing="/objects/")
    command = [sys.executable, "-m", "datamount.cli.main", "upload", str(list_file), "cats", "-q"]
    command += ["--store", s3_backend.url, "-o", f"endpoint_url={s3_backend.proxy.endpoint_url}"]
    command += ["-o", "read_timeout=1", "-o", "retries=1"]
    stalled = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert stalled.returncode == 5, stalled.stdout + stalled.stderr
    assert stalled.stderr.startswith(f"datamount: error: cannot upload {s3_backend.url}/datasets/cats/objects/")
    assert "stopped answering: silent for 1 s (read_timeout), 2 attempts" in stalled.stderr
    assert "Traceback" not in stalled.stderr
    assert catalog.versions(s3_backend.open_direct(), "cats") == []

    s3_backend.proxy.clear()
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "uploaded cats@1: image, 6 rows, 6 files" in resumed.stdout
    assert list(reader("cats", s3_backend.open_direct())()) == image_rows(list_file)


# -- a cut anywhere: never short bytes -----------------------------------------------------------------------------


@pytest.mark.s3
@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.binary(min_size=1, max_size=50_000),
    cut=st.integers(min_value=0),
    span=st.tuples(st.integers(min_value=0), st.integers(min_value=0)),
)
def test_an_answer_cut_anywhere_is_fetched_again_never_returned_short(
    s3_backend: ProxiedBackend, quick_s3_store: Store, data: bytes, cut: int, span: tuple[int, int]
) -> None:
    store, proxy = quick_s3_store, s3_backend.proxy
    store.write("blob", data)
    start, end = sorted(x % (len(data) + 1) for x in span)
    proxy.clear()
    proxy.inject(Fault.cut(cut % len(data)), times=1, methods={"GET"}, containing="root/blob")
    assert store.read("blob") == data
    if start == end:
        assert store.read_range("blob", start, end) == b""
        return
    proxy.inject(Fault.cut(cut % (end - start)), times=1, methods={"GET"}, containing="root/blob")
    assert store.read_range("blob", start, end) == data[start:end]
    proxy.inject(Fault.cut(cut % (end - start)), methods={"GET"}, containing="root/blob")
    with pytest.raises(StoreIOError, match="cut short"):
        store.read_range("blob", start, end)


# -- the defaults ----------------------------------------------------------------------------------------------------


@pytest.mark.s3
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_with_default_settings_a_stalled_read_fails_within_a_bounded_time(s3_backend: ProxiedBackend) -> None:
    store = s3_backend.open()
    store.write("blob", b"x" * 1000)
    s3_backend.proxy.inject(Fault.stall(), methods={"GET"})
    with pytest.raises(StoreUnreachableError, match=r"silent for 30 s \(read_timeout\), 3 attempts"):
        store.read("blob")
    assert s3_backend.proxy.count(Action.STALL) == 3


@pytest.mark.s3
@pytest.mark.parametrize("client", ["obstore", "s3fs"])
def test_timeout_and_retry_options_are_checked(s3_server: S3Server, s3_bucket: str, client: str) -> None:
    for bad in ({"read_timeout": 0}, {"connect_timeout": "soon"}, {"retries": -1}, {"retries": 1.5}):
        name = next(iter(bad))
        with pytest.raises(StoreConfigError, match=name):
            open_store(f"s3://{s3_bucket}", endpoint_url=s3_server.endpoint_url, check=False, client=client, **bad)
    fast = open_store(
        f"s3://{s3_bucket}",
        endpoint_url=s3_server.endpoint_url,
        read_timeout="2.5",
        retries="0",
        check=False,
        client=client,
    )
    assert (fast.settings.read_timeout, fast.settings.attempts) == (2.5, 1)
    if client == "s3fs":  # what the client itself was given
        assert fast.fs.config_kwargs["read_timeout"] == 2.5
        assert fast.fs.config_kwargs["retries"]["total_max_attempts"] == 1
    else:
        assert fast.fs.store.client_options["read_timeout"] == "2s 500ms"  # obstore words it so
        assert fast.fs.attempts == 1
