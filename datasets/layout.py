"""Where each part of a dataset lives in a store: the one naming scheme for versions, lists, objects and shards.

A dataset is a folder, ``datasets/NAME`` (``datasets/TEAM/NAME``) for users and ``public/NAME`` for the public area::

    objects/ab/abcdef...                file bytes, named by their sha256 and shared by every version
    lists/abcdef....list                a normalised .list, named by its sha256 (format 1: lists/N.list)
    packs/DRAFT/shard-00000.parquet     the shards a writer wrote before its commit, in a folder of its own
    packs/N/shard-00000.parquet         the shards ``pack`` added to committed version N
    versions/N.json                     the manifest of version N, written last: the version exists once it is there

Nothing that is written before a commit depends on the version's number, so that it is the same whatever number
the commit gives it.
"""

from __future__ import annotations

import posixpath
import uuid

from datamount.datasets.manifest import Manifest, ShardEntry
from datamount.datasets.names import PUBLIC_NAMESPACE, validate_name

USER_AREA = "datasets"
VERSIONS = "versions"
OBJECTS = "objects"
LISTS = "lists"
PACKS = "packs"
#: The folders of a dataset's own; anything else in its folder belongs to the datasets of its namespace.
OWN_FOLDERS = (VERSIONS, OBJECTS, LISTS, PACKS)


def dataset_folder(name: str) -> str:
    """The folder of dataset ``name`` in a store."""
    validate_name(name)
    return name if name.startswith(PUBLIC_NAMESPACE + "/") else f"{USER_AREA}/{name}"


def dataset_name(folder: str) -> str:
    """The dataset whose folder is ``folder`` (the inverse of :func:`dataset_folder`)."""
    return folder[len(USER_AREA) + 1 :] if folder.startswith(USER_AREA + "/") else folder


def is_own_folder(path: str) -> bool:
    """Whether ``path`` is one of a dataset's own folders (``.../versions`` and the like)."""
    return posixpath.basename(path) in OWN_FOLDERS


def manifest_path(name: str, version: int) -> str:
    return f"{dataset_folder(name)}/{VERSIONS}/{version}.json"


def version_of(path: str) -> int | None:
    """The version number a path of the versions folder commits (``versions/3.json`` -> 3), if it is one."""
    stem, ext = posixpath.splitext(posixpath.basename(path))
    return int(stem) if ext == ".json" and stem.isdigit() else None


def object_key(sha256: str) -> str:
    """Where a file's bytes live in the dataset folder: content-addressed, shared by every version."""
    return f"{OBJECTS}/{sha256[:2]}/{sha256}"


def object_path(name: str, sha256: str) -> str:
    return f"{dataset_folder(name)}/{object_key(sha256)}"


def list_key(sha256: str) -> str:
    """Where a normalised list lives in the dataset folder: named by its content."""
    return f"{LISTS}/{sha256}.list"


def list_path(manifest: Manifest) -> str:
    """The store path of a version's normalised list."""
    if manifest.format_version < 2:
        return f"{dataset_folder(manifest.name)}/{LISTS}/{manifest.version}.list"
    return f"{dataset_folder(manifest.name)}/{list_key(manifest.list_sha256)}"


def new_pack_folder() -> str:
    """A pack folder of its own for one writer's shards (relative to the dataset folder): writers never share one,
    so a writer that fails removes exactly what it wrote."""
    return f"{PACKS}/{uuid.uuid4().hex[:16]}"


def version_pack_folder(version: int) -> str:
    """The pack folder of the shards ``pack`` adds to committed version ``version`` (relative to the dataset folder):
    the same for every pack of it, so that packing it twice, or in parallel, writes the same files."""
    return f"{PACKS}/{version}"


def shard_key(pack_folder: str, number: int) -> str:
    """The ``number``-th shard of a pack folder (relative to the dataset folder)."""
    return f"{pack_folder}/shard-{number:05d}.parquet"


def shard_path(name: str, shard: ShardEntry) -> str:
    return f"{dataset_folder(name)}/{shard.path}"


def pack_folder_of(shard: ShardEntry) -> str:
    """The pack folder (relative to the dataset folder) a shard was written into."""
    return posixpath.dirname(shard.path)
