"""gcsfs whose number of attempts at each request is an option (gcsfs fixes it at 6 when its class is defined)."""

from __future__ import annotations

from typing import Any

from gcsfs.core import GCSFileSystem
from gcsfs.retry import retry_request

#: gcsfs's request method without its retry loop (the ``decorator`` package keeps the undecorated function), or
#: ``None`` if a gcsfs release stops exposing it: then gcsfs's own 6 attempts apply.
_request_once = getattr(GCSFileSystem._request, "__wrapped__", None)


class RetryingGCSFileSystem(GCSFileSystem):
    """A :class:`gcsfs.GCSFileSystem` making ``attempts`` attempts at each request (gcsfs's backoff: about 1, 2,
    4, 8... seconds between them) instead of always 6."""

    def __init__(self, *args: Any, attempts: int = GCSFileSystem.retries, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.attempts = max(attempts, 1) if _request_once is not None else GCSFileSystem.retries
        self._request_with_retries = (
            retry_request(retries=self.attempts)(_request_once) if _request_once is not None else None
        )

    async def _request(self, *args: Any, **kwargs: Any) -> Any:
        if self._request_with_retries is None:
            return await super()._request(*args, **kwargs)
        return await self._request_with_retries(self, *args, **kwargs)
