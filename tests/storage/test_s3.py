"""S3 stores against a real moto server: addressing, endpoints, failures and credentials."""

from __future__ import annotations

import bisect
import json
import logging
import multiprocessing
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from datamount.storage import (
    ObjectNotFoundError,
    Store,
    StoreConfigError,
    StorePermissionError,
    StoreUnreachableError,
    open_store,
)
from tests.servers.fault_proxy import Action, Fault, FaultProxyFactory
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server

pytestmark = pytest.mark.s3


@pytest.fixture(params=["obstore", "s3fs"])
def client(request: pytest.FixtureRequest) -> str:
    """Each S3 client a store can use."""
    return str(request.param)


def test_a_refusing_endpoint_fails_fast_and_names_it(client: str) -> None:
    with pytest.raises(StoreUnreachableError, match=r"http://127\.0\.0\.1:9\b") as caught:
        open_store("s3://b", endpoint_url="http://127.0.0.1:9", client=client)
    assert isinstance(caught.value, ConnectionError)
    # Refused, then given up after the default 3 attempts: before the open check's deadline, not cut by it.
    assert "did not answer (" in str(caught.value) and "; 3 attempts)" in str(caught.value)
    assert "no answer within" not in str(caught.value)


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_a_silent_endpoint_fails_within_the_check_deadline(
    s3_server: S3Server, s3_bucket: str, fault_proxy: FaultProxyFactory, client: str
) -> None:
    proxy = fault_proxy(s3_server.endpoint_url)
    proxy.inject(Fault.stall())  # every request is read and never answered
    deadline = f"no answer within {Store.check_timeout:g} s from {proxy.endpoint_url}"
    with pytest.raises(StoreUnreachableError, match=re.escape(deadline)):
        open_store(f"s3://{s3_bucket}", endpoint_url=proxy.endpoint_url, client=client)
    # One request, cut by the deadline: no retry fits in it (the read timeout is longer).
    assert proxy.count(Action.STALL) == 1


def test_a_missing_bucket_is_named(s3_server: S3Server, s3_bucket: str, client: str) -> None:
    with pytest.raises(ObjectNotFoundError, match="bucket 'no-such-bucket' does not exist"):
        open_store("s3://no-such-bucket/prefix", endpoint_url=s3_server.endpoint_url, client=client)
    # A missing object of a bucket that exists is only that.
    store = open_store(f"s3://{s3_bucket}/prefix", endpoint_url=s3_server.endpoint_url, client=client)
    with pytest.raises(ObjectNotFoundError, match=r"cannot read s3://datamount-test/prefix/nothing: not found$"):
        store.read("nothing")


def test_opening_a_store_reads_no_listing_of_its_objects(
    s3_server: S3Server, s3_bucket: str, fault_proxy: FaultProxyFactory, client: str
) -> None:
    """The check made when a store is opened is one listing request whose answer names none of the store's objects: a
    page of a store's keys (up to 1,000, from a server that reads them all) is the slowest request of an open."""
    url = f"s3://{s3_bucket}/listed"
    writer = open_store(url, endpoint_url=s3_server.endpoint_url, client=client)
    for number in range(40):
        writer.write(f"data/{number:03d}-{'x' * 100}", b"1")
    proxy = fault_proxy(s3_server.endpoint_url)
    open_store(url, endpoint_url=proxy.endpoint_url, client=client)
    [probe] = proxy.requests
    assert probe.method == "GET" and probe.answered is not None
    assert probe.answered < 1_000  # one key is ~300 bytes of XML: each of the 40 here is in the answer before


def test_endpoint_from_the_standard_environment_variable(
    s3_server: S3Server, s3_bucket: str, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint_url)
    store = open_store(f"s3://{s3_bucket}/from-env", client=client)
    store.write("obj", b"env")
    assert store.endpoint == s3_server.endpoint_url
    assert open_store(f"s3://{s3_bucket}", endpoint_url=s3_server.endpoint_url).read("from-env/obj") == b"env"


def test_path_style_is_the_default_for_custom_endpoints(s3_server: S3Server, s3_bucket: str, client: str) -> None:
    by_name = s3_server.endpoint_url.replace("127.0.0.1", "localhost")
    open_store(f"s3://{s3_bucket}", endpoint_url=by_name, client=client).write("ok", b"1")
    # Virtual-hosted style would need BUCKET.localhost to resolve, which it does not here.
    virtual = {"config_kwargs": {"s3": {"addressing_style": "virtual"}}} if client == "s3fs" else {}
    with pytest.raises(StoreUnreachableError, match=f"{s3_bucket}.localhost"):
        open_store(f"s3://{s3_bucket}", endpoint_url=by_name, path_style=False, client=client, **virtual)


