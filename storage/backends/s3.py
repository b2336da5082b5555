"""Amazon S3 and S3-compatible servers (Ceph RGW, SeaweedFS, MinIO, moto) through s3fs."""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import ipaddress
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import xxhash

from datamount.storage import redact
from datamount.storage.backends._limits import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_RETRIES,
    retries_option,
    seconds_option,
)
from datamount.storage.backends._object_store import EndpointSettings, ObjectStore
from datamount.storage.backends._options import FSSPEC_OPTIONS, check_endpoint_url, parameter_names, refuse_unknown
from datamount.storage.errors import (
    ObjectExistsError,
    ObjectNotFoundError,
    StoreConfigError,
    StoreIOError,
    StorePermissionError,
)
from datamount.storage.store import HASH_CHUNK, Failure

# S3 error codes that mean the credentials, not the path, are wrong.
_CREDENTIAL_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}
_ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
log = logging.getLogger(__name__)
#: Requests in flight by default through obstore (s3fs: 32). With 20 ms added per request (as S3 answers a small
#: GET), 32 kept 0.77 of the no-latency read rate on Ceph RGW, 64 0.73 on SeaweedFS and 128 0.85 there
#: (benchmarks/bench_latency.py); with no latency added, 128 reads as fast as 64.
OBSTORE_MAX_REQUESTS = 128
#: Ranged GETs in flight while hashing an object.
HASH_REQUESTS = 4


