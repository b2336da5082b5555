"""The versions of datasets in a store: how they are committed, found, described and removed.

Every writer (upload, import, public install) makes a version through :func:`commit`, and ``pack`` changes one
through :func:`replace`: the manifest is the commit, written last, and these two functions are the only ones that
write manifests. Where each part of a dataset lives: :mod:`datamount.datasets.layout`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version as package_version

from datamount.datasets import layout
from datamount.datasets.errors import DatasetNotFoundError, ManifestError
from datamount.datasets.manifest import Manifest, now_utc
from datamount.datasets.names import PUBLIC_NAMESPACE, DatasetRef, parse_ref
from datamount.storage import ObjectNotFoundError, Store


def versions(store: Store, name: str) -> list[int]:
    """The committed versions of ``name``, oldest first (``[]`` when there is none)."""
    folder = f"{layout.dataset_folder(name)}/{layout.VERSIONS}"
    found = (layout.version_of(path) for path in store.list(folder, recursive=False))
    return sorted(number for number in found if number is not None)


def read_manifest(store: Store, name: str, version: int) -> Manifest:
    path = layout.manifest_path(name, version)
    try:
        data = store.read(path)
    except ObjectNotFoundError:
        raise DatasetNotFoundError(f"dataset {name}@{version} does not exist in {store.url}") from None
    return Manifest.from_json(data, store.url_for(path))


def latest(store: Store, name: str) -> Manifest | None:
    """The latest committed version of ``name``, or None when it has none."""
    found = versions(store, name)
    return read_manifest(store, name, found[-1]) if found else None


def resolve(store: Store, ref: str | DatasetRef, *, public_fallback: bool = True) -> Manifest:
    """The manifest ``ref`` (``name`` or ``name@N``) points to; a plain name falls back to the public area."""
    parsed = parse_ref(ref) if isinstance(ref, str) else ref
    candidates = [parsed.name]
    if public_fallback and not parsed.is_public and "/" not in parsed.name:
        candidates.append(f"{PUBLIC_NAMESPACE}/{parsed.name}")
    for name in candidates:
        found = versions(store, name)
        if not found:
            continue
        if parsed.version is None:
            return read_manifest(store, name, found[-1])
        if parsed.version in found:
            return read_manifest(store, name, parsed.version)
        raise DatasetNotFoundError(
            f"dataset {name} has no version {parsed.version} in {store.url}; versions: "
            + ", ".join(str(v) for v in found)
        )
    hint = " (nor in the public area)" if len(candidates) > 1 else ""
    raise DatasetNotFoundError(f"no dataset named {parsed.name!r} in {store.url}{hint}; see 'datamount ls'")


# ---------------------------------------------------------------------------------------------- committing


def commit(store: Store, draft: Manifest) -> Manifest:
    """Make ``draft`` the next version of its dataset; return the committed manifest.

    The version number, the time and the datamount version are filled in here, and the manifest is written last:
    everything it names (list, objects, shards) must already be stored. From the moment it is written the version
    exists for every reader; a version is never written over.
    """
    if draft.version:
        raise ValueError(f"{draft.ref} is already committed")
    existing = versions(store, draft.name)
    manifest = dataclasses.replace(
        draft,
        version=existing[-1] + 1 if existing else 1,
        created=now_utc(),
        datamount_version=package_version("datamount"),
    )
    store.write(layout.manifest_path(manifest.name, manifest.version), manifest.to_json())
    return manifest


def replace(store: Store, current: Manifest, updated: Manifest) -> Manifest:
    """Replace committed version ``current`` by ``updated`` (the same version with more stored, e.g. its shards).

    Its samples must not change: a reader that opened the version before keeps reading what it found.
    """
    if (updated.name, updated.version) != (current.name, current.version) or updated.rows != current.rows:
        raise ValueError(f"{updated.ref} cannot replace {current.ref}: a replacement keeps the version and its rows")
    store.write(layout.manifest_path(updated.name, updated.version), updated.to_json())
    return updated


# --------------------------------------------------------------------------------------------------- listing


def dataset_names(store: Store) -> list[str]:
    """Every dataset with at least one folder in the store: user datasets and namespaced ones (``team`` and
    ``team/x`` both, when both exist), then public ones."""
    names = []
    for area in (layout.USER_AREA, PUBLIC_NAMESPACE):
        for folder in store.list_folders(area):
            children = store.list_folders(folder)
            if f"{folder}/{layout.VERSIONS}" in children:
                names.append(layout.dataset_name(folder))
            names.extend(
                layout.dataset_name(child)
                for child in children
                if not layout.is_own_folder(child) and store.exists(f"{child}/{layout.VERSIONS}")
            )
    return names


@dataclass
class DatasetSummary:
    """One line of ``datamount ls``: a dataset's latest version."""

    name: str
    versions: list[int]
    latest: Manifest | None


def summaries(store: Store) -> Iterator[DatasetSummary]:
    for name in dataset_names(store):
        found = versions(store, name)
        newest = None
        if found:
            try:
                newest = read_manifest(store, name, found[-1])
            except ManifestError:
                newest = None
        yield DatasetSummary(name, found, newest)


# --------------------------------------------------------------------------------------------------- removal


def remove(store: Store, ref: str) -> list[int]:
    """Remove a version (``name@N``) or every version (``name``); return the versions removed.

    The manifests go first, so a reader never finds a version whose files are gone; then every list, pack folder
    and object that no remaining version uses.
    """
    parsed = parse_ref(ref)
    found = versions(store, parsed.name)
    if not found:
        raise DatasetNotFoundError(f"no dataset named {parsed.name!r} in {store.url}")
    doomed = found if parsed.version is None else [parsed.version]
    if parsed.version is not None and parsed.version not in found:
        raise DatasetNotFoundError(f"dataset {parsed.name} has no version {parsed.version}")
    keep = [read_manifest(store, parsed.name, v) for v in found if v not in doomed]
    for version in doomed:
        store.remove(layout.manifest_path(parsed.name, version), missing_ok=True)
    if keep:
        remove_unused(store, parsed.name, keep)
    else:
        remove_folder(store, parsed.name)
    return doomed


def remove_folder(store: Store, name: str) -> None:
    """Remove everything of dataset ``name``, and its folder unless the datasets of its namespace live in it."""
    folder = layout.dataset_folder(name)
    for area in layout.OWN_FOLDERS:
        store.remove(f"{folder}/{area}", recursive=True, missing_ok=True)
    if not store.list_folders(folder) and not store.list(folder, recursive=False):
        store.remove(folder, recursive=True, missing_ok=True)


def remove_unused(store: Store, name: str, kept: list[Manifest]) -> None:
    """Remove the lists, pack folders and objects of dataset ``name`` that none of ``kept`` uses."""
    folder = layout.dataset_folder(name)
    used_packs = {f"{folder}/{layout.pack_folder_of(shard)}" for m in kept for shard in m.shards}
    for pack in store.list_folders(f"{folder}/{layout.PACKS}"):
        if pack not in used_packs:
            store.remove(pack, recursive=True, missing_ok=True)
    used = {layout.list_path(m) for m in kept if m.has_list}
    used.update(layout.object_path(name, entry.sha256) for m in kept for entry in m.files)
    stored = [
        path for area in (layout.LISTS, layout.OBJECTS) for path in store.list(f"{folder}/{area}") if path not in used
    ]
    store.remove_many(stored)
