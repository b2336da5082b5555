"""S3 stores against a real moto server: addressing, endpoints, failures and credentials."""

from __future__ import annotations

import logging
import re

import pytest

from datamount.storage import ObjectNotFoundError, Store, StoreUnreachableError, open_store
from tests.servers.fault_proxy import Action, Fault, FaultProxyFactory
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server

pytestmark = pytest.mark.s3


def test_a_refusing_endpoint_fails_fast_and_names_it() -> None:
    with pytest.raises(StoreUnreachableError, match=r"http://127\.0\.0\.1:9\b") as caught:
        open_store("s3://b", endpoint_url="http://127.0.0.1:9")
    assert isinstance(caught.value, ConnectionError)
    # Refused, then given up after the default 3 attempts: before the open check's deadline, not cut by it.
    assert "did not answer (" in str(caught.value) and "; 3 attempts)" in str(caught.value)
    assert "no answer within" not in str(caught.value)


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_a_silent_endpoint_fails_within_the_check_deadline(
    s3_server: S3Server, s3_bucket: str, fault_proxy: FaultProxyFactory
) -> None:
    proxy = fault_proxy(s3_server.endpoint_url)
    proxy.inject(Fault.stall())  # every request is read and never answered
    deadline = f"no answer within {Store.check_timeout:g} s from {proxy.endpoint_url}"
    with pytest.raises(StoreUnreachableError, match=re.escape(deadline)):
        open_store(f"s3://{s3_bucket}", endpoint_url=proxy.endpoint_url)
    # One request, cut by the deadline: no retry fits in it (the read timeout is longer).
    assert proxy.count(Action.STALL) == 1


def test_a_missing_bucket_is_named(s3_server: S3Server) -> None:
    with pytest.raises(ObjectNotFoundError, match="bucket 'no-such-bucket' does not exist"):
        open_store("s3://no-such-bucket/prefix", endpoint_url=s3_server.endpoint_url)


def test_endpoint_from_the_standard_environment_variable(
    s3_server: S3Server, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint_url)
    store = open_store(f"s3://{s3_bucket}/from-env")
    store.write("obj", b"env")
    assert store.endpoint == s3_server.endpoint_url
    assert open_store(f"s3://{s3_bucket}", endpoint_url=s3_server.endpoint_url).read("from-env/obj") == b"env"


def test_path_style_is_the_default_for_custom_endpoints(s3_server: S3Server, s3_bucket: str) -> None:
    by_name = s3_server.endpoint_url.replace("127.0.0.1", "localhost")
    open_store(f"s3://{s3_bucket}", endpoint_url=by_name).write("ok", b"1")
    # Virtual-hosted style would need BUCKET.localhost to resolve, which it does not here.
    virtual = {"s3": {"addressing_style": "virtual"}}
    with pytest.raises(StoreUnreachableError, match=f"{s3_bucket}.localhost"):
        open_store(f"s3://{s3_bucket}", endpoint_url=by_name, path_style=False, config_kwargs=virtual)


def test_credentials_never_show_in_repr_errors_or_logs(
    s3_server: S3Server, s3_bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "wJalrXUtnFEMI-datamount-not-shown"
    caplog.set_level(logging.DEBUG)
    store = open_store(f"s3://{s3_bucket}", endpoint_url=s3_server.endpoint_url, key="AKIASHOWNOT", secret=secret)
    with pytest.raises(ObjectNotFoundError) as caught:
        store.read("missing")
    with pytest.raises(StoreUnreachableError) as unreachable:
        open_store(f"s3://{s3_bucket}", endpoint_url="http://127.0.0.1:9", key="AKIASHOWNOT", secret=secret)
    for text in (repr(store), str(caught.value), str(unreachable.value), caplog.text):
        assert secret not in text
    assert "AKIASHOWNOT" not in repr(store)


def test_many_reads_with_many_in_flight(s3_store) -> None:  # type: ignore[no-untyped-def]
    blobs = {f"obj/{i:04d}": bytes([i % 251]) * (1000 + i) for i in range(120)}
    for path, data in blobs.items():
        s3_store.write(path, data)
    got = list(s3_store.read_many(list(blobs), sizes=[len(d) for d in blobs.values()], max_requests=32))
    assert got == list(blobs.values())


def test_test_credentials_are_the_fixture_ones(s3_store) -> None:  # type: ignore[no-untyped-def]
    assert "***" in repr(s3_store)
    assert S3_TEST_SECRET not in repr(s3_store) and S3_TEST_KEY not in repr(s3_store)
