"""``open_store``: from a URL, a path, a profile name or nothing at all to a ready :class:`Store`."""

from __future__ import annotations

import os
from typing import Any

from fsspec.utils import get_protocol

from datamount.storage import profiles, redact
from datamount.storage.registry import store_class_for
from datamount.storage.store import Store


def open_store(target: str | os.PathLike[str] | Store | None = None, *, check: bool = True, **options: Any) -> Store:
    """Open a store.

    Parameters
    ----------
    target
        A URL (``s3://bucket/prefix``, ``gs://...``, ``hdfs://namenode:8020/path``, ``memory://name``,
        ``file:///path``), a local path, the name of a profile, or ``None`` for the default store
        (``$DATAMOUNT_STORE``, else the configuration's ``default``, else a local folder in the XDG data folder).
        A bare name must be a profile or an existing folder (``./name`` for a new one); a misspelt profile is a
        :class:`StoreConfigError` that names the closest. A :class:`Store` is returned as it is.
    check
        Contact the store now, so that a wrong endpoint, bucket, credential or missing mount fails here with a
        clear message rather than at the first read.
    **options
        Backend options (``endpoint_url``, ``key``/``secret``, ``mount="glusterfs"``...), over the profile's.

    Raises
    ------
    StoreConfigError, BackendNotInstalledError, StoreUnreachableError, StorePermissionError, ObjectNotFoundError,
    MountError
    """
    if isinstance(target, Store):
        return target
    if target is not None and not isinstance(target, str | os.PathLike):
        raise TypeError(
            f"a store is a Store, a URL, a path or a profile's name, not {type(target).__name__} {target!r}"
        )
    # Noted before anything can fail: a message about a profile, a URL or an option then has them masked too.
    redact.note_secrets(target, options)
    resolved = profiles.resolve(target)
    merged = {**resolved.options, **options}
    redact.note_secrets(resolved.url, merged)
    store_class = store_class_for(get_protocol(resolved.url))
    store = store_class.from_url(resolved.url, name=resolved.name, **merged)
    if check:
        store.check()
    return store
