"""The versions of datasets in a store: how they are committed, found, described and removed.

A version exists once its manifest does: every writer (upload, import, public install) makes one through
:func:`commit`, which creates the manifest *exclusively* (of two writers that race for a number, one gets it and the
other takes the next), after checking that everything it names is stored. A committed manifest is never written
over: ``pack`` records the shards it adds in a file of their own, created once (:func:`add_shards`).

``name@N`` means one version for the life of a store: a removal marks a version removed (``versions/N.removed``,
which records its manifest's sha256) before deleting anything, and the marks stay when every version of a name is
removed, so that the name's next version continues its numbering: a number is never given twice, as an S3 version
id or a git commit is never reused. A version's identity is its manifest's sha256
(:attr:`~datamount.datasets.manifest.Manifest.manifest_sha256`); what outlives a call keys a version by it. Writers and
removals hold the dataset's locks (:mod:`datamount.datasets.locks`): a commit is made only under a writer's shared
lock, and parts are deleted only under the exclusive one, so no removal takes what a version being committed uses.
Where each part of a dataset lives: :mod:`datamount.datasets.layout`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import hashlib
import json
import logging
import posixpath
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.metadata import version as package_version

from datamount.datasets import layout, locks, object_buckets
from datamount.datasets.errors import (
    CommitConflictError,
    DatasetBusyError,
    DatasetNotFoundError,
    InvalidDatasetNameError,
    ManifestError,
)
from datamount.datasets.file_parts import FileParts
from datamount.datasets.manifest import Kind, Manifest, ShardEntry, now_utc
from datamount.datasets.names import PUBLIC_NAMESPACE, DatasetRef, parse_ref, validate_name
from datamount.datasets.row_index import RowIndex
from datamount.storage import DatamountError, ObjectExistsError, ObjectNotFoundError, Store

log = logging.getLogger(__name__)

#: Close names a "did you mean" offers at most (:func:`close_names`).
CLOSE_NAMES = 3
#: Numbers a commit tries before it gives up: each failed try means another writer committed meanwhile.
COMMIT_ATTEMPTS = 100
#: Format 2 of a pack record: its shards' entries carry the xxh3-64 of their row groups, footer and blocks (an older
#: datamount refuses them rather than call them damaged; format 1's, which it reads, do not).
PACK_RECORD_FORMAT = 2


@dataclass(frozen=True)
class VersionsFolder:
    """What one listing of a dataset's versions folder shows."""

    manifests: frozenset[int] = frozenset()
    packed: frozenset[int] = frozenset()
    removed: frozenset[int] = frozenset()

    @property
    def committed(self) -> list[int]:
        """The versions that exist, oldest first."""
        return sorted(self.manifests - self.removed)

    @property
    def next_number(self) -> int:
        """The number a new version takes: above every number given so far."""
        return max(self.manifests | self.removed | self.packed, default=0) + 1


def versions_folder(store: Store, name: str) -> VersionsFolder:
    found: dict[str, set[int]] = {layout.MANIFEST_SUFFIX: set(), layout.PACK_RECORD_SUFFIX: set()}
    found[layout.REMOVED_SUFFIX] = set()
    for path in store.list(f"{layout.dataset_folder(name)}/{layout.VERSIONS}", recursive=False):
        entry = layout.version_entry(path)
        if entry is not None:
            found[entry[1]].add(entry[0])
    return VersionsFolder(
        frozenset(found[layout.MANIFEST_SUFFIX]),
        frozenset(found[layout.PACK_RECORD_SUFFIX]),
        frozenset(found[layout.REMOVED_SUFFIX]),
    )


def versions(store: Store, name: str) -> list[int]:
    """The committed versions of ``name``, oldest first (``[]`` when there is none)."""
    return versions_folder(store, name).committed


def read_manifest(store: Store, name: str, version: int, *, packed: bool | None = None) -> Manifest:
    """Version ``version`` of ``name``, with the shards ``pack`` added to it (``packed``: whether the versions folder
    lists a pack record; looked for when not known)."""
    path = layout.manifest_path(name, version)
    record: bytes | None = None
    try:
        if packed:  # both asked for at once: one round trip, not two
            data, record = _read_both(store, path, layout.pack_record_path(name, version))
        else:
            data = store.read(path)
    except ObjectNotFoundError:
        raise DatasetNotFoundError(f"dataset {name}@{version} does not exist in {store.url}") from None
    return _with_pack_record(store, path, data, record, look=packed is not False)


