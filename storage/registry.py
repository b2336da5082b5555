"""Which :class:`Store` class serves which URL protocol: built-ins, third-party entry points, then any fsspec one."""

from __future__ import annotations

import importlib
import importlib.util
from importlib.metadata import entry_points

import fsspec

from datamount.storage.errors import BackendNotInstalledError, StoreConfigError
from datamount.storage.store import Store

#: Entry-point group through which other packages add backends: ``name = "package.module:StoreClass"``.
ENTRY_POINT_GROUP = "datamount.backends"

_LOCAL = "datamount.storage.backends.local:LocalStore"
_S3 = "datamount.storage.backends.s3:S3Store"
_GCS = "datamount.storage.backends.gcs:GCSStore"
_HDFS = "datamount.storage.backends.hdfs:HDFSStore"
#: A web server's folder needs nothing beyond the generic store, only fsspec's HTTP client (aiohttp).
_HTTP = "datamount.storage.store:Store"

#: protocol -> (Store class by dotted path, what to install when its import fails)
BUILTIN_BACKENDS: dict[str, tuple[str, str]] = {
    "file": (_LOCAL, "datamount"),
    "local": (_LOCAL, "datamount"),
    "memory": ("datamount.storage.backends.memory:MemoryStore", "datamount"),
    "s3": (_S3, "datamount[s3]"),
    "s3a": (_S3, "datamount[s3]"),
    "gs": (_GCS, "datamount[gcs]"),
    "gcs": (_GCS, "datamount[gcs]"),
    "hdfs": (_HDFS, "datamount[hdfs]"),
    "viewfs": (_HDFS, "datamount[hdfs]"),
    "http": (_HTTP, "datamount[http]"),
    "https": (_HTTP, "datamount[http]"),
}
#: The packages of each extra a backend needs (imported only when a store of it is opened).
EXTRA_PACKAGES = {
    "datamount[s3]": ("obstore", "s3fs", "boto3"),
    "datamount[gcs]": ("gcsfs",),
    "datamount[hdfs]": ("hdfs_native",),
    "datamount[http]": ("aiohttp",),
}


def store_class_for(protocol: str) -> type[Store]:
    """The :class:`Store` subclass for ``protocol``; the generic :class:`Store` for other fsspec protocols."""
    spec = BUILTIN_BACKENDS.get(protocol) or _entry_point(protocol)
    if spec is not None:
        target, package = spec
        missing = [name for name in EXTRA_PACKAGES.get(package, ()) if not _importable(name)]
        if missing:
            raise BackendNotInstalledError(
                f"{protocol}:// stores need {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not "
                f"installed: pip install '{package}'"
            )
        module_name, _, class_name = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise BackendNotInstalledError(
                f"the {protocol}:// backend needs a package that is missing ({exc.name}): pip install '{package}'"
            ) from exc
        store_class: type[Store] = getattr(module, class_name)
        return store_class
    if protocol in fsspec.available_protocols():
        return Store
    known = ", ".join(sorted(BUILTIN_BACKENDS))
    raise StoreConfigError(
        f"unknown storage protocol {protocol!r}: use one of {known}, or install the fsspec implementation "
        "that provides it"
    )


def _entry_point(protocol: str) -> tuple[str, str] | None:
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == protocol:
            return entry.value, entry.dist.name if entry.dist else entry.value
    return None


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing; a module set to None in sys.modules
        return False
