"""Amazon S3 and S3-compatible servers (Ceph RGW, SeaweedFS, MinIO, moto) through s3fs."""

from __future__ import annotations

import asyncio
import hashlib
import os
from typing import Any

from datamount.storage import redact
from datamount.storage.backends._limits import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_RETRIES,
    retries_option,
    seconds_option,
)
from datamount.storage.backends._object_store import EndpointSettings, ObjectStore
from datamount.storage.errors import ObjectNotFoundError, StoreConfigError, StorePermissionError
from datamount.storage.store import HASH_CHUNK, Failure

# S3 error codes that mean the credentials, not the path, are wrong.
_CREDENTIAL_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}
_ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
#: Ranged GETs in flight while hashing an object.
HASH_REQUESTS = 4


class S3Store(ObjectStore):
    """A bucket (and prefix) on S3 or any S3-compatible server.

    Options are those of :class:`s3fs.S3FileSystem` (``key``, ``secret``, ``anon``, ``profile``,
    ``client_kwargs``, ``config_kwargs``...) plus ``endpoint_url``, ``region_name`` and ``path_style``. Credentials
    and endpoint otherwise come from botocore's own chain (environment, ``~/.aws``, instance roles), including
    ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``. For endpoints other than AWS's, path-style addressing is the
    default and request checksums are sent only when required (several S3-compatible servers reject the newer
    botocore defaults).

    ``connect_timeout`` (seconds, default 5), ``read_timeout`` (seconds without a byte of the answer, default 30)
    and ``retries`` (new attempts after a failed request, default 2) bound how long a failing endpoint can hold an
    operation: about ``(retries + 1) * read_timeout`` plus a few seconds of backoff for one that stops answering.
    Connection errors, timeouts, 5xx answers and throttling (``503 SlowDown``) are retried by botocore, with
    exponential backoff; a GET whose body stops short of its ``Content-Length`` is sent again, as many times.
    """

    protocol = "s3"
    service = "S3"

    @classmethod
    def from_url(cls, url: str, *, name: str | None = None, **options: Any) -> S3Store:
        from datamount.storage.backends._s3_client import RetryingS3FileSystem

        root = cls.bucket_root(url, store="an S3 store")
        fs_options = s3_filesystem_options(options)
        config = fs_options["config_kwargs"]
        settings = EndpointSettings(
            address=redact.redact_url(fs_options.get("endpoint_url") or "AWS S3"),
            attempts=total_attempts(config["retries"]),
            read_timeout=config["read_timeout"],
        )
        fs = RetryingS3FileSystem(body_retries=settings.attempts - 1, **fs_options)
        return cls(fs, root, url=f"s3://{root}", settings=settings, options=options, name=name)

    def check(self) -> None:
        bucket, _, prefix = self.root.partition("/")

        async def list_one() -> None:
            await self.fs._call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix, MaxKeys=1)

        self._call_with_deadline("open", list_one)

    def sha256(self, path: str) -> str:
        # Ranged GETs through the filesystem's reads, which resend an answer cut short (s3fs's file objects do not).
        size = self.info(path).size
        digest = hashlib.sha256()
        chunks = ((start, min(start + HASH_CHUNK, size)) for start in range(0, size, HASH_CHUNK))
        for chunk in self.read_ranges(path, chunks, max_requests=HASH_REQUESTS):
            digest.update(chunk)
        return digest.hexdigest()

    def _classify(self, exc: BaseException) -> Failure | None:
        import botocore.exceptions as bex

        from datamount.storage.backends._s3_client import is_cut_short

        if isinstance(exc, (bex.ReadTimeoutError, asyncio.TimeoutError, TimeoutError)):
            return self._stopped_answering()
        if isinstance(exc, (bex.EndpointConnectionError, bex.ConnectTimeoutError, bex.ConnectionClosedError)):
            cause = getattr(exc, "kwargs", {}).get("error")
            return self._did_not_answer(cause if isinstance(cause, BaseException) else exc)
        if is_cut_short(exc):
            return self._cut_short(exc)
        if isinstance(exc, bex.NoCredentialsError):
            return Failure(
                StorePermissionError,
                "no S3 credentials found (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, "
                "or key/secret in the store's profile)",
            )
        code = _error_code(exc)
        if code == "NoSuchBucket":
            bucket = self.root.partition("/")[0]
            return Failure(ObjectNotFoundError, f"bucket {bucket!r} does not exist at {self.endpoint}")
        if code in _CREDENTIAL_CODES:
            return Failure(StorePermissionError, f"the S3 credentials were refused ({code})")
        if code == "PermanentRedirect" or "AuthorizationHeaderMalformed" in str(code):
            return Failure(StoreConfigError, f"wrong region for this bucket ({code}); set region_name")
        status = _http_status(exc)
        if status is not None and status >= 500:
            return self._failed_every_attempt(f"{status} {code}" if code else str(status), throttling=status == 503)
        return None