def _with_pack_record(store: Store, path: str, data: bytes, record: bytes | None, *, look: bool) -> Manifest:
    """The manifest ``data`` (read from ``path``) with the shards its pack record adds (``record``, its bytes when
    read already; else read here when ``look``)."""
    manifest = Manifest.from_json(data, store.url_for(path), store=store)
    if manifest.shards or (record is None and not look):
        return manifest
    shards = _pack_record(store, manifest, hashlib.sha256(data).hexdigest(), record)
    return manifest.with_shards(shards) if shards else manifest


def _read_pinned(store: Store, name: str, version: int) -> Manifest | None:
    """Version ``version`` of ``name`` found without listing its versions folder (one round trip rather than two):
    its manifest, its pack record and its removal mark asked for at once; ``None`` when the manifest is not there or
    the version is marked removed (the listing then says what there is)."""
    manifest_path = layout.manifest_path(name, version)
    paths = [manifest_path, layout.removed_path(name, version), layout.pack_record_path(name, version)]
    read = functools.partial(_read_if_there, store)
    if store.local_path() is not None:  # no round trips to save, so no threads to start (0.04 ms rather than 0.35)
        data, removed, record = map(read, paths)
    else:
        with ThreadPoolExecutor(len(paths), thread_name_prefix="datamount-version") as asking:
            data, removed, record = asking.map(read, paths)
    if data is None or removed is not None:
        return None
    return _with_pack_record(store, manifest_path, data, record, look=False)


def _read_if_there(store: Store, path: str) -> bytes | None:
    try:
        return store.read(path)
    except ObjectNotFoundError:
        return None


def _read_both(store: Store, manifest_path: str, record_path: str) -> tuple[bytes, bytes | None]:
    """A manifest and its pack record, read at once; the record ``None`` when it is gone (its version removed
    since the folder was listed: the manifest is then read alone, and tells)."""
    try:
        data, record = store.read_many([manifest_path, record_path])
    except ObjectNotFoundError:
        return store.read(manifest_path), None
    return data, record


@dataclass(frozen=True)
class Removal:
    """What the mark of a removed version says: when it was removed, and the sha256 of the manifest it had (empty
    for a mark written before marks recorded it)."""

    version: int
    removed: str = ""
    manifest_sha256: str = ""


def removal(store: Store, name: str, version: int) -> Removal | None:
    """The mark of version ``version`` of ``name`` if it was removed, else ``None``."""
    data = _read_if_there(store, layout.removed_path(name, version))
    return None if data is None else _parse_removal(version, data)


def _parse_removal(version: int, data: bytes) -> Removal:
    """A removal mark's bytes: a JSON object, or (a mark written before they recorded the manifest's sha256) the
    time alone. Whatever else they hold, the version was removed."""
    try:
        fields = json.loads(data)
    except ValueError:
        return Removal(version, data.decode("utf-8", "replace").strip()[:64])
    if not isinstance(fields, dict):
        return Removal(version)
    removed, sha256 = fields.get("removed"), fields.get("manifest_sha256")
    return Removal(version, removed if isinstance(removed, str) else "", sha256 if isinstance(sha256, str) else "")


def _removal_mark(manifest_sha256: str) -> bytes:
    return (json.dumps({"removed": now_utc(), "manifest_sha256": manifest_sha256}) + "\n").encode()


def latest(store: Store, name: str) -> Manifest | None:
    """The latest committed version of ``name``, or None when it has none."""
    folder = versions_folder(store, name)
    committed = folder.committed
    return read_manifest(store, name, committed[-1], packed=committed[-1] in folder.packed) if committed else None


def store_named(store: Store) -> str:
    """``store`` as a message about what it lacks names it: its URL, and that its folder does not exist (a mistyped
    path, most likely)."""
    return store.url if store.root_exists else f"{store.url} (no such folder)"


