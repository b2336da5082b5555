"""Google Cloud Storage (and its emulators) through gcsfs."""

from __future__ import annotations

import os
from typing import Any

from datamount.storage import redact
from datamount.storage.errors import ObjectNotFoundError, StoreConfigError, StorePermissionError, StoreUnreachableError
from datamount.storage.store import Failure, Store, short_reason


class GCSStore(Store):
    """A bucket (and prefix) on Google Cloud Storage.

    Options are those of :class:`gcsfs.GCSFileSystem` (``token``, ``project``, ``endpoint_url``...); credentials
    otherwise come from Google's Application Default Credentials. With ``endpoint_url`` (an emulator) and no
    ``token``, requests are anonymous. ``STORAGE_EMULATOR_HOST`` is honoured as gcsfs does.
    """

    protocol = "gs"
    atomic_put = True
    needs_dirs = False
    default_max_requests = 32

    @classmethod
    def from_url(cls, url: str, *, name: str | None = None, **options: Any) -> GCSStore:
        # gcsfs's hierarchical-namespace probe is a gRPC call per bucket that hangs for a minute against
        # emulators and S3-style gateways; datamount needs none of what it enables.
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        import gcsfs

        bucket_path = url.split("://", 1)[1] if "://" in url else url
        root = bucket_path.strip("/")
        if not root:
            raise StoreConfigError(f"a GCS store needs a bucket: gs://BUCKET[/PREFIX], got {url!r}")
        opts = dict(options)
        endpoint = opts.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST")
        if opts.get("endpoint_url"):
            opts.setdefault("token", "anon")
        opts.setdefault("skip_instance_cache", True)
        opts.setdefault("use_listings_cache", False)
        opts.setdefault("timeout", 30)
        store = cls(gcsfs.GCSFileSystem(**opts), root, url=f"gs://{root}", options=options, name=name)
        store._endpoint = redact.redact_url(endpoint) if endpoint else "Google Cloud Storage"
        return store

    @property
    def endpoint(self) -> str:
        return getattr(self, "_endpoint", "Google Cloud Storage")

    def check(self) -> None:
        self._call_with_deadline("open", self.fs._info, self.root.partition("/")[0])

    def _classify(self, exc: BaseException) -> Failure | None:
        import aiohttp

        if isinstance(exc, (aiohttp.ClientConnectionError, aiohttp.ServerTimeoutError)):
            return Failure(StoreUnreachableError, f"GCS endpoint {self.endpoint} did not answer ({short_reason(exc)})")
        code = getattr(exc, "code", None)
        if code in (401, 403):
            return Failure(StorePermissionError, f"GCS refused the credentials ({short_reason(exc)})")
        if code == 404:
            return Failure(ObjectNotFoundError, "not found")
        return None
