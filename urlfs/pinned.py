"""Versions a filesystem resolved, carried to other processes by their number and their manifest's sha256.

A version is immutable once resolved (``latest`` too, once resolved: it stays the number it was), and ``name@N``
names one manifest for the life of a store (:mod:`datamount.datasets.catalog` never gives a number twice). A
filesystem sent to a worker (a DataLoader's, fork or spawn) carries, for each version it opened, its dataset, its
number and its identity (:attr:`~datamount.datasets.manifest.Manifest.manifest_sha256`), with or without a content
cache. With a cache, the manifest's JSON goes into it too (:class:`ContentCache`, keyed and checked by its own
sha256), where the worker finds it without asking the store. A worker without the JSON (no cache, or another
machine's) reads the pinned *number* from the store and takes it only if its manifest has the pinned sha256: a version
removed since is named as removed, one whose number was given again (by a datamount that reused numbers) as not the
version pinned. Never another version's bytes, never ``latest`` resolved again.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
from typing import NamedTuple

from datamount.datasets import catalog
from datamount.datasets.errors import DatasetNotFoundError
from datamount.datasets.manifest import Manifest
from datamount.datasets.names import DatasetRef
from datamount.storage import IntegrityError, Store
from datamount.storage.cache import ContentCache


class Pinned(NamedTuple):
    """A resolved version: its dataset and number, its identity (its manifest's sha256), and the sha256 and size of
    the JSON kept for it in the content cache (``""`` and 0 when none was kept)."""

    name: str
    version: int
    sha256: str
    kept: str = ""
    kept_size: int = 0


class _NotCached(Exception):
    """The manifest is not in the cache (what a fill that must not fetch raises)."""


def pin(manifest: Manifest, cache: ContentCache | None) -> Pinned:
    """What finds ``manifest`` again in another process (its JSON kept in ``cache``, when there is one)."""
    if cache is None:
        return Pinned(manifest.name, manifest.version, manifest.manifest_sha256)
    data = manifest.to_json()
    kept = hashlib.sha256(data).hexdigest()
    cache.get(kept, len(data), lambda out: out.write(data), name=f"the manifest of {manifest.ref}")
    return Pinned(manifest.name, manifest.version, manifest.manifest_sha256, kept, len(data))


def recall(cache: ContentCache, pinned: Pinned, where: str, store: Store) -> Manifest | None:
    """The manifest ``pinned`` names, from ``cache`` (checked against its sha256 there; the parts of its file
    entries, if any, read from ``store`` when used); ``None`` when the cache has it not."""

    def absent(_: object) -> None:
        raise _NotCached

    if not pinned.kept:
        return None
    try:
        with cache.use(pinned.kept, pinned.kept_size, absent, name=where) as path:
            data = path.read_bytes()
    except (_NotCached, IntegrityError):
        return None
    if hashlib.sha256(data).hexdigest() != pinned.kept:
        return None
    manifest = Manifest.from_json(data, where, store=store, cache=cache)
    return dataclasses.replace(manifest, manifest_sha256=pinned.sha256)


def fetch(store: Store, pinned: Pinned, where: str) -> Manifest:
    """The version ``pinned`` names, read from ``store`` by its number: a ``FileNotFoundError`` naming ``where``
    when it was removed since it was pinned, or when that number's manifest is not the one pinned."""
    try:
        manifest = catalog.resolve(store, DatasetRef(pinned.name, pinned.version), public_fallback=False)
    except DatasetNotFoundError as gone:
        raise FileNotFoundError(
            errno.ENOENT, f"the version the filesystem sent here opened is gone from the store: {gone}", where
        ) from gone
    if manifest.manifest_sha256 != pinned.sha256:
        raise FileNotFoundError(
            errno.ENOENT,
            f"{manifest.ref} in {store.url} is not the version the filesystem sent here opened (its manifest's "
            f"sha256 is {manifest.manifest_sha256[:16]}…, the one opened {pinned.sha256[:16]}…): that version was "
            "removed and its number given again",
            where,
        )
    return manifest