def resolve(store: Store, ref: str | DatasetRef, *, public_fallback: bool = True) -> Manifest:
    """The manifest ``ref`` (``name`` or ``name@N``) points to; a plain name falls back to the public area."""
    parsed = parse_ref(ref) if isinstance(ref, str) else ref
    if parsed.version is not None:
        pinned = _read_pinned(store, parsed.name, parsed.version)
        if pinned is not None:
            return pinned
    candidates = [parsed.name]
    if public_fallback and not parsed.is_public and "/" not in parsed.name:
        candidates.append(f"{PUBLIC_NAMESPACE}/{parsed.name}")
    emptied: tuple[str, VersionsFolder] | None = None  # the first name whose every version was removed
    for name in candidates:
        folder = versions_folder(store, name)
        found = folder.committed
        if not found:
            if emptied is None and folder.removed:
                emptied = name, folder
            continue
        wanted = found[-1] if parsed.version is None else parsed.version
        if wanted in found:
            try:
                return read_manifest(store, name, wanted, packed=wanted in folder.packed)
            except DatasetNotFoundError:
                if parsed.version is not None:
                    raise
                return resolve(store, parsed, public_fallback=public_fallback)  # removed since listed: the next latest
        raise DatasetNotFoundError(f"{_no_version(store, name, wanted, folder)}; versions: {_numbers(found)}")
    if emptied is not None:
        name, folder = emptied
        what = _no_version(store, name, parsed.version, folder) if parsed.version else name
        raise DatasetNotFoundError(
            f"{what}: every version of {name} in {store.url} was removed ({_numbers(folder.removed)}); "
            f"its next upload is @{folder.next_number}"
        )
    raise no_dataset(store, parsed.name, public_fallback=len(candidates) > 1)


def no_dataset(store: Store, name: str, *, public_fallback: bool = False) -> DatasetNotFoundError:
    """The error for a dataset ``name`` that ``store`` does not hold (nor its public area, with
    ``public_fallback``): it names the store's datasets close to it (:func:`close_names`), or where to look."""
    if not store.root_exists:
        return DatasetNotFoundError(f"no dataset named {name!r} in {store_named(store)}; see 'datamount ls'")
    hint = " (nor in the public area)" if public_fallback else ""
    close = close_names(store, name, public_fallback=public_fallback)
    fix = f"did you mean {' or '.join(map(repr, close))}?" if close else "see 'datamount ls'"
    return DatasetNotFoundError(f"no dataset named {name!r} in {store.url}{hint}; {fix}")


def close_names(store: Store, name: str, *, public_fallback: bool = True) -> list[str]:
    """The datasets of ``store`` whose names are close to ``name`` (a misspelling of one), closest first, at most
    :data:`CLOSE_NAMES`, each as ``name`` would be written to find it.

    The cost is bounded whatever the store holds: one listing of the folder that ``name``'s dataset would be in
    (and of the public area, where a plain name is also looked for with ``public_fallback``), then one of the
    versions folder of each close name, which is offered only when it has a version.
    """
    areas = [posixpath.dirname(layout.dataset_folder(name))]
    if public_fallback and "/" not in name:
        areas.append(PUBLIC_NAMESPACE)
    found: dict[str, tuple[str, str]] = {}  # a name's last part: the name as written, and the dataset's own
    for area in areas:
        for folder in store.list_folders(area):
            dataset = layout.dataset_name(folder)
            if layout.is_own_folder(folder) or not _is_name(dataset):
                continue
            written = posixpath.basename(dataset) if area == PUBLIC_NAMESPACE and "/" not in name else dataset
            found.setdefault(posixpath.basename(dataset), (written, dataset))  # as resolve: the user's name first
    close = difflib.get_close_matches(posixpath.basename(name), list(found), n=CLOSE_NAMES)
    return [found[part][0] for part in close if versions_folder(store, found[part][1]).committed]


def _is_name(text: str) -> bool:
    try:
        validate_name(text)
    except InvalidDatasetNameError:
        return False
    return True


def _no_version(store: Store, name: str, version: int, folder: VersionsFolder) -> str:
    """Why ``name@version`` is not there: it was removed (when, and its manifest's sha256), or never made."""
    if version not in folder.removed:
        return f"dataset {name} has no version {version} in {store.url}"
    mark = removal(store, name, version) or Removal(version)
    when = f" on {mark.removed}" if mark.removed else ""
    which = f" (manifest sha256 {mark.manifest_sha256[:16]}…)" if mark.manifest_sha256 else ""
    return f"{name}@{version}{which} was removed from {store.url}{when}; its number is never given again"


