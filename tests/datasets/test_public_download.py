"""Downloads against a real HTTP server on loopback: checksums, resume after a cut, retries, clear errors."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datamount.datasets.errors import DownloadError, DownloadNotFoundError
from datamount.datasets.public.download import RetryPolicy, fetch, md5_file
from datamount.storage import IntegrityError
from tests.datasets.http_files import FileServer

FAST = RetryPolicy(attempts=4, backoff=0.0)
DATA = os.urandom(300_000)
DATA_MD5 = hashlib.md5(DATA, usedforsecurity=False).hexdigest()


@pytest.fixture(scope="module")
def module_server() -> Iterator[FileServer]:
    with FileServer() as server:
        yield server


@pytest.fixture
def server() -> Iterator[FileServer]:
    with FileServer() as server:
        yield server


def test_downloads_and_checks_the_md5(server: FileServer, tmp_path: Path) -> None:
    url = server.add("files/data.bin", DATA)
    path = fetch([url], tmp_path / "data.bin", md5=DATA_MD5, retry=FAST)
    assert path.read_bytes() == DATA
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin", "data.bin.lock"]


def test_a_cached_copy_is_used_without_asking_the_server(server: FileServer, tmp_path: Path) -> None:
    url = server.add("data.bin", DATA)
    fetch([url], tmp_path / "data.bin", md5=DATA_MD5, retry=FAST)
    fetch([url], tmp_path / "data.bin", md5=DATA_MD5, retry=FAST)
    assert len(server.requests_for("data.bin")) == 1


def test_a_damaged_cached_copy_is_fetched_again(server: FileServer, tmp_path: Path) -> None:
    url = server.add("data.bin", DATA)
    (tmp_path / "data.bin").write_bytes(DATA[:-1] + b"?")
    assert fetch([url], tmp_path / "data.bin", md5=DATA_MD5, retry=FAST).read_bytes() == DATA


def test_a_cut_download_resumes_where_it_stopped(server: FileServer, tmp_path: Path) -> None:
    url = server.add("data.bin", DATA)
    server.cut("data.bin", after=123_457)
    path = fetch([url], tmp_path / "data.bin", md5=DATA_MD5, retry=FAST)
    assert path.read_bytes() == DATA
    asked = [request.range for request in server.requests_for("data.bin")]
    assert asked == [None, "bytes=123457-"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(DATA) - 1), min_size=1, max_size=3))
def test_any_cuts_still_give_the_exact_bytes(module_server: FileServer, tmp_path_factory, cuts: list[int]) -> None:
    folder = tmp_path_factory.mktemp("cuts")
    name = f"cut-{os.urandom(4).hex()}.bin"
    url = module_server.add(name, DATA)
    for cut in cuts:  # each cut applies to one response, counted from that response's first byte
        module_server.cut(name, after=cut)
    path = fetch([url], folder / name, md5=DATA_MD5, retry=RetryPolicy(attempts=len(cuts) + 1, backoff=0))
    assert path.read_bytes() == DATA


def test_a_partial_file_from_an_earlier_run_is_resumed(server: FileServer, tmp_path: Path) -> None:
    url = server.add("data.bin", DATA)
    server.cut("data.bin", after=200_000, times=None)  # every attempt of this run is cut
    with pytest.raises(DownloadError, match="200,000 bytes received are kept"):
        fetch([url], tmp_path / "data.bin", md5=DATA_MD5, retry=RetryPolicy(attempts=1, backoff=0))
    assert (tmp_path / "data.bin.part").read_bytes() == DATA[:200_000]
    assert not (tmp_path / "data.bin").exists()
    fresh = FileServer()  # the same file, served without faults: the next run asks only for the rest
    try:
        again = fresh.add("data.bin", DATA)
        assert fetch([again], tmp_path / "data.bin", md5=DATA_MD5, retry=FAST).read_bytes() == DATA
        assert [request.range for request in fresh.requests_for("data.bin")] == ["bytes=200000-"]
    finally:
        fresh.close()


def test_a_complete_partial_file_needs_no_more_bytes(server: FileServer, tmp_path: Path) -> None:
    url = server.add("data.bin", DATA)
    (tmp_path / "data.bin.part").write_bytes(DATA)  # killed after the last byte, before the rename
    assert fetch([url], tmp_path / "data.bin", md5=DATA_MD5, retry=FAST).read_bytes() == DATA
    assert [request.status for request in server.requests_for("data.bin")] == [416]


def test_a_server_that_ignores_range_sends_the_whole_file_again(server: FileServer, tmp_path: Path) -> None:
    url = server.add("data.bin", DATA)
    server.cut("data.bin", after=1000)
    server.ignore_range("data.bin")
    assert fetch([url], tmp_path / "data.bin", md5=DATA_MD5, retry=FAST).read_bytes() == DATA
    assert [request.status for request in server.requests_for("data.bin")] == [200, 200]


def test_transient_errors_are_retried(server: FileServer, tmp_path: Path) -> None:
    url = server.add("data.bin", DATA)
    server.fail("data.bin", 503, times=2)
    assert fetch([url], tmp_path / "data.bin", md5=DATA_MD5, retry=FAST).read_bytes() == DATA
    assert [request.status for request in server.requests_for("data.bin")] == [503, 503, 200]


def test_a_failing_server_gives_up_after_the_attempts_naming_url_and_status(server: FileServer, tmp_path: Path) -> None:
    url = server.add("data.bin", DATA)
    server.fail("data.bin", 500)
    with pytest.raises(DownloadError) as caught:
        fetch([url], tmp_path / "data.bin", md5=DATA_MD5, retry=RetryPolicy(attempts=3, backoff=0))
    assert str(caught.value) == f"could not download {url}: HTTP 500 Internal Server Error (after 3 attempts)"
    assert len(server.requests_for("data.bin")) == 3
    assert isinstance(caught.value, ConnectionError)


@pytest.mark.parametrize("status", [403, 404, 410], ids=["forbidden", "not-found", "gone"])
def test_a_refusal_is_not_retried(server: FileServer, tmp_path: Path, status: int) -> None:
    url = server.add("data.bin", DATA)
    server.fail("data.bin", status)
    with pytest.raises(DownloadError, match=f"could not download {url}: HTTP {status}") as caught:
        fetch([url], tmp_path / "data.bin", md5=DATA_MD5, retry=FAST)
    assert len(server.requests_for("data.bin")) == 1
    assert isinstance(caught.value, DownloadNotFoundError) == (status != 403)


def test_wrong_bytes_are_deleted_and_reported(server: FileServer, tmp_path: Path) -> None:
    url = server.add("data.bin", DATA)
    server.corrupt("data.bin")
    with pytest.raises(
        IntegrityError, match=f"{url}: the downloaded file's md5 is [0-9a-f]{{32}}, expected {DATA_MD5}"
    ):
        fetch([url], tmp_path / "data.bin", md5=DATA_MD5, retry=FAST)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin.lock"]


def test_a_resumed_file_that_does_not_check_out_is_fetched_once_more_from_scratch(
    server: FileServer, tmp_path: Path
) -> None:
    url = server.add("data.bin", DATA)
    (tmp_path / "data.bin.part").write_bytes(b"x" * 1000)  # bytes of some other file
    assert fetch([url], tmp_path / "data.bin", md5=DATA_MD5, retry=FAST).read_bytes() == DATA
    assert [request.range for request in server.requests_for("data.bin")] == ["bytes=1000-", None]


def test_the_next_url_is_tried_when_one_fails(server: FileServer, tmp_path: Path) -> None:
    broken = server.add("mirror-a/data.bin", DATA)
    good = server.add("mirror-b/data.bin", DATA)
    server.fail("mirror-a/data.bin", 404)
    assert fetch([broken, good], tmp_path / "data.bin", md5=DATA_MD5, retry=FAST).read_bytes() == DATA


def test_every_failing_url_is_named(server: FileServer, tmp_path: Path) -> None:
    first, second = server.add("a/data.bin", DATA), server.add("b/data.bin", DATA)
    server.fail("a/data.bin", 404)
    server.corrupt("b/data.bin")
    with pytest.raises(DownloadError) as caught:
        fetch([first, second], tmp_path / "data.bin", md5=DATA_MD5, retry=FAST)
    message = str(caught.value)
    assert message.startswith("could not download data.bin from any of its 2 URLs:")
    assert f"{first}: HTTP 404" in message and f"{second}: the downloaded file's md5" in message


def test_nothing_listening_is_a_connection_error(tmp_path: Path) -> None:
    with FileServer() as gone:
        url = gone.url + "/data.bin"
    with pytest.raises(DownloadError, match=f"could not download {url}: could not connect"):
        fetch([url], tmp_path / "data.bin", md5=DATA_MD5, retry=RetryPolicy(attempts=2, backoff=0))


def test_credentials_in_a_url_are_never_shown(server: FileServer, tmp_path: Path) -> None:
    server.add("data.bin", DATA)
    server.fail("data.bin", 404)
    url = server.url.replace("http://", "http://alice:s3cret-pass@") + "/data.bin"
    with pytest.raises(DownloadError) as caught:
        fetch([url], tmp_path / "data.bin", md5=DATA_MD5, retry=FAST)
    assert "s3cret-pass" not in str(caught.value) and "alice" not in str(caught.value)
    assert "***@127.0.0.1" in str(caught.value)


def test_md5_file_matches_hashlib(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(DATA)
    assert md5_file(tmp_path / "f") == DATA_MD5


@pytest.mark.parametrize(
    "options",
    [{"attempts": 0}, {"backoff": -1.0}, {"read_timeout": 0.0}],
    ids=["no-attempt", "negative-backoff", "zero-timeout"],
)
def test_retry_policy_checks_its_values(options: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**options)


def test_backoff_doubles_up_to_its_cap() -> None:
    policy = RetryPolicy(backoff=0.5, max_backoff=3.0)
    assert [policy.pause(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
