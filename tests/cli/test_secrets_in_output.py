"""No secret reaches what the command writes: its error line, its ``--debug`` traceback (whose chained exceptions
quote the backends' own messages, endpoint URL included) and the library logs ``--debug`` shows."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

PASSWORD = "hunter2pass"
SECRET_KEY = "SuperSecretKey123"
ACCESS_KEY = "AKIAEXAMPLEKEY"
SECRETS = (PASSWORD, SECRET_KEY, ACCESS_KEY)


def closed_port() -> int:
    """A loopback port nothing listens on (a store there refuses every connection)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def store_arguments(kind: str, port: int) -> list[str]:
    if kind == "s3 endpoint":
        endpoint = f"http://alice:{PASSWORD}@127.0.0.1:{port}"
        return ["--store", "s3://bucket", "-o", f"endpoint_url={endpoint}", "-o", f"key={ACCESS_KEY}",
                "-o", f"secret={SECRET_KEY}", "-o", "retries=0"]  # fmt: skip
    return ["--store", f"http://alice:{PASSWORD}@127.0.0.1:{port}/data"]


def run_datamount(*args: str, code: str = "") -> subprocess.CompletedProcess[str]:
    """The real command in a process of its own (``code`` run after it, before the process exits)."""
    after = code or "    pass\n"
    program = f"import sys\nfrom datamount.cli.main import main\ntry:\n    main(sys.argv[1:])\nfinally:\n{after}"
    return subprocess.run(
        [sys.executable, "-c", program, *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize("debug", [False, True], ids=["one line", "--debug"])
@pytest.mark.parametrize("kind", ["s3 endpoint", "http store"])
def test_no_secret_in_an_error_or_its_traceback(kind: str, debug: bool) -> None:
    done = run_datamount(*(["--debug"] if debug else []), "ls", *store_arguments(kind, closed_port()))
    output = done.stdout + done.stderr
    for secret in SECRETS:
        assert secret not in output, output
    assert done.returncode == 5, output  # the store did not answer, with --debug too
    assert "http://***@127.0.0.1" in output
    if debug:
        assert "Traceback (most recent call last)" in done.stderr and "StoreUnreachableError" in done.stderr
    else:
        [line] = done.stderr.splitlines()
        assert line.startswith("datamount: error: cannot ")


def test_no_secret_in_the_library_logs_debug_shows() -> None:
    """A library's record quoting the endpoint URL and the secret key, formatted by the handler ``--debug`` sets."""
    port = closed_port()
    url = f"http://alice:{PASSWORD}@127.0.0.1:{port}/bucket"
    record = f"logging.getLogger('botocore.retries').warning('retry %s as %s', {url!r}, {SECRET_KEY!r})"
    log = f"    import logging\n    {record}\n"
    done = run_datamount("--debug", "ls", *store_arguments("s3 endpoint", port), code=log)
    assert "botocore.retries: WARNING: retry http://***@127.0.0.1" in done.stderr, done.stderr
    for secret in SECRETS:
        assert secret not in done.stdout + done.stderr, done.stderr
