"""Fetching public files over HTTP(S): cached, checked against their md5, resumed after a cut, retried with backoff.

One bounded retry loop covers every transient failure alike (no connection, a 5xx or 429 answer, a body cut short
or stalled): each new attempt asks only for the missing bytes (``Range: bytes=N-``), so a file is never fetched twice.
urllib3's ``Retry`` is not used on top of it: it handles only failures before the body, and nesting two retry layers
multiplies the attempts. ``requests`` supplies proxies (``HTTPS_PROXY``, ``NO_PROXY``), ``.netrc`` and TLS.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import http.client
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from datamount.datasets.errors import DownloadError, DownloadNotFoundError
from datamount.datasets.progress import Progress, Silent
from datamount.storage.errors import DatamountError, IntegrityError
from datamount.storage.redact import redact_url

if TYPE_CHECKING:  # requests is imported by the first download: reading datasets never needs it
    import requests

CHUNK = 1 << 20
#: Answers worth another attempt: the server or a proxy is busy or failing for now.
TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_TOTAL_ONLY = re.compile(r"bytes\s+\*/(\d+)")


def _network_failures() -> tuple[type[BaseException], ...]:
    import requests
    import urllib3

    return (requests.RequestException, urllib3.exceptions.HTTPError, http.client.HTTPException, ConnectionError,
            TimeoutError)  # fmt: skip


@dataclass(frozen=True)
class RetryPolicy:
    """How hard a download tries: attempts per URL, the pause before the second one (doubled after each failure,
    at most ``max_backoff`` seconds), and socket timeouts."""

    attempts: int = 5
    backoff: float = 1.0
    max_backoff: float = 30.0
    connect_timeout: float = 15.0
    read_timeout: float = 60.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"a download needs at least one attempt, got attempts={self.attempts}")
        if self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("backoff pauses cannot be negative")
        if self.connect_timeout <= 0 or self.read_timeout <= 0:
            raise ValueError("timeouts must be positive")

    def pause(self, failures: int) -> float:
        """Seconds to wait after ``failures`` failed attempts (1 for the first)."""
        return float(min(self.backoff * 2 ** (failures - 1), self.max_backoff))


class _Transient(Exception):
    """An attempt failed in a way another attempt may not (the reason is the message)."""


#: What every md5 mismatch says to do about a site's own copy of the files.
SITE_COPY_HINT = "for a site's own copy of the files, give their md5s with --checksums FILE (md5sum's format)"


def md5_file(path: str | os.PathLike[str]) -> str:
    """The hex md5 of a local file (the checksum public datasets publish)."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb", buffering=0) as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(
    urls: Sequence[str],
    destination: str | os.PathLike[str],
    *,
    md5: str,
    retry: RetryPolicy | None = None,
    progress: Progress | None = None,
    session: requests.Session | None = None,
) -> Path:
    """Make ``destination`` hold the file whose md5 is ``md5``, downloading it from the first of ``urls`` that
    serves it; return its path.

    A copy already there with the right md5 is used as it is. A download goes to ``destination.part`` and is renamed
    only once its md5 matches; a partial file left by an interrupted run is resumed, not started over. Several
    processes fetching the same file take turns (a lock beside it). A file whose md5 does not match is deleted and
    :class:`~datamount.storage.IntegrityError` is raised; HTTP failures raise :class:`DownloadError`.
    """
    if not urls:
        raise ValueError(f"no URL to download {os.fspath(destination)} from")
    target = Path(destination)
    target.parent.mkdir(parents=True, exist_ok=True)
    policy = retry or RetryPolicy()
    report = progress or Silent()
    with _locked(target), _session(session) as client:
        if target.exists():
            if md5_file(target) == md5:
                return target
            target.unlink()  # a damaged cached copy
        part = target.with_name(target.name + ".part")
        failures: list[DatamountError] = []
        for url in urls:
            try:
                _download_checked(client, url, part, md5, policy, report)
            except (DownloadError, IntegrityError) as exc:
                failures.append(exc)
                continue
            os.replace(part, target)
            return target
    if len(failures) == 1:
        raise failures[0]
    raise DownloadError(f"could not download {target.name} from any of its {len(urls)} URLs:\n  " + _lines(failures))


def _lines(failures: Sequence[Exception]) -> str:
    return "\n  ".join(str(failure) for failure in failures)


def _download_checked(
    client: requests.Session, url: str, part: Path, md5: str, policy: RetryPolicy, report: Progress
) -> None:
    resumed = part.exists() and part.stat().st_size > 0
    _download(client, url, part, policy, report)
    if md5_file(part) == md5:
        return
    if resumed:  # the kept bytes may come from another copy of the file: start over once
        part.unlink()
        _download(client, url, part, policy, report)
        if md5_file(part) == md5:
            return
    found = md5_file(part)
    part.unlink()
    raise IntegrityError(
        f"{redact_url(url)}: the downloaded file's md5 is {found}, expected {md5}; it was deleted "
        f"(the server sent other bytes than the published file); {SITE_COPY_HINT}"
    )


