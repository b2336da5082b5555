"""Where datasets live in a store, and how they are found, described, checked and removed.

Layout of a dataset folder (``datasets/NAME`` for users, ``public/NAME`` for the public area)::

    objects/ab/abcdef...    file bytes, named by their sha256 and shared by every version
    lists/N.list            the normalised .list of version N
    packs/N/shard-*.parquet version N packed into Parquet shards (optional; listed in the manifest)
    versions/N.json         the manifest of version N, written last: the version exists once it is there
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from datamount.datasets.errors import DatasetNotFoundError, ManifestError
from datamount.datasets.manifest import Manifest, object_key
from datamount.datasets.names import PUBLIC_NAMESPACE, DatasetRef, parse_ref, validate_name
from datamount.storage import ObjectNotFoundError, Store

USER_AREA = "datasets"


def dataset_folder(name: str) -> str:
    """The folder of dataset ``name`` in a store."""
    validate_name(name)
    return name if name.startswith(PUBLIC_NAMESPACE + "/") else f"{USER_AREA}/{name}"


def manifest_path(name: str, version: int) -> str:
    return f"{dataset_folder(name)}/versions/{version}.json"


def list_path(name: str, version: int) -> str:
    return f"{dataset_folder(name)}/lists/{version}.list"


def versions(store: Store, name: str) -> list[int]:
    """The committed versions of ``name``, oldest first (``[]`` when there is none)."""
    listing = store.list(f"{dataset_folder(name)}/versions", recursive=False)
    found = []
    for path in listing:
        stem, ext = posixpath.splitext(posixpath.basename(path))
        if ext == ".json" and stem.isdigit():
            found.append(int(stem))
    return sorted(found)


def read_manifest(store: Store, name: str, version: int) -> Manifest:
    path = manifest_path(name, version)
    try:
        data = store.read(path)
    except ObjectNotFoundError:
        raise DatasetNotFoundError(f"dataset {name}@{version} does not exist in {store.url}") from None
    return Manifest.from_json(data, store.url_for(path))


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


def read_rows(store: Store, manifest: Manifest) -> list[tuple[str, ...]]:
    """The rows of a version's normalised list."""
    text = store.read(list_path(manifest.name, manifest.version)).decode("utf-8")
    return [tuple(line.split("\t")) for line in text.split("\n") if line]


def object_locations(manifest: Manifest, rows: list[tuple[str, ...]]) -> list[tuple[str, int]]:
    """For each row of an image version, the store path and size of the object holding its file."""
    folder = dataset_folder(manifest.name)
    objects = {entry.path: (f"{folder}/{entry.object_key}", entry.size) for entry in manifest.files}
    missing = next((row[0] for row in rows if row[0] not in objects), None)
    if missing is not None:
        raise DatasetNotFoundError(f"{manifest.ref}: the manifest has no file for {missing!r}")
    return [objects[row[0]] for row in rows]


def dataset_names(store: Store) -> list[str]:
    """Every dataset with at least one folder in the store: user datasets, namespaced ones, then public ones."""
    names = []
    for area in (USER_AREA, PUBLIC_NAMESPACE):
        for folder in store.list_folders(area):
            children = store.list_folders(folder)
            if f"{folder}/versions" in children:
                names.append(_name_of(folder))
            else:  # a namespace: its children are datasets
                names.extend(_name_of(child) for child in children if store.exists(f"{child}/versions"))
    return names


def _name_of(folder: str) -> str:
    return folder[len(USER_AREA) + 1 :] if folder.startswith(USER_AREA + "/") else folder


@dataclass
class DatasetSummary:
    """One line of ``datamount ls``: a dataset's latest version."""

    name: str
    versions: list[int]
    latest: Manifest | None


def summaries(store: Store) -> Iterator[DatasetSummary]:
    for name in dataset_names(store):
        found = versions(store, name)
        latest = None
        if found:
            try:
                latest = read_manifest(store, name, found[-1])
            except ManifestError:
                latest = None
        yield DatasetSummary(name, found, latest)


@dataclass
class VerifyReport:
    """What ``verify`` found: each object checked, and the problems."""

    manifest: Manifest
    checked: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(store: Store, manifest: Manifest, *, on_checked: Callable[[int], None] | None = None) -> VerifyReport:
    """Re-hash the list and every object of ``manifest``; report every missing object and every mismatch."""
    report = VerifyReport(manifest)
    folder = dataset_folder(manifest.name)
    targets = []
    if manifest.list_sha256:  # datasets imported from a stream have no list, only shards
        targets.append(
            (list_path(manifest.name, manifest.version), manifest.list_size, manifest.list_sha256, "the list")
        )
    targets += [(f"{folder}/{object_key(e.sha256)}", e.size, e.sha256, e.path) for e in manifest.files]
    targets += [(f"{folder}/{s.path}", s.size, s.sha256, f"shard {s.path}") for s in manifest.shards]
    present = store.list(f"{folder}/objects")
    present.update(store.list(f"{folder}/lists"))
    present.update(store.list(f"{folder}/packs/{manifest.version}"))
    for path, size, sha256, label in targets:
        report.checked += 1
        if path not in present:
            report.problems.append(f"missing: {label} ({store.url_for(path)})")
        elif present[path] != size:
            report.problems.append(f"wrong size: {label}: {present[path]} bytes, manifest says {size}")
        elif store.sha256(path) != sha256:
            report.problems.append(f"wrong content: {label} ({store.url_for(path)}) does not match its sha256")
        if on_checked is not None:
            on_checked(size)
    return report


def remove(store: Store, ref: str) -> list[int]:
    """Remove a version (``name@N``) or every version (``name``); return the versions removed.

    Objects that no remaining version uses are deleted too. The manifest goes first, so a reader never finds a
    version whose files are gone.
    """
    parsed = parse_ref(ref)
    found = versions(store, parsed.name)
    if not found:
        raise DatasetNotFoundError(f"no dataset named {parsed.name!r} in {store.url}")
    doomed = found if parsed.version is None else [parsed.version]
    if parsed.version is not None and parsed.version not in found:
        raise DatasetNotFoundError(f"dataset {parsed.name} has no version {parsed.version}")
    folder = dataset_folder(parsed.name)
    keep = [read_manifest(store, parsed.name, v) for v in found if v not in doomed]
    for version in doomed:
        store.remove(manifest_path(parsed.name, version), missing_ok=True)
        store.remove(list_path(parsed.name, version), missing_ok=True)
        store.remove(f"{folder}/packs/{version}", recursive=True, missing_ok=True)
    if not keep:
        store.remove(folder, recursive=True, missing_ok=True)
        return doomed
    used = {f"{folder}/{object_key(e.sha256)}" for m in keep for e in m.files}
    store.remove_many(path for path in store.list(f"{folder}/objects") if path not in used)
    return doomed
