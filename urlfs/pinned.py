"""Versions a filesystem resolved, carried to other processes by their manifest's sha256 alone.

A version is immutable once resolved (``latest`` too, once resolved: it stays the number it was). A filesystem sent
to a worker (a DataLoader's, fork or spawn) carries, for each version it opened, its number and the sha256 and size
of its manifest's JSON; the JSON itself goes into the local content cache (:class:`ContentCache`, keyed and checked
by sha256), where the worker finds it without asking the store. A worker whose cache lost it reads the manifest
from the store again, and takes it only if it is the same.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from datamount.datasets.manifest import Manifest
from datamount.storage import IntegrityError, Store
from datamount.storage.cache import ContentCache


class Pinned(NamedTuple):
    """A resolved version: its number, and the sha256 and size of its manifest's JSON."""

    version: int
    sha256: str
    size: int


class _NotCached(Exception):
    """The manifest is not in the cache (what a fill that must not fetch raises)."""


def remember(cache: ContentCache, manifest: Manifest) -> Pinned:
    """Keep ``manifest``'s JSON in ``cache``; what finds it again."""
    data = manifest.to_json()
    sha256 = hashlib.sha256(data).hexdigest()
    cache.get(sha256, len(data), lambda out: out.write(data), name=f"the manifest of {manifest.ref}")
    return Pinned(manifest.version, sha256, len(data))


def recall(cache: ContentCache, pinned: Pinned, where: str, store: Store) -> Manifest | None:
    """The manifest ``pinned`` names, from ``cache`` (checked against its sha256 there; the parts of its file
    entries, if any, read from ``store`` when used); ``None`` when the cache has it not."""

    def absent(_: object) -> None:
        raise _NotCached

    try:
        with cache.use(pinned.sha256, pinned.size, absent, name=where) as path:
            data = path.read_bytes()
    except (_NotCached, IntegrityError):
        return None
    if hashlib.sha256(data).hexdigest() != pinned.sha256:
        return None
    return Manifest.from_json(data, where, store=store, cache=cache)


def same(manifest: Manifest, pinned: Pinned) -> bool:
    """Whether ``manifest`` (read from the store again) is the version ``pinned`` names."""
    return hashlib.sha256(manifest.to_json()).hexdigest() == pinned.sha256
