"""moto's S3 server on loopback: the ``moto_server`` / ``s3_server`` / ``s3_store`` fixtures, and a second one for
the session's shared datasets (``s3_shared_server`` / ``s3_shared_store``).

``moto_server`` runs in a thread of the test process and is emptied before each test that asks for ``s3_server``.
moto keeps its state per process, so the shared datasets live on a moto of their own, in its own process, that
nothing empties. moto checks no signature: any key works, but the tests use :data:`S3_TEST_KEY` and
:data:`S3_TEST_SECRET` (the root conftest puts them in the environment), so that a test can tell them from
credentials it sets itself.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from datamount.storage import Store, open_store
from tests.servers._launch import (
    exit_report,
    free_port,
    session_server,
    shared_bucket,
    start_daemon,
    stop_process,
    wait_until,
)

S3_TEST_KEY = "AKIADATAMOUNTTEST"
S3_TEST_SECRET = "datamount-test-secret-value"
#: The bucket of :func:`s3_bucket`.
BUCKET = "datamount-test"
START_TIMEOUT = 30.0
#: Why the S3 tests skip where moto's server cannot be imported.
MOTO_MISSING = "moto's S3 server is not installed (moto[s3], flask and flask-cors: the test extra)"


@dataclass(frozen=True)
class S3Server:
    """A running S3 endpoint."""

    endpoint_url: str

    def reset(self) -> None:
        """Forget every bucket and object (moto's reset API)."""
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def answers(self) -> bool:
        """Whether the server answers HTTP (any status)."""
        try:
            with urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

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


def s3_test_store(server: S3Server, bucket: str, **options: str) -> Store:
    """A store under a prefix of ``bucket`` on ``server``, with the test credentials."""
    return open_store(
        f"s3://{bucket}/root", endpoint_url=server.endpoint_url, key=S3_TEST_KEY, secret=S3_TEST_SECRET, **options
    )


@pytest.fixture(scope="session")
def moto_server() -> Iterator[S3Server]:
    """moto's S3 server in a thread of this process, on a free loopback port, for the whole session."""
    pytest.importorskip("moto.server", reason=MOTO_MISSING)
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one access-log line per request otherwise
    app = ConditionalRequestsInTurn(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    serving = threading.Thread(target=server.serve_forever, name="moto", daemon=True)
    serving.start()
    host, port = server.server_address[:2]
    yield S3Server(f"http://{host}:{port}")
    server.shutdown()
    serving.join()


class ConditionalRequestsInTurn:
    """moto's S3 app, answering one conditional request (``If-None-Match``, ``If-Match``) at a time.

    moto checks a conditional write's condition, then writes, with no lock between (``moto/s3/responses.py``): of
    two racing ``If-None-Match: *`` PUTs both succeed, where S3 (and Ceph RGW, SeaweedFS, GCS) refuses the second.
    Taking such requests in turn makes moto's answer S3's."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if "HTTP_IF_NONE_MATCH" not in environ and "HTTP_IF_MATCH" not in environ:
            return self.app(environ, start_response)
        with self.lock:
            return list(self.app(environ, start_response))


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
    return s3_test_store(s3_server, s3_bucket)


@pytest.fixture
def s3fs_store(s3_server: S3Server, s3_bucket: str) -> Store:
    """As :func:`s3_store`, through s3fs rather than obstore."""
    store = s3_test_store(s3_server, s3_bucket, client="s3fs")
    assert store.client == "s3fs"
    return store


@dataclass(frozen=True)
class MotoProcess(S3Server):
    """moto's server in a process of its own; :meth:`stop` ends it and removes its log."""

    process: subprocess.Popen[bytes] = field(repr=False, compare=False)
    workdir: Path = field(repr=False, compare=False)

    def stop(self) -> None:
        stop_process(self.process)
        shutil.rmtree(self.workdir, ignore_errors=True)


def why_moto_cannot_run() -> str | None:
    """Why moto's server cannot run here, or ``None`` when it can."""
    if any(importlib.util.find_spec(module) is None for module in ("moto", "flask", "flask_cors")):
        return MOTO_MISSING
    return None


def start_moto_process(*, timeout: float = START_TIMEOUT) -> MotoProcess:
    """Start ``python -m moto.server`` on a free loopback port and wait until it answers.

    Raises
    ------
    ServerStartError
        The server exited or did not answer within ``timeout`` seconds; names its log.
    """
    workdir = Path(tempfile.mkdtemp(prefix="datamount-moto-"))
    log = workdir / "moto.log"
    port = free_port()
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    process = start_daemon(command, log, cwd=workdir)
    server = MotoProcess(f"http://127.0.0.1:{port}", process=process, workdir=workdir)

    failed = functools.partial(exit_report, process, log)
    try:
        wait_until(server.answers, timeout=timeout, failed=failed, what=f"moto on {server.endpoint_url}")
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture(scope="session")
def s3_shared_server() -> Iterator[MotoProcess]:
    """moto in its own process for the whole session, never emptied: for datasets that tests only read."""
    yield from session_server("moto (own process)", why_moto_cannot_run, start_moto_process)


@pytest.fixture(scope="session")
def s3_shared_store(s3_shared_server: MotoProcess) -> Store:
    """A store on :func:`s3_shared_server` for the whole session, shared by the tests that only read it."""
    return s3_test_store(s3_shared_server, shared_bucket(s3_shared_server))
