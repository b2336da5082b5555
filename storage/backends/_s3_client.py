"""s3fs with one retry budget: botocore retries each request, and a GET whose body is cut short is sent again.

s3fs retries on its own as well, in loops that nest (a read: its retries, times its retries, times botocore's), so
that a stalled endpoint could hold a read for tens of minutes. Here s3fs makes one pass and botocore's ``standard``
retries (connection errors, timeouts, 5xx, throttling) are the only ones on the request; what botocore cannot see, a
connection that drops while the body streams in, is retried here, as many times.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import s3fs
from botocore.exceptions import BotoCoreError, IncompleteReadError, ResponseStreamingError

#: Errors of a GET whose answer started and then stopped short: the request is sent again.
CUT_SHORT_ERRORS = (
    aiohttp.ClientPayloadError,
    aiohttp.ClientConnectionError,
    ConnectionError,
    IncompleteReadError,
    ResponseStreamingError,
)
#: Seconds before the first new attempt at a cut-short GET; doubled at each further one.
CUT_SHORT_BACKOFF = 0.1


class RetryingS3FileSystem(s3fs.S3FileSystem):
    """An :class:`s3fs.S3FileSystem` whose reads survive a body cut short, ``body_retries`` times at most.

    Configure the per-request retries through botocore (``config_kwargs={"retries": ...}``).
    """

    #: s3fs's own retry loops make a single pass: botocore's retries are the ones that count.
    retries = 1

    def __init__(self, *args: Any, body_retries: int = 2, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.body_retries = body_retries

    async def probe(self, root: str) -> None:
        """One listing request of at most one key under ``root`` (``BUCKET/PREFIX``): the bucket exists and the
        credentials are accepted."""
        bucket, _, prefix = root.partition("/")
        await self._call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix, MaxKeys=1)

    async def _cat_file(self, path: str, *args: Any, **kwargs: Any) -> bytes:
        attempt = 0
        while True:
            try:
                return await super()._cat_file(path, *args, **kwargs)
            except Exception as exc:
                if attempt >= self.body_retries or not is_cut_short(exc):
                    raise
            await asyncio.sleep(CUT_SHORT_BACKOFF * 2**attempt)
            attempt += 1


def is_cut_short(exc: BaseException) -> bool:
    """Whether ``exc`` ended a GET whose answer had started: the body stopped before its ``Content-Length``.

    Failures of the request itself come as botocore errors, already retried by botocore; a body that stops coming
    (a read timeout) is not retried either, since the endpoint is then not answering at all.
    """
    if isinstance(exc, (IncompleteReadError, ResponseStreamingError)):
        return True
    if isinstance(exc, (BotoCoreError, asyncio.TimeoutError, TimeoutError)):
        return False
    return isinstance(exc, CUT_SHORT_ERRORS)