class _Meter:
    """Reports one file's download to a :class:`Progress`: the phase starts at the first answer (when the size is
    known), and each byte is counted once however many attempts it takes."""

    def __init__(self, report: Progress) -> None:
        self.report = report
        self.started = False
        self.counted = 0

    def begin(self, total: int | None) -> None:
        if not self.started:
            self.report.start("download", items=1, size=total or 0)
            self.started = True

    def reached(self, position: int) -> None:
        if position > self.counted:
            self.report.advance(items=0, size=position - self.counted)
            self.counted = position

    def end(self) -> None:
        if self.started:
            self.report.advance(items=1, size=0)
            self.report.finish()


def _download(client: requests.Session, url: str, part: Path, policy: RetryPolicy, report: Progress) -> None:
    """Complete ``part`` from ``url``, resuming from its current size after every transient failure."""
    meter = _Meter(report)
    failures = 0
    while True:
        try:
            _attempt(client, url, part, policy, meter)
        except _Transient as exc:
            failures += 1
            if failures >= policy.attempts:
                kept = part.stat().st_size if part.exists() else 0
                resume = f"; the {kept:,} bytes received are kept and the next try resumes" if kept else ""
                raise DownloadError(
                    f"could not download {redact_url(url)}: {exc} (after {failures} attempts){resume}"
                ) from None
            time.sleep(policy.pause(failures))
            continue
        meter.end()
        return


def _attempt(client: requests.Session, url: str, part: Path, policy: RetryPolicy, meter: _Meter) -> None:
    offset = part.stat().st_size if part.exists() else 0
    headers = {"Accept-Encoding": "identity"}  # the exact bytes, never a re-encoded body
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        with client.get(
            url, headers=headers, stream=True, timeout=(policy.connect_timeout, policy.read_timeout)
        ) as response:
            if response.status_code == 416 and offset:
                _check_complete(response, part, offset)
                return
            _check_status(response, url)
            append = response.status_code == 206
            if append and _range_start(response) != offset:
                part.unlink(missing_ok=True)
                raise _Transient("the server answered with another byte range than asked; starting over")
            if not append:
                offset = 0  # the server sent the whole file (it ignores Range, or this is a fresh start)
            expected = _expected_total(response, offset)
            meter.begin(expected)
            meter.reached(offset)
            written = _receive(response, part, append=append, start=offset, meter=meter)
    except DatamountError:
        raise
    except _network_failures() as exc:  # a local write failing (a full disk) is not worth another attempt
        raise _Transient(_reason(exc)) from exc
    if expected is not None and offset + written < expected:
        raise _Transient(f"the connection closed after {offset + written:,} of {expected:,} bytes")


def _check_status(response: requests.Response, url: str) -> None:
    status = response.status_code
    if status in (200, 206):
        return
    described = f"HTTP {status} {response.reason or ''}".rstrip()
    if status in TRANSIENT_STATUSES:
        raise _Transient(described)
    if status in (404, 410):
        raise DownloadNotFoundError(f"could not download {redact_url(url)}: {described}")
    raise DownloadError(f"could not download {redact_url(url)}: {described}")


def _check_complete(response: requests.Response, part: Path, offset: int) -> None:
    """A 416 answer to ``Range: bytes=offset-``: fine when the file is exactly ``offset`` bytes long."""
    match = _TOTAL_ONLY.fullmatch(response.headers.get("Content-Range", "").strip())
    if match and int(match.group(1)) == offset:
        return
    part.unlink()  # longer than the file on the server: not a prefix of it
    raise _Transient("the kept partial download does not fit the file on the server; starting over")


def _range_start(response: requests.Response) -> int | None:
    match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
    return int(match.group(1)) if match else None


def _expected_total(response: requests.Response, offset: int) -> int | None:
    length = response.headers.get("Content-Length", "")
    return offset + int(length) if length.isdigit() else None


def _receive(response: requests.Response, part: Path, *, append: bool, start: int, meter: _Meter) -> int:
    written = 0
    with open(part, "ab" if append else "wb") as out:
        for chunk in response.raw.stream(CHUNK, decode_content=False):
            out.write(chunk)
            written += len(chunk)
            meter.reached(start + written)
    return written


def _reason(exc: BaseException) -> str:
    """A short reason for a failed attempt, without the URL (the caller names it)."""
    import requests
    import urllib3

    if isinstance(exc, (requests.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)):
        return "the server stopped answering (timeout)"
    if isinstance(exc, (urllib3.exceptions.ProtocolError, requests.exceptions.ChunkedEncodingError)):
        return "the connection broke during the transfer"
    if isinstance(exc, requests.ConnectionError):
        return "could not connect"
    return type(exc).__name__ + (f": {exc}" if str(exc) else "")


@contextlib.contextmanager
def _session(given: requests.Session | None) -> Iterator[requests.Session]:
    if given is not None:
        yield given
        return
    import requests

    with requests.Session() as session:
        yield session


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    """Hold an exclusive lock beside ``target`` (released when the process dies, too)."""
    with open(target.with_name(target.name + ".lock"), "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
