"""Shared fixtures: isolated configuration, a real moto S3 server on loopback, and stores over every backend."""

from __future__ import annotations

import logging
import os
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from datamount.storage import Store, open_store

S3_TEST_KEY = "AKIADATAMOUNTTEST"
S3_TEST_SECRET = "datamount-test-secret-value"

#: Fixtures that start real servers, one module per server; each skips, with its reason, where it cannot run.
pytest_plugins: list[str] = [
    "tests.servers.gluster",
    "tests.servers.gcs",
    "tests.servers.hdfs",
    "tests.servers.ceph",
    "tests.servers.fault_proxy",
    "tests.servers.ray_cluster",
]

#: Backends the contract suite and the dataset round trips run on.
STORE_BACKENDS = [
    pytest.param("local", id="local"),
    pytest.param("memory", id="memory"),
    pytest.param("s3", id="s3-moto", marks=pytest.mark.s3),
    pytest.param("gluster", id="gluster", marks=pytest.mark.gluster),
    pytest.param("gcs", id="gcs", marks=pytest.mark.gcs),
    pytest.param("hdfs", id="hdfs", marks=pytest.mark.hdfs),
    pytest.param("ceph", id="ceph-rgw", marks=pytest.mark.ceph),
]


@pytest.fixture(autouse=True)
def isolated_environment(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep every test away from the user's configuration, data and credentials."""
    home = tmp_path_factory.mktemp("home")
    for var, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"), ("XDG_CACHE_HOME", "cache")):
        monkeypatch.setenv(var, str(home / sub))
    for var in ("DATAMOUNT_STORE", "DATAMOUNT_CONFIG", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", S3_TEST_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", S3_TEST_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(home / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(home / "aws-credentials"))
    return home


@dataclass(frozen=True)
class S3Server:
    """A running S3 endpoint."""

    endpoint_url: str

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def create_bucket(self, name: str) -> None:
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=S3_TEST_KEY,
            aws_secret_access_key=S3_TEST_SECRET,
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=name)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[S3Server]:
    """moto's S3 server in a thread of this process, on a free loopback port, for the whole session."""
    moto_server_module = pytest.importorskip("moto.server", reason="moto[server] is not installed")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one access-log line per request otherwise
    server = moto_server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield S3Server(f"http://{host}:{port}")
    server.stop()


@pytest.fixture
def s3_server(moto_server: S3Server) -> S3Server:
    """The moto server, emptied before the test."""
    moto_server.reset()
    return moto_server


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    name = "datamount-test"
    s3_server.create_bucket(name)
    return name


@pytest.fixture
def local_store(tmp_path: Path) -> Store:
    return open_store(tmp_path / "store")


@pytest.fixture
def memory_store() -> Iterator[Store]:
    store = open_store(f"memory://datamount-test-{uuid.uuid4().hex}")
    yield store
    store.remove("", recursive=True, missing_ok=True)


@pytest.fixture
def s3_store(s3_server: S3Server, s3_bucket: str) -> Store:
    return open_store(
        f"s3://{s3_bucket}/root", endpoint_url=s3_server.endpoint_url, key=S3_TEST_KEY, secret=S3_TEST_SECRET
    )


@pytest.fixture(params=STORE_BACKENDS)
def store(request: pytest.FixtureRequest) -> Store:
    """A fresh, empty store on each backend of :data:`STORE_BACKENDS`."""
    return request.getfixturevalue(f"{request.param}_store")


# -- datasets: .list files with real files beside them -------------------------------------------------------

MakeImageList = Callable[..., Path]


@pytest.fixture
def make_image_list(tmp_path: Path) -> MakeImageList:
    """Write ``count`` files of distinct random bytes under ``data/`` and a list naming them with labels."""

    def make(count: int = 12, *, name: str = "train.list", size: int = 300, labels: int = 3) -> Path:
        folder = tmp_path / "src"
        (folder / "data").mkdir(parents=True, exist_ok=True)
        rows = []
        for i in range(count):
            path = folder / "data" / f"img{i:04d}.jpg"
            path.write_bytes(b"\xff\xd8\xff" + os.urandom(size + i))
            rows.append(f"./data/{path.name}\t{i % labels}\n")
        list_file = folder / name
        list_file.write_text("".join(rows), encoding="utf-8")
        return list_file

    return make


@pytest.fixture
def text_list(tmp_path: Path) -> Path:
    path = tmp_path / "pairs.list"
    path.write_text("bonjour\thello\nle chat\tthe cat\n\nmerci\tthank you\n", encoding="utf-8")
    return path
