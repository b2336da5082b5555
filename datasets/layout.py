"""Where each part of a dataset lives in a store: the one naming scheme for versions, lists, objects and shards.

A dataset is a folder, ``datasets/NAME`` (``datasets/TEAM/NAME``) for users and ``public/NAME`` for the public area::

    objects/ab/abcdef...                file bytes, named by their sha256 and shared by every version
    lists/abcdef....list                a normalised .list, named by its sha256 (format 1: lists/N.list)
    packs/DRAFT/shard-00000.parquet     the shards a writer wrote before its commit, in a folder of its own
    packs/N-SIZES/shard-00000.parquet   the shards ``pack`` added to committed version N (one folder per set of
                                        sizes: shard, row group, and a smaller first row group per shard)
    versions/N.json                     the manifest of version N, created last: the version exists once it is there
    versions/entries/abcdef....parquet  a part of the file entries a manifest names (format 6), named by its sha256
    versions/N.pack.json                the shards ``pack`` added to version N, created once
    versions/N.removed                  version N was removed (its manifest's sha256): the number is never given
                                        again, and the mark stays when every version is removed
    locks/shared-ID.json                a writer at work (exclusive-ID.json: a removal): see datasets/locks.py

Nothing that is written before a commit depends on the version's number, so that it is the same whatever number
the commit gives it.
"""

from __future__ import annotations

import functools
import posixpath
import uuid
from dataclasses import dataclass

from datamount.datasets.manifest import Manifest, ShardEntry
from datamount.datasets.names import PUBLIC_NAMESPACE, validate_name, version_number

USER_AREA = "datasets"
VERSIONS = "versions"
OBJECTS = "objects"
LISTS = "lists"
PACKS = "packs"
LOCKS = "locks"
#: The parts of versions' file entries: in the versions folder, which only the commit writes (and which no dataset
#: name can be), not beside it.
ENTRIES = f"{VERSIONS}/entries"
#: The codec of the shards of a version's pack folder that names none (packs made before zstd).
EARLIER_COMPRESSION = "snappy"
#: The folders of a dataset's data: removing them all removes the dataset.
DATA_FOLDERS = (VERSIONS, OBJECTS, LISTS, PACKS)
#: The folders of a dataset's own (its data, and the locks of those who write or remove it:
#: :mod:`datamount.datasets.locks`); anything else in its folder belongs to the datasets of its namespace.
OWN_FOLDERS = (*DATA_FOLDERS, LOCKS)


@functools.lru_cache(maxsize=256)
def dataset_folder(name: str) -> str:
    """The folder of dataset ``name`` in a store (remembered: it is asked once per file of a version, and checking
    the name takes microseconds)."""
    validate_name(name)
    return name if name.startswith(PUBLIC_NAMESPACE + "/") else f"{USER_AREA}/{name}"


def dataset_name(folder: str) -> str:
    """The dataset whose folder is ``folder`` (the inverse of :func:`dataset_folder`)."""
    return folder[len(USER_AREA) + 1 :] if folder.startswith(USER_AREA + "/") else folder


def is_own_folder(path: str) -> bool:
    """Whether ``path`` is one of a dataset's own folders (``.../versions`` and the like)."""
    return posixpath.basename(path) in OWN_FOLDERS


#: What a versions folder holds for version N: its manifest, the record of the shards ``pack`` added to it, and the
#: mark a removal leaves (so that the number is never given again: the marks outlive the name's other data).
MANIFEST_SUFFIX = ".json"
PACK_RECORD_SUFFIX = ".pack.json"
REMOVED_SUFFIX = ".removed"


def manifest_path(name: str, version: int) -> str:
    return f"{dataset_folder(name)}/{VERSIONS}/{version}{MANIFEST_SUFFIX}"


def pack_record_path(name: str, version: int) -> str:
    return f"{dataset_folder(name)}/{VERSIONS}/{version}{PACK_RECORD_SUFFIX}"


def removed_path(name: str, version: int) -> str:
    return f"{dataset_folder(name)}/{VERSIONS}/{version}{REMOVED_SUFFIX}"


def version_entry(path: str) -> tuple[int, str] | None:
    """``(N, suffix)`` for a file of the versions folder (``versions/3.pack.json`` -> ``(3, ".pack.json")``); None
    for any other name, and for a number written otherwise than a commit writes it (``03.json``, ``².json``): each
    version has one file name."""
    number, dot, _ = posixpath.basename(path).partition(".")
    suffix = posixpath.basename(path)[len(number) :]
    version = version_number(number)
    if not dot or version is None or suffix not in (MANIFEST_SUFFIX, PACK_RECORD_SUFFIX, REMOVED_SUFFIX):
        return None
    return version, suffix


def object_key(sha256: str) -> str:
    """Where a file's bytes live in the dataset folder: content-addressed, shared by every version."""
    return f"{OBJECTS}/{sha256[:2]}/{sha256}"


