"""Amazon S3 and S3-compatible servers (Ceph RGW, SeaweedFS, MinIO, moto) through s3fs."""

from __future__ import annotations

import os
from typing import Any

from datamount.storage import redact
from datamount.storage.errors import (
    ObjectNotFoundError,
    StoreConfigError,
    StorePermissionError,
    StoreUnreachableError,
)
from datamount.storage.store import Failure, Store, short_reason

# S3 error codes that mean the credentials, not the path, are wrong.
_CREDENTIAL_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}
_ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")

#: s3fs settings that bound the time a dead or refusing endpoint can take before an error reaches the user.
TIMEOUTS = {"connect_timeout": 5, "read_timeout": 30}
RETRIES = {"max_attempts": 2, "mode": "standard"}
S3FS_RETRIES = 3


class S3Store(Store):
    """A bucket (and prefix) on S3 or any S3-compatible server.

    Options are those of :class:`s3fs.S3FileSystem` (``key``, ``secret``, ``anon``, ``profile``,
    ``client_kwargs``, ``config_kwargs``...) plus ``endpoint_url``, ``region_name`` and ``path_style``. Credentials
    and endpoint otherwise come from botocore's own chain (environment, ``~/.aws``, instance roles), including
    ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``. For endpoints other than AWS's, path-style addressing is the
    default and request checksums are sent only when required (several S3-compatible servers reject the newer
    botocore defaults).
    """

    protocol = "s3"
    atomic_put = True
    needs_dirs = False
    default_max_requests = 32

    @classmethod
    def from_url(cls, url: str, *, name: str | None = None, **options: Any) -> S3Store:
        import s3fs

        bucket_path = url.split("://", 1)[1] if "://" in url else url
        if not bucket_path.strip("/"):
            raise StoreConfigError(f"an S3 store needs a bucket: s3://BUCKET[/PREFIX], got {url!r}")
        fs_options = s3_filesystem_options(options)
        root = bucket_path.strip("/")
        fs = s3fs.S3FileSystem(**fs_options)
        fs.retries = S3FS_RETRIES  # a class attribute in s3fs, not a constructor argument
        store = cls(fs, root, url=f"s3://{root}", options=options, name=name)
        store._endpoint = redact.redact_url(fs_options.get("endpoint_url") or "AWS S3")
        return store

    @property
    def endpoint(self) -> str:
        return getattr(self, "_endpoint", "AWS S3")

    def check(self) -> None:
        bucket, _, prefix = self.root.partition("/")

        async def list_one() -> None:
            await self.fs._call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix, MaxKeys=1)

        self._call_with_deadline("open", list_one)

    def _classify(self, exc: BaseException) -> Failure | None:
        import botocore.exceptions as bex

        endpoint = self.endpoint
        if isinstance(exc, (bex.EndpointConnectionError, bex.ConnectTimeoutError, bex.ConnectionClosedError)):
            return Failure(StoreUnreachableError, f"S3 endpoint {endpoint} did not answer ({short_reason(exc)})")
        if isinstance(exc, bex.NoCredentialsError):
            return Failure(
                StorePermissionError,
                "no S3 credentials found (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, "
                "or key/secret in the store's profile)",
            )
        code = _error_code(exc)
        if code == "NoSuchBucket":
            bucket = self.root.partition("/")[0]
            return Failure(ObjectNotFoundError, f"bucket {bucket!r} does not exist at {endpoint}")
        if code in _CREDENTIAL_CODES:
            return Failure(StorePermissionError, f"the S3 credentials were refused ({code})")
        if code == "PermanentRedirect" or "AuthorizationHeaderMalformed" in str(code):
            return Failure(StoreConfigError, f"wrong region for this bucket ({code}); set region_name")
        return None


def _error_code(exc: BaseException) -> str | None:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        response = getattr(exc, "response", None)
        if isinstance(response, dict):
            return response.get("Error", {}).get("Code")
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return None


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
    for name, value in TIMEOUTS.items():
        config_kwargs.setdefault(name, value)
    config_kwargs.setdefault("retries", dict(RETRIES))
    # One GET per small object: s3fs's concurrent ranged download would add a HEAD to every read.
    opts.setdefault("max_concurrency", 1)
    opts.setdefault("use_listings_cache", False)
    opts.setdefault("skip_instance_cache", True)
    opts["client_kwargs"] = client_kwargs
    opts["config_kwargs"] = config_kwargs
    return opts