def _client_error_response(exc: BaseException) -> dict[str, Any] | None:
    """The botocore response behind ``exc`` (s3fs re-raises S3 errors as built-in exceptions caused by them)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        if isinstance(response, dict):
            return response
        current = current.__cause__ or current.__context__
    return None


def _http_status(exc: BaseException) -> int | None:
    status = ((_client_error_response(exc) or {}).get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return int(status) if status else None


def _error_code(exc: BaseException) -> str | None:
    return ((_client_error_response(exc) or {}).get("Error") or {}).get("Code")


def s3_filesystem_options(options: dict[str, Any]) -> dict[str, Any]:
    """The :class:`s3fs.S3FileSystem` keyword arguments for a store's options, with datamount's defaults."""
    opts = dict(options)
    endpoint = opts.pop("endpoint_url", None) or next((os.environ[v] for v in _ENDPOINT_ENV if os.environ.get(v)), None)
    region = opts.pop("region_name", None)
    path_style = opts.pop("path_style", endpoint is not None)
    client_kwargs = dict(opts.pop("client_kwargs", None) or {})
    config_kwargs = dict(opts.pop("config_kwargs", None) or {})
    if endpoint:
        opts["endpoint_url"] = endpoint
        config_kwargs.setdefault("request_checksum_calculation", "when_required")
        config_kwargs.setdefault("response_checksum_validation", "when_required")
    if region:
        client_kwargs.setdefault("region_name", region)
    if path_style:
        s3_config = dict(config_kwargs.get("s3") or {})
        s3_config.setdefault("addressing_style", "path")
        config_kwargs["s3"] = s3_config
    # datamount's own options win over the defaults; explicit botocore settings in config_kwargs win over both.
    config_kwargs.setdefault(
        "connect_timeout", seconds_option(opts.pop("connect_timeout", DEFAULT_CONNECT_TIMEOUT), "connect_timeout")
    )
    config_kwargs.setdefault(
        "read_timeout", seconds_option(opts.pop("read_timeout", DEFAULT_READ_TIMEOUT), "read_timeout")
    )
    retries = retries_option(opts.pop("retries", DEFAULT_RETRIES))
    config_kwargs.setdefault("retries", {"mode": "standard", "total_max_attempts": retries + 1})
    # One GET per small object: s3fs's concurrent ranged download would add a HEAD to every read.
    opts.setdefault("max_concurrency", 1)
    opts.setdefault("use_listings_cache", False)
    opts.setdefault("skip_instance_cache", True)
    opts["client_kwargs"] = client_kwargs
    opts["config_kwargs"] = config_kwargs
    return opts


def total_attempts(retry_config: dict[str, Any]) -> int:
    """Attempts botocore makes at one request under ``retry_config`` (its ``max_attempts`` counts retries only)."""
    if "total_max_attempts" in retry_config:
        return max(int(retry_config["total_max_attempts"]), 1)
    if "max_attempts" in retry_config:
        return max(int(retry_config["max_attempts"]) + 1, 1)
    return 3 if retry_config.get("mode") in ("standard", "adaptive") else 5