def object_path(name: str, sha256: str) -> str:
    return f"{dataset_folder(name)}/{object_key(sha256)}"


def list_key(sha256: str) -> str:
    """Where a normalised list lives in the dataset folder: named by its content."""
    return f"{LISTS}/{sha256}.list"


def file_part_key(sha256: str) -> str:
    """Where a part of a version's file entries lives in the dataset folder: named by its content
    (:mod:`datamount.datasets.file_parts`)."""
    return f"{ENTRIES}/{sha256}.parquet"


def list_path(manifest: Manifest) -> str:
    """The store path of a version's normalised list."""
    if manifest.format_version < 2:
        return f"{dataset_folder(manifest.name)}/{LISTS}/{manifest.version}.list"
    return f"{dataset_folder(manifest.name)}/{list_key(manifest.list_sha256)}"


def new_pack_folder() -> str:
    """A pack folder of its own for one writer's shards (relative to the dataset folder): writers never share one,
    so a writer that fails removes exactly what it wrote."""
    return f"{PACKS}/{uuid.uuid4().hex[:16]}"


def version_pack_folder(
    version: int, shard_bytes: int, row_group_bytes: int, first_group_bytes: int, compression: str
) -> str:
    """The pack folder of the shards ``pack`` adds to committed version ``version`` with these sizes and codec
    (relative to the dataset folder): packs with the same settings write the same bytes to the same files, packs with
    others never touch them. A smaller first row group per shard comes after the sizes (``N-SHARD-GROUP-FIRST``;
    without it every row group was cut alike, as packs made before first row groups were smaller), then the codec
    (``-zstd``; none named: Snappy, as packs made before zstd)."""
    first = f"-{first_group_bytes}" if first_group_bytes < row_group_bytes else ""
    codec = f"-{compression}" if compression != EARLIER_COMPRESSION else ""
    return f"{PACKS}/{version}-{shard_bytes}-{row_group_bytes}{first}{codec}"


@dataclass(frozen=True)
class PackSettings:
    """What :func:`version_pack_folder` names a pack folder after: the version and the sizes and codec its shards
    were cut with (``first_group_bytes`` is ``row_group_bytes`` where the name gives no smaller first group)."""

    version: int
    shard_bytes: int
    row_group_bytes: int
    first_group_bytes: int
    compression: str


def pack_settings(pack_folder: str) -> PackSettings | None:
    """The settings a folder named by :func:`version_pack_folder` was named after; ``None`` for any other pack folder
    (a draft's, an upload's)."""
    prefix, slash, name = pack_folder.partition("/")
    parts = name.split("-")
    codec = parts.pop() if len(parts) > 3 and not parts[-1].isdigit() else EARLIER_COMPRESSION
    if prefix != PACKS or not slash or len(parts) not in (3, 4) or not all(p.isdigit() and p.isascii() for p in parts):
        return None
    version, shard_bytes, row_group_bytes, *first = (int(part) for part in parts)
    return PackSettings(version, shard_bytes, row_group_bytes, first[0] if first else row_group_bytes, codec)


def upload_pack_folder(digest: str, attempt: int) -> str:
    """A pack folder of ``upload --pack`` (relative to the dataset folder), named after what decides its shards (the
    list, its files' sizes, the shard sizes: ``digest``), so that an upload run again after a kill finds the shards
    it wrote; ``attempt`` counts the folders of that name a version may already use (see :func:`taken_marker`)."""
    return f"{PACKS}/upload-{digest}-{attempt}"


def taken_marker(pack_folder: str) -> str:
    """The file that says a version may use a pack folder's shards (relative to the dataset folder): written before
    the commit, it keeps every later writer out of the folder."""
    return f"{pack_folder}/taken"


def shard_marker(pack_folder: str, number: int) -> str:
    """The marker a resumable writer leaves beside the ``number``-th shard once it is written (relative to the
    dataset folder)."""
    return f"{pack_folder}/shard-{number:05d}.done.json"


def upload_shard_marker(pack_folder: str, number: int) -> str:
    """The marker ``upload --pack`` leaves beside the ``number``-th shard once it is written, with each of its rows'
    file size and sha256 (relative to the dataset folder; :mod:`datamount.datasets.upload_marker`)."""
    return f"{pack_folder}/shard-{number:05d}.done"


def shard_key(pack_folder: str, number: int, run: str = "") -> str:
    """The ``number``-th shard of a pack folder (relative to the dataset folder); written by writer ``run`` when
    several writers may write that shard (each its own file: none ever replaces a file another wrote)."""
    return f"{pack_folder}/shard-{number:05d}{f'-{run}' if run else ''}.parquet"


def shard_path(name: str, shard: ShardEntry) -> str:
    return f"{dataset_folder(name)}/{shard.path}"


def pack_folder_of(shard: ShardEntry) -> str:
    """The pack folder (relative to the dataset folder) a shard was written into."""
    return posixpath.dirname(shard.path)
