"""S3 through obstore (the Rust ``object_store`` client), as an fsspec filesystem the :class:`Store` drives.

Per request it costs a fraction of s3fs's CPU (no Python-side signing, parsing or event hooks), which is what caps
small-object reads on a few cores. Requests are retried here, not inside obstore, so that one retry budget covers
every failure (a refused connection, a 5xx, an answer cut short) and a throttling answer (``503 SlowDown``, ``429``)
slows every request of the filesystem while it lasts, not only the one that got it. Every request is awaited
through :func:`_obstore_runtime.answer`, which keeps the process's end from racing obstore's threads.
"""

from __future__ import annotations

import asyncio
import io
import os
import random
import re
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import obstore
from fsspec.asyn import AsyncFileSystem, sync_wrapper
from fsspec.spec import AbstractBufferedFile
from obstore.exceptions import AlreadyExistsError, PreconditionError
from obstore.store import S3Store as ObstoreS3Store

from datamount.storage.backends._obstore_runtime import answer, each
from datamount.storage.counters import Tally
from datamount.storage.errors import StoreConfigError, StorePermissionError

R = TypeVar("R")

#: Seconds before the first new attempt at a failed request; doubled at each further one (with jitter).
FIRST_BACKOFF = 0.1
#: Seconds every request of a filesystem waits after a throttling answer; doubled while throttling goes on.
THROTTLE_PAUSE = 0.2
MAX_THROTTLE_PAUSE = 10.0
#: An answer's HTTP status and S3 error code, as obstore words them in its messages.
_STATUS = re.compile(r"(?:status code: |status: )(\d{3})")
_CODE = re.compile(r"<Code>([A-Za-z]+)</Code>")
#: Parts of obstore's debug dump: the operating system's reason (``message: "Connection refused"``), the stage of
#: the connection that failed (``ConnectError("dns error", ...``) and the host of the request.
_OS_CAUSE = re.compile(r'message: "([^"]+)"')
_CONNECT_STAGE = re.compile(r'ConnectError\(\s*"([^"]+)"')
_HOST = re.compile(r"uri: Some\(\s*https?://([^/:\s]+)")
#: Words of obstore's messages for a request whose answer never came, or came cut short.
_TIMED_OUT = ("timed out", "kind: Timeout", "Timeout,")
_NO_CONNECTION = ("kind: Connect", "error sending request", "Connection refused", "connection closed before message")
_CUT_SHORT = ("error decoding response body", "kind: Decode", "kind: Body", "IncompleteMessage", "unexpected EOF")

#: The region of requests when neither the options, the environment nor the AWS profile names one.
DEFAULT_REGION = "us-east-1"
#: The folder under a store's root that opening it lists, where nothing is ever stored: an empty answer.
PROBE_FOLDER = ".datamount-probe"


def botocore_credentials(profile: str | None) -> tuple[Any, str | None]:
    """A credential provider over botocore's whole chain (environment, ``~/.aws`` profiles, SSO,
    ``credential_process``, container and instance roles), refreshed as they expire; and the profile's region."""
    import botocore.exceptions
    import botocore.session
    from obstore.auth.boto3 import Boto3CredentialProvider

    try:
        session = botocore.session.Session(profile=profile)
        region = session.get_config_variable("region")
        provider = Boto3CredentialProvider(session)
    except botocore.exceptions.ProfileNotFound as exc:
        raise StoreConfigError(f"no AWS profile {profile!r} in ~/.aws/config or ~/.aws/credentials") from exc
    except ValueError as exc:  # the chain found nothing
        raise StorePermissionError(
            "no S3 credentials found (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, "
            "or key/secret in the store's profile; anon=true for public buckets)"
        ) from exc
    return provider, region


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of the answer behind an obstore error, if one came."""
    found = _STATUS.search(str(exc))
    return int(found.group(1)) if found else None


def error_code(exc: BaseException) -> str | None:
    """The S3 error code (``NoSuchBucket``, ``SlowDown``...) of the answer behind an obstore error."""
    found = _CODE.search(str(exc))
    return found.group(1) if found else None


def transport_failure(exc: BaseException) -> str | None:
    """``"timeout"``, ``"connect"`` or ``"cut"`` when no whole answer came for ``exc``'s request, else ``None``."""
    if http_status(exc) is not None:
        return None
    text = str(exc)
    if any(word in text for word in _TIMED_OUT):
        return "timeout"
    if any(word in text for word in _CUT_SHORT):
        return "cut"
    if any(word in text for word in _NO_CONNECTION) or isinstance(exc, ConnectionError):
        return "connect"
    return None