def _numbers(versions: Iterable[int]) -> str:
    return ", ".join(str(number) for number in sorted(versions))


# ---------------------------------------------------------------------------------------------- committing


def commit(store: Store, draft: Manifest, *, restore: Callable[[list[str]], object] | None = None) -> Manifest:
    """Make ``draft`` the next version of its dataset; return the committed manifest.

    Everything the draft names (list, objects, shards) must already be stored: it is checked here, from a listing,
    right before the manifest is created (:class:`DatasetNotFoundError` names what is missing; a writer that can
    store it again passes ``restore``, which is handed those store paths first, and the check is made once more),
    and made durable
    (:meth:`~datamount.storage.Store.make_durable`): a committed version survives a crash. The version number,
    the time and the datamount version are filled in here, and the manifest is created exclusively: when another
    writer takes the number first, this one takes the next. From the moment the manifest exists the version exists
    for every reader, and it never changes.

    The draft's files (any sequence of entries: a list, or one read from disk) are iterated once, sorted by path and
    stored as the parts the manifest names (:mod:`datamount.datasets.file_parts`), before anything is checked.
    """
    if draft.version:
        raise ValueError(f"{draft.ref} is already committed")
    lock = _lock_held(store, draft.name, "commit a version of")
    draft = _with_file_parts(store, draft)
    gone = missing(store, draft)
    if gone and restore is not None:  # removed since it was stored (a racing removal): stored again, then checked
        restore(gone)
        gone = missing(store, draft)
    if gone:
        raise DatasetNotFoundError(
            f"cannot commit a new version of {draft.name} in {store.url}: {len(gone)} of the files it names are not "
            f"stored (removed meanwhile?), e.g. {store.url_for(gone[0])}; run the same command again"
        )
    store.make_durable(path for path, _ in named_files(draft))
    lock.check()  # still held: nothing it names was removed since the check
    for _ in range(COMMIT_ATTEMPTS):
        manifest = dataclasses.replace(
            draft,
            version=versions_folder(store, draft.name).next_number,
            created=now_utc(),
            datamount_version=package_version("datamount"),
        )
        document = manifest.to_json()
        try:
            store.create(layout.manifest_path(manifest.name, manifest.version), document)
        except ObjectExistsError:
            continue  # another writer committed this number first: take the next
        return dataclasses.replace(manifest, manifest_sha256=hashlib.sha256(document).hexdigest())
    raise CommitConflictError(
        f"cannot commit a new version of {draft.name} in {store.url}: other writers took each of "
        f"{COMMIT_ATTEMPTS} numbers first; try again"
    )


def _with_file_parts(store: Store, draft: Manifest) -> Manifest:
    """``draft`` with its files' entries in parts stored in ``store``, and an image version's rows indexed
    (:mod:`datamount.datasets.row_index`); as it is when they are there already, or it has no files (a version
    without files keeps the format it has)."""
    folder = layout.dataset_folder(draft.name)
    if isinstance(draft.files, FileParts) and draft.files.stored_in(store, folder):
        return draft
    if not len(draft.files):
        return dataclasses.replace(draft, files=[], row_parts=None)
    from datamount.datasets import file_parts_writer  # pyarrow.compute: only for a commit

    where = f"{store.url}/{folder}"
    if draft.kind is not Kind.IMAGE or not draft.has_list:
        parts = file_parts_writer.write_file_parts(store, draft.name, draft.files)
        return dataclasses.replace(draft, files=FileParts(store, folder, parts, where), row_parts=None)
    try:
        pairs = file_parts_writer.list_pairs(store, layout.list_path(draft), draft.list_size, draft.rows)
        parts, rows = file_parts_writer.write_indexes(
            store, draft.name, draft.files, pairs, draft.rows, by_row=draft.objects
        )
    except ObjectNotFoundError as exc:
        raise DatasetNotFoundError(
            f"cannot commit a new version of {draft.name} in {store.url}: its list "
            f"{store.url_for(layout.list_path(draft))} is not stored (removed meanwhile?); run the same command again"
        ) from exc
    except ValueError as exc:
        raise ManifestError(f"cannot commit a new version of {draft.name} in {store.url}: {exc}") from exc
    files = FileParts(store, folder, parts, where)
    return dataclasses.replace(draft, files=files, row_parts=RowIndex(store, folder, rows, where))


