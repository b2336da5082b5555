"""A GCS store with no credentials anywhere: Google's default chain then asks the Compute Engine metadata server,
with backoff; where that server does not answer, opening the store failed only after 27 s (15 s finding
credentials, then the open check's own 12 s). It fails within the open deadline, saying what to set."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server on loopback that accepts connections and never answers (as an unreachable metadata server)."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


@pytest.mark.timeout(60)
def test_no_credentials_fail_within_the_open_deadline(silent_server: str, tmp_path: Path) -> None:
    keep = ("PATH", "HOME", "LANG", "PYTHONPATH", "VIRTUAL_ENV", "SYSTEMROOT")
    environment = {key: value for key, value in os.environ.items() if key in keep}
    environment |= {
        "GCE_METADATA_HOST": silent_server,
        "GCE_METADATA_IP": silent_server,
        "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),  # no gcloud login on this machine either
        "HOME": str(tmp_path),
    }
    command = [sys.executable, "-m", "datamount.cli.main", "ls", "--store", "gs://datamount-no-credentials"]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=50, check=False)
    elapsed = time.monotonic() - started
    assert done.returncode == 4, done.stderr
    assert done.stderr.startswith("datamount: error: cannot open gs://datamount-no-credentials: no Google credentials")
    assert "GOOGLE_APPLICATION_CREDENTIALS" in done.stderr and "token=anon" in done.stderr
    assert elapsed < 12 + 8, f"took {elapsed:.1f} s"  # the open deadline, and the interpreter's start