def transport_reason(exc: BaseException) -> str:
    """What went wrong with ``exc``'s request, in a few words: obstore's message without the request's URL and its
    debug dump, with the connection's own reason (refused, a name that does not resolve) when it gives one."""
    text = str(exc)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    reason = first.rsplit(" - ", 1)[-1].strip()
    stage = _CONNECT_STAGE.search(text)
    cause = _OS_CAUSE.search(text)
    if stage and stage.group(1) == "dns error" and (host := _HOST.search(text)):
        reason += f": cannot resolve {host.group(1)}"
    elif cause and cause.group(1) not in reason:
        reason += f": {cause.group(1)}"
    return reason


def is_throttling(exc: BaseException) -> bool:
    return http_status(exc) in (429, 503) or error_code(exc) in ("SlowDown", "Throttling", "RequestLimitExceeded")


def _is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, (FileNotFoundError, AlreadyExistsError, PreconditionError)):
        return False
    status = http_status(exc)
    if status is not None:
        return status >= 500 or status in (408, 429)
    return transport_failure(exc) is not None


class ObstoreS3FileSystem(AsyncFileSystem):
    """One S3 bucket through obstore, with the fsspec methods a :class:`Store` uses (paths are ``BUCKET/KEY``).

    ``config`` is obstore's :class:`S3Config`; ``attempts`` bounds the tries of each request (the first included).
    With ``credential_chain``, credentials (and the region, unless ``config`` has one) come from botocore's chain for
    ``profile``; otherwise from ``config``.
    """

    protocol = "s3"
    cachable = False

    def __init__(
        self,
        *,
        bucket: str,
        config: dict[str, Any],
        connect_timeout: float,
        read_timeout: float,
        attempts: int,
        credential_chain: bool = False,
        profile: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        credentials, region = botocore_credentials(profile) if credential_chain else (None, None)
        config = {"region": region or DEFAULT_REGION, **config}
        self.bucket = bucket
        self.attempts = attempts
        client = {
            "allow_http": str(config.get("endpoint", "")).startswith("http://"),
            "connect_timeout": timedelta(seconds=connect_timeout),
            "read_timeout": timedelta(seconds=read_timeout),
            # A whole transfer may take as long as it needs; read_timeout bounds the silence within it.
            "timeout": timedelta(days=1),
        }
        self.store = ObstoreS3Store(
            bucket,
            config=config,
            client_options=client,  # type: ignore[arg-type]
            retry_config={"max_retries": 0},
            credential_provider=credentials,  # type: ignore[arg-type]
        )
        self._resume_at = 0.0
        self._throttled = 0
        #: New attempts (``retries``) and seconds of throttling pauses (``throttled_s``), for ``Store.counts``.
        self.tally = Tally()

    # -- one request, retried ----------------------------------------------------------------------------------------

    async def _call(self, request: Callable[[], Awaitable[R]]) -> R:
        """``request()`` until it succeeds, fails for good, or has used every attempt; throttling pauses them all."""
        attempt = 0
        while True:
            pause = self._resume_at - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            sent = time.monotonic()
            try:
                result = await request()
            except Exception as exc:
                attempt += 1
                if attempt >= self.attempts or not _is_retryable(exc):
                    raise
                if is_throttling(exc):
                    self._pause_for_throttling(sent)
                self.tally.add("retries")
                await asyncio.sleep(FIRST_BACKOFF * 2 ** (attempt - 1) * random.uniform(0.5, 1.0))
                continue
            if sent >= self._resume_at:
                self._throttled = 0
            return result

    def _pause_for_throttling(self, sent: float) -> None:
        """Pause every request after a throttling answer to a request sent at ``sent``.

        One pause per episode: answers to requests sent before the current pause ended (those in flight when it
        began) do not lengthen it. An answer to a request sent after it ended doubles the next one.
        """
        if sent < self._resume_at:
            return
        self._throttled += 1
        pause = min(THROTTLE_PAUSE * 2 ** (self._throttled - 1), MAX_THROTTLE_PAUSE) * random.uniform(0.5, 1.0)
        self._resume_at = time.monotonic() + pause
        self.tally.add("throttled_s", pause)

    async def probe(self, root: str) -> None:
        """One listing request under ``root`` (``BUCKET/PREFIX``): the bucket exists and the credentials are
        accepted. It lists a folder where nothing is stored (:data:`PROBE_FOLDER`): obstore cannot ask for one key,
        and a page of the root's keys (up to 1,000) is the slowest request of an open (Ceph RGW, a store of 2,500
        objects: 10.5 ms, against 1.2 ms for this)."""
        prefix = f"{self._key(root).rstrip('/')}/{PROBE_FOLDER}".lstrip("/")
        await self._call(lambda: answer(obstore.list_with_delimiter_async(self.store, prefix)))

    def _key(self, path: str) -> str:
        path = self._strip_protocol(path)
        bucket, _, key = path.partition("/")
        if bucket != self.bucket:
            raise ValueError(f"{path!r} is not in the bucket {self.bucket!r}")
        return key

    def _name(self, key: str) -> str:
        return f"{self.bucket}/{key}"

    def _file_entry(self, meta: Any) -> dict[str, Any]:
        """fsspec's description of the object obstore's ``meta`` (from a HEAD or a listing) describes."""
        return {"name": self._name(meta["path"]), "size": meta["size"], "type": "file", "mtime": meta["last_modified"]}

    # -- reading ---------------------------------------------------------------------------------------------------

    async def _cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        return bytes(await self._cat_buffer(path, start, end))

    async def _cat_buffer(self, path: str, start: int | None = None, end: int | None = None) -> memoryview:
        """As :meth:`_cat_file`, as a view of obstore's own buffer (no copy into ``bytes``). A range is one request
        whose answer is the bytes; a whole object two (the answer, then its body)."""
        key = self._key(path)
        if start is None and end is None:

            async def get() -> memoryview:
                found = await answer(obstore.get_async(self.store, key))
                return memoryview(await answer(found.bytes_async()))

            return await self._call(get)
        start = start or 0
        if end is None or start < 0 or end < 0:
            size = (await self._info(path))["size"]
            start = start + size if start < 0 else start
            end = size if end is None else end + size if end < 0 else end
        if end <= start:
            return memoryview(b"")
        try:
            return memoryview(
                await self._call(lambda: answer(obstore.get_range_async(self.store, key, start=start, end=end)))
            )
        except Exception as exc:
            if http_status(exc) == 416:  # the range starts at or after the object's end
                return memoryview(b"")
            raise

    async def _cat_sized(self, path: str, size: int) -> bytes:
        """The object at ``path``, said to have ``size`` bytes, as one ranged request of ``size + 1`` bytes (half the
        hand-overs of a whole object's two). A longer object is then read whole, so that its size shows."""
        data = await self._cat_buffer(path, 0, size + 1)
        return bytes(data if len(data) <= size else await self._cat_buffer(path))

    cat_buffer = sync_wrapper(_cat_buffer)

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        key = self._key(path).rstrip("/")
        if key:
            try:
                meta = await self._call(lambda: answer(obstore.head_async(self.store, key)))
            except FileNotFoundError:
                pass
            else:
                return self._file_entry(meta)
        listing = await self._call(lambda: answer(obstore.list_with_delimiter_async(self.store, key or None)))
        if key == "" or listing["objects"] or listing["common_prefixes"]:
            return {"name": self._name(key), "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

    async def _exists(self, path: str, **kwargs: Any) -> bool:
        try:
            await self._info(path)
        except FileNotFoundError:
            return False
        return True

    async def _ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        key = self._key(path).rstrip("/")
        listing = await self._call(lambda: answer(obstore.list_with_delimiter_async(self.store, key or None)))
        entries = [self._file_entry(meta) for meta in listing["objects"]] + [
            {"name": self._name(prefix), "size": 0, "type": "directory"} for prefix in listing["common_prefixes"]
        ]
        if not entries and key and not await self._exists(path):
            raise FileNotFoundError(path)
        return entries if detail else sorted(entry["name"] for entry in entries)

    async def _find(
        self, path: str, maxdepth: int | None = None, withdirs: bool = False, detail: bool = False, **kwargs: Any
    ) -> Any:
        key = self._key(path).rstrip("/")

        async def every_object() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = []
            async for chunk in each(obstore.list(self.store, key or None, chunk_size=1000)):
                found.extend(chunk)
            return found

        entries = {entry["name"]: entry for entry in map(self._file_entry, await self._call(every_object))}
        if not entries and key:
            try:
                info = await self._info(path)
            except FileNotFoundError:
                info = None
            if info is not None and info["type"] == "file":
                entries[info["name"]] = info
        return entries if detail else sorted(entries)

    # -- writing ----------------------------------------------------------------------------------------------------

    async def _pipe_file(self, path: str, value: Any, mode: str = "overwrite", **kwargs: Any) -> None:
        key = self._key(path)
        put_mode = "create" if mode == "create" else "overwrite"

        async def put() -> None:
            await answer(obstore.put_async(self.store, key, value, mode=put_mode))

        try:
            await self._call(put)
        except (AlreadyExistsError, PreconditionError) as exc:
            raise FileExistsError(path) from exc

    async def _put_file(self, lpath: str, rpath: str, mode: str = "overwrite", **kwargs: Any) -> None:
        if not os.path.isfile(lpath):
            raise FileNotFoundError(lpath)
        key = self._key(rpath)
        await self._call(lambda: answer(obstore.put_async(self.store, key, Path(lpath))))

    async def _rm_file(self, path: str, **kwargs: Any) -> None:
        key = self._key(path)
        await self._call(lambda: answer(obstore.delete_async(self.store, key)))

    async def _rm(self, path: str | list[str], recursive: bool = False, **kwargs: Any) -> None:
        paths = [path] if isinstance(path, str) else list(path)
        keys: list[str] = []
        for one in paths:
            if recursive:
                keys.extend(self._key(name) for name in await self._find(one))
            keys.append(self._key(one))
        for start in range(0, len(keys), 1000):
            batch = keys[start : start + 1000]
            await self._call(lambda batch=batch: answer(obstore.delete_async(self.store, batch)))

    async def _cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        source, target = self._key(path1), self._key(path2)
        await self._call(lambda: answer(obstore.copy_async(self.store, source, target)))

    async def _makedirs(self, path: str, exist_ok: bool = False) -> None:
        self._key(path)  # an object store has no folders to make, but the path must be in the bucket

    async def _mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        if not self._key(path.rstrip("/") + "/").strip("/"):
            raise NotImplementedError(f"obstore cannot create buckets ({self.bucket}): create it with s3fs or boto3")

    def _open(self, path: str, mode: str = "rb", block_size: int | None = None, **kwargs: Any) -> ObstoreFile:
        if mode not in ("rb", "wb"):
            raise ValueError(f"only 'rb' and 'wb' are supported, got {mode!r}")
        return ObstoreFile(self, path, mode, block_size=block_size or 8 << 20, **kwargs)


class ObstoreFile(AbstractBufferedFile):
    """A file on :class:`ObstoreS3FileSystem`: reads are ranged GETs of a block at a time; a write is one PUT when
    the file is closed."""

    def _fetch_range(self, start: int, end: int) -> bytes:
        return self.fs.cat_file(self.path, start=start, end=end)

    def _initiate_upload(self) -> None:
        self._parts = io.BytesIO()

    def _upload_chunk(self, final: bool = False) -> bool:
        self._parts.write(self.buffer.getvalue())
        if final:
            self.fs.pipe_file(self.path, self._parts.getvalue())
        return True
