"""What the object-store backends (S3, GCS) share: a bucket in the URL, an endpoint reached over HTTP with a bounded
number of attempts, and how its failures read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import fsspec

from datamount.storage import redact
from datamount.storage.errors import StoreConfigError, StoreIOError, StoreUnreachableError
from datamount.storage.store import Failure, Store, short_reason

THROTTLING_ADVICE = "; it is throttling requests: lower max_requests, or try again later"


@dataclass(frozen=True)
class EndpointSettings:
    """Where an object store's requests go and how long each may take, as its failure messages name them.

    Attributes
    ----------
    address : str
        The endpoint's URL (credentials masked), or the service's name when it is the cloud's own.
    attempts : int
        Attempts at each request, the first included.
    read_timeout : float
        Seconds of silence after which an attempt fails.
    """

    address: str
    attempts: int
    read_timeout: float


class ObjectStore(Store):
    """A bucket (and prefix) on an object store: a whole object is written in one atomic request, there are no
    folders to make, and many requests are kept in flight."""

    #: The service's name in messages ("S3", "GCS").
    service: ClassVar[str] = ""
    atomic_put = True
    exclusive_create = True
    needs_dirs = False
    default_max_requests = 32

    def __init__(
        self,
        fs: fsspec.AbstractFileSystem,
        root: str,
        *,
        url: str,
        settings: EndpointSettings,
        options: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(fs, root, url=url, options=options, name=name)
        self.settings = settings

    def _create(self, full: str, data: bytes) -> None:
        # A conditional write: S3's "If-None-Match: *", GCS's "ifGenerationMatch=0"; the server refuses the second.
        self.fs.pipe_file(full, data, mode="create")

    @classmethod
    def bucket_root(cls, url: str, *, store: str) -> str:
        """The ``BUCKET/PREFIX`` root of ``url``; ``store`` names the kind of store in the error when it has none."""
        root = (url.split("://", 1)[1] if "://" in url else url).strip("/")
        shown = redact.redact_url(url)
        if not root:
            raise StoreConfigError(f"{store} needs a bucket: {cls.protocol}://BUCKET[/PREFIX], got {shown!r}")
        bucket, _, _ = root.partition("/")
        if "@" in bucket:  # no bucket name has one: the user:password part of a URL
            raise StoreConfigError(
                f"{shown!r}: credentials in a store URL are not read (and would show wherever the URL is); give "
                "them as the environment's, a profile's, or key=/secret= options"
            )
        _, query, options = root.partition("?")
        if query and "=" in options:  # "s3://bucket/prefix?endpoint_url=...": not a key's name
            names = ", ".join(option.partition("=")[0] for option in options.split("&"))  # values may be secrets
            raise StoreConfigError(
                f"{shown.partition('?')[0]!r}: a store URL takes no options after '?' (here {names}): give them as "
                "-o KEY=VALUE, in a profile, or as open_store(url, KEY=VALUE)"
            )
        return root

    @property
    def endpoint(self) -> str:
        return self.settings.address

    # -- failures, as every object store words them -------------------------------------------------------------

    @property
    def _tried(self) -> str:
        attempts = self.settings.attempts
        return f"{attempts} attempt{'s' if attempts > 1 else ''}"

    @property
    def _named_endpoint(self) -> str:
        return f"{self.service} endpoint {self.endpoint}"

    def _stopped_answering(self) -> Failure:
        return Failure(
            StoreUnreachableError,
            f"{self._named_endpoint} stopped answering: silent for {self.settings.read_timeout:g} s (read_timeout), "
            f"{self._tried}",
        )

    def _did_not_answer(self, cause: BaseException) -> Failure:
        return Failure(
            StoreUnreachableError, f"{self._named_endpoint} did not answer ({short_reason(cause)}; {self._tried})"
        )

    def _cut_short(self, exc: BaseException) -> Failure:
        return Failure(
            StoreIOError, f"the answer from {self._named_endpoint} was cut short ({short_reason(exc)}; {self._tried})"
        )

    def _failed_every_attempt(self, answer: str, *, detail: str = "", throttling: bool) -> Failure:
        """``answer`` (an HTTP status, with the service's error code) came back to every attempt."""
        detail = f" ({detail})" if detail else ""
        advice = THROTTLING_ADVICE if throttling else ""
        return Failure(StoreIOError, f"{self._named_endpoint} answered {answer} to all {self._tried}{detail}{advice}")