def _lock_held(store: Store, name: str, doing: str, kind: str = locks.SHARED) -> locks.Lock:
    """The lock this process holds on dataset ``name`` (of ``kind`` or stronger), which ``doing`` needs."""
    lock = locks.held(store, name)
    if lock is None or (kind == locks.EXCLUSIVE and lock.kind != kind):
        raise RuntimeError(
            f"cannot {doing} {name} without holding its {kind} lock (datamount.datasets.locks."
            f"{'writing' if kind == locks.SHARED else 'removing'})"
        )
    return lock


def named_files(draft: Manifest, *, objects: bool = True) -> Iterator[tuple[str, int]]:
    """The store path and size of everything ``draft`` names: its list, shards and parts of its file entries, then
    (unless ``objects`` is false) each entry's object, as its entries are read (an object named by several entries
    comes once for each): nothing is held per file."""
    if draft.has_list:
        yield layout.list_path(draft), draft.list_size
    yield from ((layout.shard_path(draft.name, shard), shard.size) for shard in draft.shards)
    yield from file_part_paths(draft).items()
    if objects and draft.objects:
        yield from ((layout.object_path(draft.name, entry.sha256), entry.size) for entry in draft.files)


def file_part_paths(manifest: Manifest) -> dict[str, int]:
    """The store path and size of each part of ``manifest``'s file entries (none before format 6) and of its row
    index (format 7)."""
    if not isinstance(manifest.files, FileParts):
        return {}
    folder = layout.dataset_folder(manifest.name)
    rows = manifest.row_parts.parts if manifest.row_parts is not None else []
    return {f"{folder}/{part.path}": part.size for part in [*manifest.files.parts, *rows]}


def missing(store: Store, draft: Manifest) -> list[str]:
    """The store paths of what ``draft`` names that are not stored (or not at the size it says)."""
    wanted = dict(named_files(draft, objects=False))  # a few paths: the list, shards and parts
    present: dict[str, int] = {}
    for prefix in sorted({posixpath.dirname(path) for path in wanted}):
        present.update(store.list(prefix, recursive=False))
    gone = [path for path, size in wanted.items() if present.get(path) != size]
    if draft.objects:  # compared a folder of objects/ at a time: the objects may be many
        gone.extend(object_buckets.absent(store, draft.name, draft.files))
    return gone


def add_shards(store: Store, manifest: Manifest, shards: list[ShardEntry]) -> Manifest:
    """Record that committed version ``manifest`` is also stored as ``shards``; return it with them.

    The record is a file of its own, created once and bound to the manifest's bytes; the manifest itself is never
    written over. When another pack of the version recorded its shards first, those are the version's shards, and
    ``shards``, when cut otherwise (another pack folder), are removed: nothing can ever read them.
    """
    lock = _lock_held(store, manifest.name, "record the shards of")
    manifest_bytes = store.read(layout.manifest_path(manifest.name, manifest.version))
    folders = {layout.pack_folder_of(shard) for shard in shards}
    try:
        store.make_durable(layout.shard_path(manifest.name, shard) for shard in shards)
    except ObjectNotFoundError:
        # Removed (in part, so far) by another pack of these sizes that lost the race: so did this one.
        recorded = packed_meanwhile(store, manifest)
        if recorded is None:
            raise
        remove_lost_pack(store, recorded, folders)
        return recorded
    record = {
        "format": PACK_RECORD_FORMAT if any(shard.xxh3 or shard.blocks for shard in shards) else 1,
        "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
        "created": now_utc(),
        "datamount_version": package_version("datamount"),
        "shards": [dataclasses.asdict(shard) for shard in shards],
    }
    body = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    lock.check()
    try:
        store.create(layout.pack_record_path(manifest.name, manifest.version), body)
    except ObjectExistsError:
        recorded = read_manifest(store, manifest.name, manifest.version, packed=True)
        remove_lost_pack(store, recorded, folders)
        return recorded
    return manifest.with_shards(shards)


def packed_meanwhile(store: Store, manifest: Manifest) -> Manifest | None:
    """Version ``manifest`` with the shards another pack recorded since it was read; ``None`` when none did (what a
    pack that failed returns when it lost the race: ``pack.written_and_recorded``)."""
    recorded = read_manifest(store, manifest.name, manifest.version)
    return recorded if recorded.shards else None


