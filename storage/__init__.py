"""Where bytes live: stores over fsspec backends, profiles, atomic writes."""

from datamount.storage.errors import (
    BackendNotInstalledError,
    DatamountError,
    MountError,
    ObjectNotFoundError,
    StoreConfigError,
    StoreIOError,
    StorePermissionError,
    StoreUnreachableError,
    UnsafePathError,
)
from datamount.storage.store import ObjectInfo, Store

__all__ = [
    "BackendNotInstalledError",
    "DatamountError",
    "MountError",
    "ObjectInfo",
    "ObjectNotFoundError",
    "Store",
    "StoreConfigError",
    "StoreIOError",
    "StorePermissionError",
    "StoreUnreachableError",
    "UnsafePathError",
]
