"""Google Cloud Storage (and its emulators) through gcsfs."""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from datamount.storage import redact
from datamount.storage.backends._limits import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    retries_option,
    seconds_option,
)
from datamount.storage.backends._object_store import EndpointSettings, ObjectStore
from datamount.storage.backends._options import FSSPEC_OPTIONS, check_endpoint_url, parameter_names, refuse_unknown
from datamount.storage.errors import ObjectNotFoundError, StorePermissionError
from datamount.storage.store import Failure, short_reason

T = TypeVar("T")

#: New attempts after a failed request: gcsfs's own choice for GCS (6 attempts, about 31 s of backoff in all).
GCS_DEFAULT_RETRIES = 5
#: The options a GCS store takes besides gcsfs's own (``_gcsfs_options``).
DATAMOUNT_OPTIONS = frozenset({"token", "project", "endpoint_url", "connect_timeout", "read_timeout", "retries"})


class GCSStore(ObjectStore):
    """A bucket (and prefix) on Google Cloud Storage.

    Options are those of :class:`gcsfs.GCSFileSystem` (``token``, ``project``, ``endpoint_url``...); credentials
    otherwise come from Google's Application Default Credentials. With ``endpoint_url`` (an emulator) and no
    ``token``, requests are anonymous. ``STORAGE_EMULATOR_HOST`` is honoured as gcsfs does.

    ``connect_timeout`` (seconds, default 5), ``read_timeout`` (seconds without a byte of the answer, default 30)
    and ``retries`` (new attempts after a failed request, default 5, with gcsfs's backoff of about 1, 2, 4, 8, 16
    seconds) bound how long a failing endpoint can hold an operation. Connection errors, timeouts, 5xx and 429
    answers, and answers cut short, are retried.
    """

    protocol = "gs"
    service = "GCS"

    @classmethod
    def from_url(cls, url: str, *, name: str | None = None, **options: Any) -> GCSStore:
        # gcsfs's hierarchical-namespace probe is a gRPC call per bucket that hangs for a minute against
        # emulators and S3-style gateways; datamount needs none of what it enables. The filesystem builds on the plain
        # class of gcsfs.core because ``gcsfs.GCSFileSystem`` is the probing one when gcsfs was imported first.
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        from datamount.storage.backends._gcs_client import RetryingGCSFileSystem

        root = cls.bucket_root(url, store="a GCS store")
        refuse_unknown(options, _gcsfs_options(), store="GCS", shown=DATAMOUNT_OPTIONS, more=", and gcsfs's own")
        check_endpoint_url(options.get("endpoint_url"))
        opts = dict(options)
        endpoint = opts.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST")
        if opts.get("endpoint_url"):
            opts.setdefault("token", "anon")
        opts.setdefault("skip_instance_cache", True)
        opts.setdefault("use_listings_cache", False)
        opts.setdefault("timeout", 30)
        read_timeout = seconds_option(opts.pop("read_timeout", DEFAULT_READ_TIMEOUT), "read_timeout")
        connect_timeout = seconds_option(opts.pop("connect_timeout", DEFAULT_CONNECT_TIMEOUT), "connect_timeout")
        if "requests_timeout" not in opts:
            import aiohttp

            # Per request: seconds to connect and seconds of silence, no cap on a whole transfer. gcsfs's default
            # is aiohttp's (5 minutes per request, on each of its 6 attempts).
            opts["requests_timeout"] = aiohttp.ClientTimeout(sock_connect=connect_timeout, sock_read=read_timeout)
        attempts = retries_option(opts.pop("retries", GCS_DEFAULT_RETRIES)) + 1
        fs = _within_deadline(lambda: RetryingGCSFileSystem(attempts=attempts, **opts), cls.check_timeout, root)
        settings = EndpointSettings(
            address=redact.redact_url(endpoint) if endpoint else "Google Cloud Storage",
            attempts=fs.attempts,
            read_timeout=read_timeout,
        )
        return cls(fs, root, url=f"gs://{root}", settings=settings, options=options, name=name)

    def check(self) -> None:
        self._call_with_deadline("open", self.fs._info, self.root.partition("/")[0])

    def _classify(self, exc: BaseException) -> Failure | None:
        import aiohttp

        if isinstance(exc, (aiohttp.ServerTimeoutError, asyncio.TimeoutError, TimeoutError)):
            return self._stopped_answering()
        if isinstance(exc, aiohttp.ClientPayloadError):
            return self._cut_short(exc)
        if isinstance(exc, aiohttp.ClientConnectionError):
            return self._did_not_answer(exc)
        code = getattr(exc, "code", None)
        # gcsfs turns a 403 answer into a plain OSError("Forbidden: ...") with no status code on it.
        forbidden = type(exc) is OSError and str(exc).startswith("Forbidden")
        if code in (401, 403) or forbidden:
            return Failure(StorePermissionError, f"GCS refused the credentials ({short_reason(exc)})")
        if code == 404:
            return Failure(ObjectNotFoundError, "not found")
        if isinstance(code, int) and (code >= 500 or code == 429):
            return self._failed_every_attempt(str(code), detail=short_reason(exc), throttling=code == 429)
        return None


@functools.cache
def _gcsfs_options() -> frozenset[str]:
    """Every option a GCS store takes: datamount's own, gcsfs's and fsspec's."""
    import gcsfs.core

    return DATAMOUNT_OPTIONS | parameter_names(gcsfs.core.GCSFileSystem.__init__) | FSSPEC_OPTIONS


def _within_deadline(make: Callable[[], T], seconds: float, root: str) -> T:
    """``make()``, given up after ``seconds``. gcsfs finds its credentials as it is made, and without any, Google's
    default chain asks the Compute Engine metadata server, with backoff: 15 s where that server does not answer,
    before the open check's own deadline starts. The thread making it is a daemon left to finish on its own."""
    made: Future[T] = Future()

    def run() -> None:
        try:
            made.set_result(make())
        except BaseException as exc:  # handed to the caller
            made.set_exception(exc)

    threading.Thread(target=run, name="datamount-gcs-credentials", daemon=True).start()
    try:
        return made.result(timeout=seconds)
    except FutureTimeout:
        raise StorePermissionError(
            f"cannot open gs://{root}: no Google credentials found within {seconds:g} s (the Compute Engine metadata "
            "server did not answer); set GOOGLE_APPLICATION_CREDENTIALS, run 'gcloud auth application-default "
            "login', or give token=anon for a public bucket"
        ) from None