def remove_lost_pack(store: Store, recorded: Manifest, folders: set[str]) -> None:
    """Remove the pack ``folders`` of a pack that lost the race to record ``recorded``'s shards (but the one they
    are in). Another pack of the same sizes may be writing there: it loses too (``pack.written_and_recorded``). A
    folder that cannot be removed is left for the next ``remove_unused`` (any removal of a version of the dataset),
    with a warning."""
    kept = {layout.pack_folder_of(shard) for shard in recorded.shards}
    for folder in sorted(folders - kept):
        path = f"{layout.dataset_folder(recorded.name)}/{folder}"
        try:
            store.remove(path, recursive=True, missing_ok=True)
        except DatamountError as exc:
            log.warning("%s was packed by another pack first; this pack's shards stay in %s (%s)",
                        recorded.ref, store.url_for(path), exc)  # fmt: skip


def _pack_record(store: Store, manifest: Manifest, manifest_sha256: str, data: bytes | None = None) -> list[ShardEntry]:
    """The shards the pack record of ``manifest``'s version lists (its bytes ``data`` when they were read already);
    none when there is no record, or one left by a version of that number that was removed."""
    path = layout.pack_record_path(manifest.name, manifest.version)
    data = _read_if_there(store, path) if data is None else data
    if data is None:
        return []
    try:
        record = json.loads(data)
        if record.get("format", 0) > PACK_RECORD_FORMAT:
            raise ManifestError(f"{store.url_for(path)} was written by a newer datamount; upgrade datamount")
        if record["manifest_sha256"] != manifest_sha256:
            return []
        return [ShardEntry(**shard) for shard in record["shards"]]
    except ManifestError:
        raise
    except (ValueError, KeyError, TypeError) as exc:
        raise ManifestError(f"{store.url_for(path)} is damaged: {exc}") from exc


# --------------------------------------------------------------------------------------------------- listing


def dataset_names(store: Store) -> list[str]:
    """Every dataset with a versions folder in the store: user datasets and namespaced ones (``team`` and
    ``team/x`` both, when both exist), then public ones; a name whose every version was removed too (its folder
    keeps its numbers taken: :func:`summaries` leaves it out)."""
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
    """A summary of each dataset of the store (not of a name whose every version was removed)."""
    for name in dataset_names(store):
        folder = versions_folder(store, name)
        found = folder.committed
        if not found and folder.removed and not folder.manifests:
            continue
        newest = None
        if found:
            try:
                newest = read_manifest(store, name, found[-1], packed=found[-1] in folder.packed)
            except ManifestError:
                newest = None
        yield DatasetSummary(name, found, newest)


# --------------------------------------------------------------------------------------------------- removal


def remove(store: Store, ref: str, *, wait: float = locks.WAIT_SECONDS) -> list[int]:
    """Remove a version (``name@N``) or every version (``name``); return the versions removed.

    Under the dataset's exclusive lock (waiting up to ``wait`` seconds for the writers at work to finish, then a
    :class:`DatasetBusyError` naming them), each version is marked removed first (readers and writers no longer
    see it; the mark records its manifest's sha256, and its number is never given again), then its manifest and
    pack record go, then every list, pack folder and object that no remaining version uses. Removing every version
    removes all of the name's data but the marks: its next upload continues its numbering.
    """
    parsed = parse_ref(ref)
    _doomed(store, parsed)  # nothing there: said before any lock is taken (and its folder made)
    with locks.removing(store, parsed.name, wait=wait):
        doomed = _doomed(store, parsed)
        for version in doomed:
            document = _read_if_there(store, layout.manifest_path(parsed.name, version)) or b""
            with contextlib.suppress(ObjectExistsError):  # another removal marked it first
                mark = _removal_mark(hashlib.sha256(document).hexdigest() if document else "")
                store.create(layout.removed_path(parsed.name, version), mark)
        store.remove_many(
            path
            for version in doomed
            for path in (layout.manifest_path(parsed.name, version), layout.pack_record_path(parsed.name, version))
        )
        folder = versions_folder(store, parsed.name)
        kept = [read_manifest(store, parsed.name, v, packed=v in folder.packed) for v in folder.committed]
        if kept:
            remove_unused(store, parsed.name, kept)
        else:
            remove_folder(store, parsed.name)
    return doomed


