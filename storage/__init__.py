"""Where bytes live: stores over fsspec backends, profiles, atomic and exclusive writes, a shared content cache.

:func:`open_store` turns a URL, a path or a profile into a :class:`Store` (``factory``, ``registry``, ``profiles``);
``store`` holds the contract and ``backends/`` one module per backend; ``cache`` keeps remote files by sha256;
``doctor`` checks a store; ``testing`` is the contract as a test suite for any backend.
"""

from datamount.storage import arguments
from datamount.storage.cache import ContentCache
from datamount.storage.doctor import run_doctor
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
from datamount.storage.store import ObjectInfo, Store, StoredFile

__all__ = [
    "BackendNotInstalledError",
    "ContentCache",
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
    "StoredFile",
    "UnsafePathError",
    "arguments",
    "config_path",
    "default_store_path",
    "load_config",
    "open_store",
    "run_doctor",
]
