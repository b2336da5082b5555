"""GCS stores against the real fake-gcs-server emulator: doctor, emulator discovery and how refusals read."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from datamount.storage import ObjectNotFoundError, StorePermissionError, open_store
from tests.servers.gcs import PROJECT, GCSServer

pytestmark = pytest.mark.gcs


def _datamount(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "datamount.cli.main", *args]
    env = {**os.environ, "COLUMNS": "200"}  # long URLs stay on one line of the report
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, check=False)


def test_doctor_finds_the_emulator_usable_and_cleans_up(gcs_server: GCSServer, gcs_bucket: str) -> None:
    url = f"gs://{gcs_bucket}/root"
    result = _datamount("doctor", url, "-o", f"endpoint_url={gcs_server.endpoint_url}", "-o", "token=anon", "--quick")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"datamount doctor {url}" in result.stdout
    assert "the store is usable" in result.stdout
    assert "FAILED" not in result.stdout
    assert gcs_server.object_names(gcs_bucket) == []


def test_storage_emulator_host_is_honoured(
    gcs_server: GCSServer, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.endpoint_url)
    store = open_store(f"gs://{gcs_bucket}/data")
    store.write("a/b.bin", b"through the emulator")
    assert store.endpoint == gcs_server.endpoint_url
    assert gcs_server.object_names(gcs_bucket) == ["data/a/b.bin"]


def test_a_missing_bucket_is_named(gcs_server: GCSServer) -> None:
    with pytest.raises(ObjectNotFoundError, match="gs://no-such-bucket-here/x"):
        open_store("gs://no-such-bucket-here/x", endpoint_url=gcs_server.endpoint_url, project=PROJECT)


def test_a_store_works_when_gcsfs_was_imported_first(gcs_server: GCSServer, gcs_bucket: str) -> None:
    # Imported first, gcsfs exposes its namespace-probing class, whose probe waits a minute per bucket on emulators.
    script = (
        "import gcsfs, sys\n"
        "from datamount.storage import open_store\n"
        "store = open_store(sys.argv[1], endpoint_url=sys.argv[2])\n"
        "store.write('x', b'payload')\n"
        "print(store.read('x').decode())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"}
    command = [sys.executable, "-c", script, f"gs://{gcs_bucket}/root", gcs_server.endpoint_url]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=45, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "payload"


class _ForbiddingHandler(http.server.BaseHTTPRequestHandler):
    """Answers every request as GCS does to credentials without the right: 403 with a JSON error."""

    def _forbid(self) -> None:
        body = json.dumps({"error": {"code": 403, "message": "caller does not have storage.objects.get access"}})
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    do_GET = do_POST = do_PUT = do_DELETE = _forbid

    def log_message(self, *args: object) -> None:
        """Keep the test output quiet."""


@pytest.fixture
def forbidding_endpoint() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ForbiddingHandler)
    thread = threading.Thread(target=server.serve_forever, name="forbidding-endpoint")
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()
    server.server_close()


def test_a_403_is_a_permission_error(forbidding_endpoint: str) -> None:
    with pytest.raises(StorePermissionError, match="GCS refused the credentials"):
        open_store("gs://bucket/x", endpoint_url=forbidding_endpoint)
    store = open_store("gs://bucket/x", endpoint_url=forbidding_endpoint, check=False)
    with pytest.raises(StorePermissionError, match="gs://bucket/x/obj"):
        store.read("obj")
    with pytest.raises(StorePermissionError):
        store.write("obj", b"x")