class S3Store(ObjectStore):
    """A bucket (and prefix) on S3 or any S3-compatible server.

    Requests go through obstore (the Rust ``object_store`` client) unless ``client="s3fs"`` is given. Options:
    ``key``, ``secret``, ``token``, ``anon``, ``profile``, ``endpoint_url``, ``region_name``, ``path_style`` on
    either client; with ``client="s3fs"`` every other :class:`s3fs.S3FileSystem` option too (``client_kwargs``,
    ``config_kwargs``...). Credentials, region and endpoint otherwise come from botocore's own chain (environment,
    ``~/.aws`` profiles, SSO, ``credential_process``, instance roles), including ``AWS_ENDPOINT_URL_S3`` /
    ``AWS_ENDPOINT_URL``. For endpoints other than AWS's, path-style addressing is the default.

    ``connect_timeout`` (seconds, default 5), ``read_timeout`` (seconds without a byte of the answer, default 30)
    and ``retries`` (new attempts after a failed request, default 2) bound how long a failing endpoint can hold an
    operation: about ``(retries + 1) * read_timeout`` plus a few seconds of backoff for one that stops answering.
    Connection errors, timeouts, 5xx answers, throttling (``503 SlowDown``, ``429``) and answers cut short are
    retried with exponential backoff; on obstore, a throttling answer also pauses every request of the store.

    obstore does not survive ``fork()``: in a process forked from one that used it, the store reopens on s3fs.
    """

    protocol = "s3"
    service = "S3"

    def __init__(self, fs: Any, root: str, *, options: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(fs, root, options=options, **kwargs)
        #: What the store was opened with: a forked child chooses its client again from them.
        self._open_options = dict(options or {})
        if self.client == "obstore":
            # A request costs obstore little CPU: more of them in flight hide a far-away server's latency.
            self.default_max_requests = OBSTORE_MAX_REQUESTS

    @classmethod
    def from_url(cls, url: str, *, name: str | None = None, **options: Any) -> S3Store:
        root = cls.bucket_root(url, store="an S3 store")
        fs, settings = s3_filesystem(root.partition("/")[0], options)
        return cls(fs, root, url=f"s3://{root}", settings=settings, options=options, name=name)

    def _filesystem_after_fork(self, inherited: Any) -> Any:
        # Chosen again for this process: obstore's runtime, if the parent started it, is unusable here.
        return s3_filesystem(self.root.partition("/")[0], self._open_options)[0]

    @property
    def client(self) -> str:
        """The client the store's requests go through: ``"obstore"`` or ``"s3fs"``."""
        from datamount.storage.backends._obstore_s3 import ObstoreS3FileSystem

        return "obstore" if isinstance(self.fs, ObstoreS3FileSystem) else "s3fs"

    async def _cat_object(self, full: str, size: int) -> bytes:
        sized = getattr(self.fs, "_cat_sized", None)  # obstore's; s3fs reads whole objects only
        if size and sized is not None:
            return await sized(full, size)
        return await super()._cat_object(full, size)

    def check(self) -> None:
        # Either client's probe: one listing request of at most one key under the root.
        self._call_with_deadline("open", self.fs.probe, self.root)

    def checksums(self, path: str) -> tuple[str, str]:
        # Ranged GETs through the filesystem's reads, which resend an answer cut short (s3fs's file objects do not).
        size = self.info(path).size
        digest, fast = hashlib.sha256(), xxhash.xxh3_64()
        chunks = ((start, min(start + HASH_CHUNK, size)) for start in range(0, size, HASH_CHUNK))
        for chunk in self.read_ranges(path, chunks, max_requests=HASH_REQUESTS):
            digest.update(chunk)
            fast.update(chunk)
        return digest.hexdigest(), fast.hexdigest()

    def _checksum_options(self, sha256: str) -> dict[str, Any]:
        # AWS S3 refuses a PUT whose body does not have this sha256 (moto and Ceph 16 RGW store it unchecked).
        return {"ChecksumSHA256": base64.b64encode(bytes.fromhex(sha256)).decode("ascii")}

    def _classify(self, exc: BaseException) -> Failure | None:
        from obstore.exceptions import BaseError as ObstoreError
        from obstore.exceptions import PermissionDeniedError, UnauthenticatedError

        from datamount.storage.backends import _obstore_s3

        obstore_error = isinstance(exc, ObstoreError) or type(exc).__module__.startswith("obstore")
        if obstore_error:
            transport = _obstore_s3.transport_failure(exc)
            if transport == "timeout":
                return self._stopped_answering()
            if transport == "connect":
                return self._did_not_answer(RequestFailed(_obstore_s3.transport_reason(exc)))
            if transport == "cut":
                return self._cut_short(RequestFailed(_obstore_s3.transport_reason(exc)))
        elif isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or _botocore_error(exc, "ReadTimeoutError"):
            return self._stopped_answering()
        elif _botocore_error(exc, "EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError"):
            cause = getattr(exc, "kwargs", {}).get("error")
            return self._did_not_answer(cause if isinstance(cause, BaseException) else exc)
        elif _cut_short(exc):
            return self._cut_short(exc)
        if _botocore_error(exc, "NoCredentialsError"):
            return Failure(
                StorePermissionError,
                "no S3 credentials found (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, "
                "or key/secret in the store's profile)",
            )
        code = _error_code(exc) or (_obstore_s3.error_code(exc) if obstore_error else None)
        status = _http_status(exc) or (_obstore_s3.http_status(exc) if obstore_error else None)
        if code in ("PreconditionFailed", "ConditionalRequestConflict"):
            # A conditional create found the key taken (Ceph RGW words only the code), or being written by another.
            return Failure(ObjectExistsError, "it already exists")
        if code == "NoSuchBucket":
            bucket = self.root.partition("/")[0]
            return Failure(ObjectNotFoundError, f"bucket {bucket!r} does not exist at {self.endpoint}")
        if code in _CREDENTIAL_CODES or isinstance(exc, UnauthenticatedError):
            return Failure(StorePermissionError, f"the S3 credentials were refused ({code or status})")
        if code == "PermanentRedirect" or "AuthorizationHeaderMalformed" in str(code):
            return Failure(StoreConfigError, f"wrong region for this bucket ({code}); set region_name")
        if isinstance(exc, PermissionDeniedError) or (obstore_error and status == 403):
            return Failure(StorePermissionError, f"permission denied ({code or status})")
        if obstore_error and isinstance(exc, FileNotFoundError):
            return Failure(ObjectNotFoundError, "not found")
        if (status is not None and status >= 500) or status == 429:
            answer = f"{status} {code}" if code else str(status)
            return self._failed_every_attempt(answer, throttling=status in (429, 503))
        if obstore_error:
            return Failure(StoreIOError, _obstore_s3.transport_reason(exc))
        return None


def _botocore_error(exc: BaseException, *kinds: str) -> bool:
    """Whether ``exc`` is one of botocore's errors ``kinds``: never where botocore was not imported (a store of the
    obstore client with its keys in the environment), as nothing could have raised one; so a fresh process's first
    "not found" is named without importing botocore, s3fs and aiohttp (1.1 s here, their bytecode cached)."""
    if "botocore" not in sys.modules:
        return False
    import botocore.exceptions as bex

    return isinstance(exc, tuple(getattr(bex, kind) for kind in kinds))


def _cut_short(exc: BaseException) -> bool:
    """Whether ``exc`` ended an answer that had started (``_s3_client.is_cut_short``). Where s3fs (with aiohttp) was
    never imported, none of its errors can be ``exc``, and that is a ``ConnectionError``."""
    if "s3fs" not in sys.modules:
        return isinstance(exc, ConnectionError)
    from datamount.storage.backends._s3_client import is_cut_short

    return is_cut_short(exc)


class RequestFailed(Exception):
    """A request that got no whole answer, named in one line."""


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


#: The S3 clients a store can use.
CLIENTS = ("obstore", "s3fs")
#: Options both clients understand; s3fs takes its own too (``_s3fs_options``).
COMMON_OPTIONS = {
    "key",
    "secret",
    "token",
    "anon",
    "profile",
    "endpoint_url",
    "region_name",
    "path_style",
    "connect_timeout",
    "read_timeout",
    "retries",
}


def s3_filesystem(bucket: str, options: dict[str, Any]) -> tuple[Any, EndpointSettings]:
    """The filesystem for a store on ``bucket`` with ``options`` (``client`` chooses it), and its endpoint settings."""
    from datamount.storage.backends import _obstore_runtime

    opts = dict(options)
    client = opts.pop("client", "obstore")
    if client not in CLIENTS:
        raise StoreConfigError(f"client must be one of {', '.join(CLIENTS)}, got {client!r}")
    _check_options(opts, client)
    if client == "obstore":
        if _obstore_runtime.usable_here():
            return obstore_filesystem(bucket, opts)
        log.info("s3://%s: obstore does not work in a process forked after it was used here; using s3fs", bucket)
    fs_options = s3_filesystem_options(opts)
    config = fs_options["config_kwargs"]
    settings = EndpointSettings(
        address=redact.redact_url(fs_options.get("endpoint_url") or "AWS S3"),
        attempts=total_attempts(config["retries"]),
        read_timeout=config["read_timeout"],
    )
    from datamount.storage.backends._s3_client import RetryingS3FileSystem

    return RetryingS3FileSystem(body_retries=settings.attempts - 1, **fs_options), settings


def obstore_filesystem(bucket: str, options: dict[str, Any]) -> tuple[Any, EndpointSettings]:
    """An :class:`ObstoreS3FileSystem` on ``bucket`` for a store's ``options`` (``client`` already taken out)."""
    from datamount.storage.backends._obstore_s3 import ObstoreS3FileSystem

    endpoint = options.get("endpoint_url") or _endpoint_from_environment()
    config: dict[str, Any] = {}
    if endpoint:
        config["endpoint"] = endpoint
    else:
        # AWS checks a sha256 of every PUT's body; other servers vary, as with s3fs's "when_required".
        config["checksum_algorithm"] = "sha256"
    path_style = _flag(options.get("path_style", endpoint is not None), "path_style")
    config["virtual_hosted_style_request"] = not path_style
    if endpoint and not path_style:  # obstore sends virtual-hosted requests to the endpoint as given
        scheme, _, host = endpoint.partition("://")
        if _is_ip_address(urlsplit(endpoint).hostname or ""):
            raise StoreConfigError(
                f"path_style=false needs an endpoint named by host name ({bucket}.HOST), not an IP address: "
                f"{redact.redact_url(endpoint)}"
            )
        config["endpoint"] = f"{scheme}://{bucket}.{host}"
    credential_chain = False
    if _flag(options.get("anon", False), "anon"):
        config["skip_signature"] = True
    elif options.get("key") or options.get("secret"):
        if not (options.get("key") and options.get("secret")):
            raise StoreConfigError("key and secret must be given together")
        config["access_key_id"] = str(options["key"])
        config["secret_access_key"] = str(options["secret"])
        if options.get("token"):
            config["token"] = str(options["token"])
    region = options.get("region_name") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        config["region"] = str(region)
    if not config.get("skip_signature") and "access_key_id" not in config:
        from_environment = _environment_credentials(options, region=bool(region))
        if from_environment is not None:
            config.update(from_environment)
        else:
            credential_chain = True
    read_timeout = seconds_option(options.get("read_timeout", DEFAULT_READ_TIMEOUT), "read_timeout")
    attempts = retries_option(options.get("retries", DEFAULT_RETRIES)) + 1
    fs = ObstoreS3FileSystem(
        bucket=bucket,
        config=config,
        connect_timeout=seconds_option(options.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT), "connect_timeout"),
        read_timeout=read_timeout,
        attempts=attempts,
        credential_chain=credential_chain,
        profile=options.get("profile"),
    )
    settings = EndpointSettings(
        address=redact.redact_url(endpoint) if endpoint else "AWS S3", attempts=attempts, read_timeout=read_timeout
    )
    return fs, settings