def _doomed(store: Store, parsed: DatasetRef) -> list[int]:
    """The versions that removing ``parsed`` removes (:class:`DatasetNotFoundError` when there are none)."""
    folder = versions_folder(store, parsed.name)
    found = folder.committed
    if not found and folder.removed:
        raise DatasetNotFoundError(
            f"every version of {parsed.name} in {store.url} was removed already ({_numbers(folder.removed)})"
        )
    if not found:
        raise no_dataset(store, parsed.name)
    if parsed.version is not None and parsed.version not in found:
        why = _no_version(store, parsed.name, parsed.version, folder)
        raise DatasetNotFoundError(f"{why}; versions: {_numbers(found)}")
    return found if parsed.version is None else [parsed.version]


def removed_while_read(store: Store, manifest: Manifest, missing: ObjectNotFoundError) -> Exception:
    """What to raise when part of version ``manifest`` (an object, a shard, its list) is not found while it is read:
    a :class:`DatasetNotFoundError` saying so if the version has been removed since it was opened, else
    ``missing`` as it is."""
    try:
        still_there = store.exists(layout.manifest_path(manifest.name, manifest.version))
    except DatamountError:
        return missing
    if still_there:
        return missing
    return DatasetNotFoundError(
        f"{manifest.ref} was removed from {store.url} while it was being read ({missing}); what is there now is "
        "read by opening it again (a new reader, a new mount)"
    )


def remove_folder(store: Store, name: str) -> None:
    """Remove every part of dataset ``name`` but its versions' removal marks, which keep its numbers taken (under
    its exclusive lock; the lock files stay for their holders)."""
    _lock_held(store, name, "remove the folder of", locks.EXCLUSIVE)
    folder = layout.dataset_folder(name)
    for area in (layout.OBJECTS, layout.LISTS, layout.PACKS, layout.ENTRIES):
        store.remove(f"{folder}/{area}", recursive=True, missing_ok=True)
    marks = {layout.removed_path(name, number) for number in versions_folder(store, name).removed}
    store.remove_many(path for path in store.list(f"{folder}/{layout.VERSIONS}") if path not in marks)


def remove_unused_parts(store: Store, name: str) -> bool:
    """Remove every part of dataset ``name`` that none of its versions uses (what killed or losing writers left;
    everything, when it has no version), if no writer is at work: else leave it for the next removal. Return
    whether it was done."""
    try:
        with locks.removing(store, name, purpose="tidy", wait=0):
            folder = versions_folder(store, name)
            kept = [read_manifest(store, name, v, packed=v in folder.packed) for v in folder.committed]
            if kept:
                remove_unused(store, name, kept)
            else:
                remove_folder(store, name)
    except DatasetBusyError:
        return False
    except DatamountError as exc:  # it only frees space: the work it follows is done
        log.warning("could not remove the unused parts of %s from %s: %s", name, store.url, exc)
        return False
    return True


def remove_unused(store: Store, name: str, kept: list[Manifest]) -> None:
    """Remove the lists, pack folders, objects and pack records of dataset ``name`` that none of ``kept`` uses
    (under its exclusive lock: then ``kept`` are all the versions there are, and no writer is at work)."""
    _lock_held(store, name, "remove unused parts of", locks.EXCLUSIVE)
    folder = layout.dataset_folder(name)
    used_packs = {f"{folder}/{layout.pack_folder_of(shard)}" for m in kept for shard in m.shards}
    for pack in store.list_folders(f"{folder}/{layout.PACKS}"):
        if pack not in used_packs:
            store.remove(pack, recursive=True, missing_ok=True)
    used = {layout.list_path(m) for m in kept if m.has_list}
    used.update(layout.pack_record_path(name, m.version) for m in kept)
    used.update(path for m in kept for path in file_part_paths(m))
    stored = [path for area in (layout.LISTS, layout.ENTRIES) for path in store.list(f"{folder}/{area}")]
    records = {layout.pack_record_path(name, n) for n in versions_folder(store, name).packed}
    store.remove_many([*(path for path in stored if path not in used), *sorted(records - used)])
    # The objects kept versions name may be many: compared a folder of objects/ at a time, never held at once.
    named = (entry for m in kept if m.objects for entry in m.files)
    for unused in object_buckets.unused(store, name, named):
        store.remove_many(unused)
