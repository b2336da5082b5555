"""Every backend checks its options before a client sees them: a misspelt or unknown name is one
:class:`StoreConfigError` naming the options and the closest, a malformed endpoint is refused, on every client."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from datamount.storage import StoreConfigError, open_store

needs_hdfs = pytest.mark.skipif(
    importlib.util.find_spec("hdfs_native") is None,
    reason="hdfs-native is not installed (pip install 'datamount[hdfs]')",
)


@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        (
            "s3://b",
            {"endpoint": "http://127.0.0.1:1"},
            r"unknown S3 store option endpoint \(did you mean endpoint_url\?\)",
        ),
        ("s3://b", {"client": "s3fs", "endpoint": "x"}, r"unknown S3 store option endpoint .*, and s3fs's own$"),
        ("s3://b", {"client_kwargs": {}}, r"^client_kwargs: an option of the s3fs client only; add client=s3fs"),
        ("s3://b", {"endpoint_url": "127.0.0.1:5055"}, r"endpoint_url must be a URL such as http://HOST:PORT"),
        ("s3://b", {"client": "s3fs", "endpoint_url": "127.0.0.1:5055"}, r"endpoint_url must be a URL"),
        (
            "gs://b",
            {"endpoint": "http://127.0.0.1:1"},
            r"unknown GCS store option endpoint \(did you mean endpoint_url",
        ),
        ("gs://b", {"endpoint_url": "localhost:4443"}, r"endpoint_url must be a URL"),
        ("memory://m", {"mount": "glusterfs"}, r"unknown memory store option mount; a memory store takes no options"),
        pytest.param(
            "hdfs://127.0.0.1:1/x",
            {"replication": 2},
            r"unknown HDFS store option replication: .*Hadoop client settings",
            marks=needs_hdfs,
        ),
    ],
    ids=["s3", "s3fs", "s3fs-only", "s3-endpoint", "s3fs-endpoint", "gcs", "gcs-endpoint", "memory", "hdfs"],
)
def test_an_unknown_or_malformed_option_is_named_before_any_request(
    url: str, options: dict[str, object], message: str
) -> None:
    with pytest.raises(StoreConfigError, match=message):
        open_store(url, check=False, **options)


def test_a_local_store_names_its_one_option(tmp_path: Path) -> None:
    with pytest.raises(StoreConfigError, match=r"unknown local store option mnt \(did you mean mount\?\)"):
        open_store(tmp_path / "store", mnt="glusterfs")


def test_the_s3fs_client_takes_its_own_options() -> None:
    store = open_store("s3://b", check=False, client="s3fs", requester_pays=False, client_kwargs={})
    assert store.client == "s3fs"


@needs_hdfs
def test_hadoop_settings_reach_the_client_as_text() -> None:
    store = open_store(
        "hdfs://127.0.0.1:1/x", check=False, **{"dfs.replication": 2, "dfs.client.use.datanode.hostname": True}
    )
    assert store.fs.storage_options["dfs.replication"] == "2"
    assert store.fs.storage_options["dfs.client.use.datanode.hostname"] == "true"


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_credentials_in_a_store_url_are_refused_never_shown(scheme: str) -> None:
    with pytest.raises(StoreConfigError, match="credentials in a store URL are not read") as caught:
        open_store(f"{scheme}://AKIAEXAMPLE:wJalrXUtnFEMI@bucket/data", check=False)
    assert "wJalrXUtnFEMI" not in str(caught.value) and "AKIAEXAMPLE" not in str(caught.value)


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_options_after_a_question_mark_are_named_not_shown(scheme: str) -> None:
    url = f"{scheme}://bucket/data?endpoint_url=http://127.0.0.1:9000&secret=wJalrXUtnFEMI"
    with pytest.raises(StoreConfigError) as caught:
        open_store(url, check=False)
    message = str(caught.value)
    assert message.startswith(f"'{scheme}://bucket/data': a store URL takes no options after '?'")
    assert "(here endpoint_url, secret)" in message and "-o KEY=VALUE" in message
    assert "wJalrXUtnFEMI" not in message


def test_a_question_mark_in_a_prefix_without_options_is_a_prefix() -> None:
    assert open_store("s3://bucket/odd?name", check=False, key="k", secret="s").url == "s3://bucket/odd?name"
