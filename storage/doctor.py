"""``datamount doctor``: can this store be used, how fast is it, and what is wrong when it is not."""

from __future__ import annotations

import contextlib
import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from datamount.storage.errors import (
    BackendNotInstalledError,
    DatamountError,
    MountError,
    ObjectExistsError,
    ObjectNotFoundError,
    StoreConfigError,
    StorePermissionError,
    StoreUnreachableError,
)
from datamount.storage.factory import open_store
from datamount.storage.store import Store, short_reason

PROBE_FOLDER = ".datamount-doctor"


@dataclass(frozen=True)
class Step:
    """One check: what was tried, whether it worked, and what was seen."""

    name: str
    ok: bool
    detail: str
    seconds: float


@dataclass(frozen=True)
class Measurement:
    """One figure of the store's speed."""

    name: str
    value: float
    unit: str


@dataclass
class Report:
    """Everything ``doctor`` found."""

    target: str
    store: Store | None = None
    steps: list[Step] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every check passed: the store is usable."""
        return bool(self.steps) and all(step.ok for step in self.steps)


def run_doctor(
    target: str | None = None,
    *,
    small_count: int = 32,
    small_size: int = 4096,
    large_size: int = 16 << 20,
    **options: Any,
) -> Report:
    """Open ``target`` and check that it can list, write, read back and delete a probe, then measure it."""
    report = Report(target=target or "(default store)")
    started = time.perf_counter()
    try:
        store = open_store(target, **options)
    except DatamountError as exc:
        report.steps.append(Step("open", False, str(exc), time.perf_counter() - started))
        report.advice.append(explain(exc))
        return report
    report.store = store
    report.target = store.url
    report.steps.append(Step("open", True, f"{store!r}", time.perf_counter() - started))
    probe = f"{PROBE_FOLDER}/{uuid.uuid4().hex[:12]}"
    try:
        _run_checks(report, store, probe, small_count, small_size, large_size)
    finally:
        _cleanup(report, store, probe)
    return report


def _run_checks(report: Report, store: Store, probe: str, small_count: int, small_size: int, large_size: int) -> None:
    payload = os.urandom(small_size)
    checks: list[tuple[str, Callable[[], str]]] = [
        ("list", lambda: f"{len(store.list('', recursive=False))} object(s) at the root"),
        ("write", lambda: _write(store, f"{probe}/probe", payload)),
        ("read back", lambda: _read_back(store, f"{probe}/probe", payload)),
        ("exclusive create", lambda: _exclusive_create(report, store, f"{probe}/created")),
        ("small objects", lambda: _measure_small(report, store, probe, small_count, small_size)),
        ("large object", lambda: _measure_large(report, store, probe, large_size)),
    ]
    for name, check in checks:
        if not _step(report, name, check):
            return


def _step(report: Report, name: str, check: Callable[[], str]) -> bool:
    started = time.perf_counter()
    try:
        detail = check()
    except (DatamountError, OSError, AssertionError) as exc:
        report.steps.append(Step(name, False, str(exc) or short_reason(exc), time.perf_counter() - started))
        report.advice.append(explain(exc))
        return False
    report.steps.append(Step(name, True, detail, time.perf_counter() - started))
    return True


def _write(store: Store, path: str, payload: bytes) -> str:
    store.write(path, payload)
    return f"{len(payload)} bytes to {store.url_for(path)}"


def _read_back(store: Store, path: str, payload: bytes) -> str:
    data = store.read(path)
    if data != payload:
        raise StoreConfigError(f"read back {len(data)} bytes that differ from the {len(payload)} written")
    return "same bytes as written"


def _exclusive_create(report: Report, store: Store, path: str) -> str:
    """Versions are committed with an exclusive create: check that the second of two creates is refused."""
    store.create(path, b"first")
    try:
        store.create(path, b"second")
    except ObjectExistsError:
        refused = True
    else:
        refused = False
    if refused and store.exclusive_create:
        return "a second create of one path was refused: racing writers never commit one version twice"
    if refused:
        report.advice.append(
            "this backend cannot make a create exclusive (it looks, then writes): two writers committing to one "
            "dataset at the same moment could take the same version number; let one writer at a time commit"
        )
        return "refused here, but not guaranteed under a race by this backend"
    raise StoreConfigError(
        f"a second create of {store.url_for(path)} was accepted: the server ignores conditional writes "
        "(If-None-Match / generation match), so two writers could both commit one version; upgrade it"
    )


def _measure_small(report: Report, store: Store, probe: str, count: int, size: int) -> str:
    paths = [f"{probe}/small/{i:05d}" for i in range(count)]
    write_latency = [_timed(partial(store.write, p, os.urandom(size))) for p in paths]
    read_latency = [_timed(partial(store.read, p)) for p in paths[: min(count, 16)]]
    started = time.perf_counter()
    total = sum(len(data) for data in store.read_many(paths, sizes=[size] * count))
    elapsed = time.perf_counter() - started
    figures = [
        Measurement("small write latency (median)", statistics.median(write_latency) * 1000, "ms"),
        Measurement("small read latency (median)", statistics.median(read_latency) * 1000, "ms"),
        Measurement(f"small reads, {store.default_max_requests} in flight", count / elapsed, "objects/s"),
    ]
    report.measurements.extend(figures)
    return f"{count} x {size} bytes written and read ({total} bytes)"


def _measure_large(report: Report, store: Store, probe: str, size: int) -> str:
    payload = os.urandom(size)
    path = f"{probe}/large"
    write_seconds = _timed(lambda: store.write(path, payload))
    read_seconds = _timed(lambda: store.read(path))
    report.measurements.extend(
        [
            Measurement("large write throughput", size / write_seconds / 1e6, "MB/s"),
            Measurement("large read throughput", size / read_seconds / 1e6, "MB/s"),
        ]
    )
    return f"{size / 1e6:.1f} MB written and read"


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _cleanup(report: Report, store: Store, probe: str) -> None:
    if not any(step.name == "write" for step in report.steps):
        return
    _step(report, "delete", lambda: _delete(store, probe))


def _delete(store: Store, probe: str) -> str:
    store.remove(probe, recursive=True, missing_ok=True)
    left = store.list(probe)
    if left:
        raise StoreConfigError(f"{len(left)} probe object(s) are still there after delete")
    with contextlib.suppress(DatamountError, OSError):
        if not store.list(PROBE_FOLDER):
            store.remove(PROBE_FOLDER, recursive=True, missing_ok=True)
    return "probe objects removed"


def explain(exc: BaseException) -> str:
    """What a user should check or do about ``exc``."""
    message = str(exc)
    for kind, advice in _ADVICE:
        if isinstance(exc, kind):
            return advice(message)
    return "see the message above; run with --debug for the full traceback"


def _unreachable(message: str) -> str:
    text = (
        "nothing answered: check that the server is running, that the store's host and port are right "
        "(for S3: endpoint_url, or AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL) and that no firewall is in the way"
    )
    if _virtual_host_on_ip(message):
        text += "; the endpoint is an IP address, so path-style addressing is needed: set path_style = true"
    return text


def _virtual_host_on_ip(message: str) -> bool:
    for word in message.replace('"', " ").split():
        if word.startswith(("http://", "https://")):
            host = urlsplit(word).hostname or ""
            first, _, rest = host.partition(".")
            if rest and rest.replace(".", "").isdigit() and not first.isdigit():
                return True
    return False


_ADVICE: list[tuple[type[BaseException], Callable[[str], str]]] = [
    (MountError, lambda m: "mount the shared volume first, or fix the store's 'mount' option if it is wrong"),
    (BackendNotInstalledError, lambda m: "install the package named above, then run doctor again"),
    (StoreUnreachableError, _unreachable),
    (
        StorePermissionError,
        lambda m: (
            "credentials are missing, wrong or lack the right: for S3 check AWS_ACCESS_KEY_ID / "
            "AWS_SECRET_ACCESS_KEY, AWS_PROFILE or key/secret in the profile; for GCS run "
            "'gcloud auth application-default login'; for a folder, check its owner and mode"
        ),
    ),
    (
        ObjectNotFoundError,
        lambda m: "the bucket or folder does not exist: create it (e.g. 'aws s3 mb s3://BUCKET') or fix the URL",
    ),
    (StoreConfigError, lambda m: "fix the store's URL or options as the message says"),
    (OSError, lambda m: "the storage backend failed; the message above names the path and the cause"),
]