def test_credentials_never_show_in_repr_errors_or_logs(
    s3_server: S3Server, s3_bucket: str, caplog: pytest.LogCaptureFixture, client: str
) -> None:
    secret = "wJalrXUtnFEMI-datamount-not-shown"
    caplog.set_level(logging.DEBUG)
    keys = {"key": "AKIASHOWNOT", "secret": secret, "client": client}
    store = open_store(f"s3://{s3_bucket}", endpoint_url=s3_server.endpoint_url, **keys)
    with pytest.raises(ObjectNotFoundError) as caught:
        store.read("missing")
    with pytest.raises(StoreUnreachableError) as unreachable:
        open_store(f"s3://{s3_bucket}", endpoint_url="http://127.0.0.1:9", **keys)
    for text in (repr(store), str(caught.value), str(unreachable.value), caplog.text):
        assert secret not in text
    assert "AKIASHOWNOT" not in repr(store)


def test_many_reads_with_many_in_flight(s3_store) -> None:  # type: ignore[no-untyped-def]
    blobs = {f"obj/{i:04d}": bytes([i % 251]) * (1000 + i) for i in range(120)}
    for path, data in blobs.items():
        s3_store.write(path, data)
    got = list(s3_store.read_many(list(blobs), sizes=[len(d) for d in blobs.values()], max_requests=32))
    assert got == list(blobs.values())


def test_reads_from_a_far_away_store_keep_128_requests_in_flight(
    s3_server: S3Server, s3_bucket: str, fault_proxy: FaultProxyFactory
) -> None:
    """Every GET answered two seconds late (long enough to send them all, on a busy machine too): at most, and at
    least once, the whole default window of reads arrives within two seconds. With 20 ms added per request (as S3
    answers a small GET), 64 in flight kept 0.73 of the no-latency read rate on SeaweedFS, 128 0.85 of it
    (``benchmarks/bench_latency.py``)."""
    proxy = fault_proxy(s3_server.endpoint_url)
    store = open_store(f"s3://{s3_bucket}/far", endpoint_url=proxy.endpoint_url)
    objects = {f"obj/{i:03d}": bytes([i]) * 100 for i in range(200)}
    for path, data in objects.items():
        store.write(path, data)
    delay = 2.0
    proxy.inject(Fault.delay(delay), methods={"GET"})
    assert list(store.read_many(list(objects), sizes=[100] * len(objects))) == list(objects.values())
    sent = sorted(r.received for r in proxy.requests if r.method == "GET" and "/far/obj/" in unquote(r.target))
    assert len(sent) == len(objects)
    at_once = max(bisect.bisect_left(sent, first + delay) - start for start, first in enumerate(sent))
    assert at_once == 128


def test_test_credentials_are_the_fixture_ones(s3_store) -> None:  # type: ignore[no-untyped-def]
    assert "***" in repr(s3_store)
    assert S3_TEST_SECRET not in repr(s3_store) and S3_TEST_KEY not in repr(s3_store)


# -- the obstore client: its options, credentials from the whole chain, fork ---------------------------------------


def test_a_ranged_read_for_arrow_is_a_view_of_obstores_buffer(s3_server: S3Server, s3_bucket: str) -> None:
    store = open_store(f"s3://{s3_bucket}/views", endpoint_url=s3_server.endpoint_url)
    store.write("blob", bytes(range(256)) * 64)
    view = store.read_range_buffer("blob", 256, 1280)
    assert isinstance(view, memoryview) and view.readonly and not isinstance(view.obj, bytes)
    assert view == (bytes(range(256)) * 4)


def test_obstore_is_the_default_client_and_s3fs_options_name_the_other(s3_server: S3Server, s3_bucket: str) -> None:
    url, endpoint = f"s3://{s3_bucket}", s3_server.endpoint_url
    assert open_store(url, endpoint_url=endpoint).client == "obstore"
    assert open_store(url, endpoint_url=endpoint, client="s3fs").client == "s3fs"
    with pytest.raises(StoreConfigError, match=r"^client_kwargs: an option of the s3fs client only; add client=s3fs"):
        open_store(url, endpoint_url=endpoint, client_kwargs={"region_name": "eu-west-1"})
    assert open_store(url, endpoint_url=endpoint, client="s3fs", client_kwargs={"region_name": "eu-west-1"}).client
    with pytest.raises(StoreConfigError, match="client must be one of obstore, s3fs, got 'boto'"):
        open_store(url, endpoint_url=endpoint, client="boto")
    with pytest.raises(StoreConfigError, match="key and secret must be given together"):
        open_store(url, endpoint_url=endpoint, key="AKIAONLY")
    with pytest.raises(StoreConfigError, match=r"path_style=false needs an endpoint named by host name"):
        open_store(url, endpoint_url=endpoint, path_style=False)  # obstore would send BUCKET.127.0.0.1