def _environment_credentials(options: Mapping[str, Any], *, region: bool) -> dict[str, str] | None:
    """The credentials botocore's chain would find, when the environment alone says what they are: static keys in
    ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` (the chain's first source), no profile, and a region already
    known or no AWS config file to take one from. Then the chain (and botocore's ~0.1 s import, paid by every fresh
    process and worker) is skipped; otherwise ``None``."""
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not (key and secret) or options.get("profile") or os.environ.get("AWS_CREDENTIAL_EXPIRATION"):
        return None
    if os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE"):
        return None
    config_file = os.path.expanduser(os.environ.get("AWS_CONFIG_FILE", "~/.aws/config"))
    if not region and os.path.exists(config_file):
        return None
    found = {"access_key_id": key, "secret_access_key": secret}
    if os.environ.get("AWS_SESSION_TOKEN"):
        found["token"] = os.environ["AWS_SESSION_TOKEN"]
    return found


def _check_options(options: Mapping[str, Any], client: str) -> None:
    """Refuse, before any client sees them, options the chosen client does not take and an ``endpoint_url`` that
    is not an http(s) URL."""
    shown = {*COMMON_OPTIONS, "client"}
    if client == "obstore":
        unknown = set(options) - COMMON_OPTIONS
        if unknown and unknown <= _s3fs_options():
            raise StoreConfigError(
                f"{', '.join(sorted(unknown))}: an option of the s3fs client only; add client=s3fs to use it"
            )
        refuse_unknown(options, COMMON_OPTIONS, store="S3", shown=shown, more=" (with client=s3fs, s3fs's own too)")
    else:
        refuse_unknown(options, _s3fs_options(), store="S3", shown=shown, more=", and s3fs's own")
    check_endpoint_url(options.get("endpoint_url"))


@functools.cache
def _s3fs_options() -> frozenset[str]:
    """Every option a store on s3fs takes: datamount's own, s3fs's, the aiobotocore session's (s3fs hands it the
    rest) and fsspec's."""
    import s3fs
    from aiobotocore.session import AioSession

    own = parameter_names(s3fs.S3FileSystem.__init__, AioSession.__init__)
    return own | FSSPEC_OPTIONS | COMMON_OPTIONS | {"batch_size"}


def _endpoint_from_environment() -> str | None:
    """The endpoint AWS's tools would use: ``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL``."""
    return next((os.environ[v] for v in _ENDPOINT_ENV if os.environ.get(v)), None)


def _is_ip_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _flag(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise StoreConfigError(f"{name} must be true or false, got {value!r}")


def s3_filesystem_options(options: dict[str, Any]) -> dict[str, Any]:
    """The :class:`s3fs.S3FileSystem` keyword arguments for a store's options, with datamount's defaults."""
    opts = dict(options)
    endpoint = opts.pop("endpoint_url", None) or _endpoint_from_environment()
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
