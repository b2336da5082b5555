"""moto's S3 server in a thread of the test process, and the ``moto_server`` / ``s3_server`` / ``s3_store`` fixtures.

moto checks no signature: any key works, but the tests use :data:`S3_TEST_KEY` and :data:`S3_TEST_SECRET` (the root
conftest puts them in the environment), so that a test can tell them from credentials it sets itself.
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from datamount.storage import Store, open_store

S3_TEST_KEY = "AKIADATAMOUNTTEST"
S3_TEST_SECRET = "datamount-test-secret-value"
#: The bucket of :func:`s3_bucket`.
BUCKET = "datamount-test"


@dataclass(frozen=True)
class S3Server:
    """A running S3 endpoint."""

    endpoint_url: str

    def reset(self) -> None:
        """Forget every bucket and object (moto's reset API)."""
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def create_bucket(self, name: str) -> None:
        """Create the bucket ``name``, with the test credentials."""
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
    """The bucket :data:`BUCKET`, new and empty."""
    s3_server.create_bucket(BUCKET)
    return BUCKET


@pytest.fixture
def s3_store(s3_server: S3Server, s3_bucket: str) -> Store:
    """A store under a prefix of a new, empty bucket on moto."""
    return open_store(
        f"s3://{s3_bucket}/root", endpoint_url=s3_server.endpoint_url, key=S3_TEST_KEY, secret=S3_TEST_SECRET
    )