def _aws_files(folder: Path, monkeypatch: pytest.MonkeyPatch, config: str, credentials: str = "") -> None:
    """``~/.aws/config`` and ``~/.aws/credentials`` for this test only, and no keys in the environment."""
    (folder / "config").write_text(config)
    (folder / "credentials").write_text(credentials)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(folder / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(folder / "credentials"))
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(variable, raising=False)


def test_credentials_come_from_profiles_and_credential_process(
    s3_server: S3Server, s3_bucket: str, fault_proxy: FaultProxyFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The obstore client signs with what botocore's chain finds: a named profile's keys, and a profile whose keys
    come from a ``credential_process`` (as SSO and vault helpers give them)."""
    process = json.dumps({"Version": 1, "AccessKeyId": "AKIAFROMPROCESS", "SecretAccessKey": "process-secret"})
    helper = tmp_path / "helper.py"
    helper.write_text(f"print({process!r})\n")
    _aws_files(
        tmp_path,
        monkeypatch,
        config=f"[profile helper]\ncredential_process = {sys.executable} {helper}\n",
        credentials="[team]\naws_access_key_id = AKIAFROMPROFILE\naws_secret_access_key = profile-secret\n",
    )
    proxy = fault_proxy(s3_server.endpoint_url)
    for profile, key in (("team", "AKIAFROMPROFILE"), ("helper", "AKIAFROMPROCESS")):
        seen = len(proxy.requests)
        store = open_store(f"s3://{s3_bucket}/{profile}", endpoint_url=proxy.endpoint_url, profile=profile)
        store.write("obj", profile.encode())
        assert store.read("obj") == profile.encode()
        assert {record.access_key for record in proxy.requests[seen:]} == {key}, profile
        assert "profile-secret" not in repr(store) and "process-secret" not in repr(store)
    with pytest.raises(StoreConfigError, match="no AWS profile 'nobody'"):
        open_store(f"s3://{s3_bucket}", endpoint_url=proxy.endpoint_url, profile="nobody")


_OPEN_AND_READ = """
import sys
from datamount.storage import open_store
store = open_store(sys.argv[1], endpoint_url=sys.argv[2])
print(store.read("obj").decode(), store.client, "botocore" in sys.modules)
"""


@pytest.mark.parametrize(
    ("environment", "chain"),
    [
        ({}, False),  # keys in the environment and no AWS config file: the chain would find exactly those
        ({"AWS_PROFILE": "team"}, True),  # a profile may name a region (its keys still lose to the environment's)
        ({"CONFIG": "[default]\nregion = eu-west-1\n"}, True),  # the region is in the config file
        ({"CONFIG": "[default]\nregion = eu-west-1\n", "AWS_DEFAULT_REGION": "us-east-1"}, False),
    ],
    ids=["keys-only", "profile", "config-file-region", "region-in-environment"],
)
def test_keys_in_the_environment_need_no_credential_chain(
    s3_server: S3Server,
    s3_bucket: str,
    fault_proxy: FaultProxyFactory,
    tmp_path: Path,
    environment: dict[str, str],
    chain: bool,
) -> None:
    """A fresh process (a job, a spawned worker) with its keys in the environment signs with them without importing
    botocore (~0.1 s); where a profile or config file could add to them, botocore's chain still decides."""
    proxy = fault_proxy(s3_server.endpoint_url)
    open_store(f"s3://{s3_bucket}/env", endpoint_url=s3_server.endpoint_url).write("obj", b"payload")
    (tmp_path / "config").write_text(environment.get("CONFIG", ""))
    (tmp_path / "credentials").write_text("[team]\naws_access_key_id = AKIAFROMPROFILE\naws_secret_access_key = x\n")
    if "CONFIG" not in environment:
        (tmp_path / "config").unlink()
    child = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("AWS_") or key == "AWS_EC2_METADATA_DISABLED"
    }
    child.update(
        AWS_ACCESS_KEY_ID=S3_TEST_KEY,
        AWS_SECRET_ACCESS_KEY=S3_TEST_SECRET,
        AWS_CONFIG_FILE=str(tmp_path / "config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "credentials"),
        **{key: value for key, value in environment.items() if key != "CONFIG"},
    )
    command = [sys.executable, "-c", _OPEN_AND_READ, f"s3://{s3_bucket}/env", proxy.endpoint_url]
    done = subprocess.run(command, env=child, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["payload", "obstore", str(chain)]
    assert {record.access_key for record in proxy.requests} == {S3_TEST_KEY}


_MISS = """
import sys
from datamount.storage import ObjectNotFoundError, open_store
store = open_store(sys.argv[1], endpoint_url=sys.argv[2])
try:
    store.read("no-such-object")
except ObjectNotFoundError:
    print(store.client, *(name in sys.modules for name in ("botocore", "s3fs", "aiohttp")))
"""


def test_a_missing_object_is_named_without_importing_the_s3fs_client(s3_server: S3Server, s3_bucket: str) -> None:
    """Through obstore, a "not found" (the first of a web page that finds a version, its removal mark absent) is
    classified without importing s3fs, aiohttp and botocore: a second of imports in a fresh server."""
    open_store(f"s3://{s3_bucket}/miss", endpoint_url=s3_server.endpoint_url).write("obj", b"payload")
    command = [sys.executable, "-c", _MISS, f"s3://{s3_bucket}/miss", s3_server.endpoint_url]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.split() == ["obstore", "False", "False", "False"]


def test_no_credentials_anywhere_is_one_clear_error(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _aws_files(tmp_path, monkeypatch, config="")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role to ask for on this machine
    with pytest.raises(StorePermissionError, match="no S3 credentials found"):
        open_store(f"s3://{s3_bucket}", endpoint_url=s3_server.endpoint_url)
    assert open_store(f"s3://{s3_bucket}", endpoint_url=s3_server.endpoint_url, anon=True).client == "obstore"


def test_objects_of_known_size_are_read_with_one_ranged_request_each(
    s3_server: S3Server, s3_bucket: str, fault_proxy: FaultProxyFactory
) -> None:
    """Through obstore, an object whose size the caller knows is asked as ``bytes=0-SIZE`` (one byte more than it
    should have): one request whose answer is the bytes, where a whole object is an answer, then its body."""
    proxy = fault_proxy(s3_server.endpoint_url)
    store = open_store(f"s3://{s3_bucket}/sized", endpoint_url=proxy.endpoint_url)
    objects = {f"obj/{i}": os.urandom(1000 + i) for i in range(5)}
    for path, data in objects.items():
        store.write(path, data)
    sizes = [len(data) for data in objects.values()]
    assert list(store.read_many(list(objects), sizes=sizes)) == list(objects.values())
    gets = sorted(
        (unquote(r.target).rsplit("/", 1)[-1], r.range)
        for r in proxy.requests
        if r.method == "GET" and "/sized/obj/" in unquote(r.target)
    )
    assert gets == [(str(i), f"bytes=0-{1000 + i}") for i in range(5)]


def _clients_in_child(store: Store, options: dict[str, str], answers: Any) -> None:
    """Which client the inherited store and a newly opened one use here, and what they read."""
    fresh = open_store(store.url, **options)
    answers.put((store.client, fresh.client, store.read("shared/obj"), fresh.read("shared/obj")))


@pytest.mark.timeout(60)  # a hang guard: an obstore call in a forked child waits forever
@pytest.mark.parametrize(("method", "expected"), [("fork", "s3fs"), ("spawn", "obstore")])
def test_a_forked_child_of_an_obstore_process_uses_s3fs(
    s3_server: S3Server, s3_store: Store, method: str, expected: str
) -> None:
    """obstore's runtime does not survive fork(): a forked child reopens the store (and any other) on s3fs."""
    assert s3_store.client == "obstore"
    s3_store.write("shared/obj", b"payload")
    assert s3_store.read("shared/obj") == b"payload"  # the runtime has started in this process
    context = multiprocessing.get_context(method)
    answers = context.Queue()
    options = {"endpoint_url": s3_server.endpoint_url, "key": S3_TEST_KEY, "secret": S3_TEST_SECRET}
    child = context.Process(target=_clients_in_child, args=(s3_store, options, answers))
    child.start()
    try:
        assert answers.get(timeout=45) == (expected, expected, b"payload", b"payload")
    finally:
        child.join(timeout=10)
    assert s3_store.client == "obstore" and s3_store.read("shared/obj") == b"payload"
