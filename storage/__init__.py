"""Where bytes live: stores over fsspec backends, profiles, atomic writes."""

from datamount.storage import arguments
from datamount.storage.errors import (
    BackendNotInstalledError,
    DatamountError,
    IntegrityError,
    MountError,
    ObjectExistsError,
    ObjectNotFoundError,
    StoreConfigError,
    StoreIOError,
    StorePermissionError,
    StoreUnreachableError,
    UnsafePathError,
)
from datamount.storage.factory import open_store
from datamount.storage.profiles import Profile, config_path, default_store_path, load_config
from datamount.storage.store import ObjectInfo, Store

__all__ = [
    "BackendNotInstalledError",
    "DatamountError",
    "IntegrityError",
    "MountError",
    "ObjectExistsError",
    "ObjectInfo",
    "ObjectNotFoundError",
    "Profile",
    "Store",
    "StoreConfigError",
    "StoreIOError",
    "StorePermissionError",
    "StoreUnreachableError",
    "UnsafePathError",
    "arguments",
    "config_path",
    "default_store_path",
    "load_config",
    "open_store",
]
