"""``verify``: re-hash everything a version stores against its manifest; ``repair``: put back what is damaged."""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from datamount.datasets import layout, locks
from datamount.datasets.file_parts import FilePart, FileParts
from datamount.datasets.listfile import parse_list
from datamount.datasets.manifest import FileEntry, Kind, Manifest, ShardEntry
from datamount.datasets.pack import plan_pack, write_unit
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.rows import ShardRows, read_lines
from datamount.datasets.upload import hash_files, store_list
from datamount.storage import IntegrityError, ObjectNotFoundError, Store
from datamount.storage.errors import DatamountError

#: How a pack folder of ``pack`` names the sizes its shards were cut with and their codec: their bytes can be made
#: again.


@dataclass(frozen=True)
class Damage:
    """One stored part of a version that is missing or does not match the manifest."""

    path: str
    label: str
    reason: str
    #: What is damaged: the list, a file's object, a shard or a part of the files' entries (with its manifest entry).
    entry: FileEntry | ShardEntry | FilePart | None = None
    #: Whether the store lacks the part (else it holds bytes that do not match the manifest).
    missing: bool = False

    def __str__(self) -> str:
        return self.reason


@dataclass
class VerifyReport:
    """What ``verify`` found: each object checked, and the problems."""

    manifest: Manifest
    checked: int = 0
    damaged: list[Damage] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return [str(damage) for damage in self.damaged]

    @property
    def ok(self) -> bool:
        return not self.damaged


def verify(store: Store, manifest: Manifest, *, on_checked: Callable[[int], None] | None = None) -> VerifyReport:
    """Re-hash the list, every object and every shard of ``manifest``; report every missing one and every mismatch."""
    report = VerifyReport(manifest)
    folder = layout.dataset_folder(manifest.name)
    parts = manifest.files.parts if isinstance(manifest.files, FileParts) else []
    row_parts = manifest.row_parts.parts if manifest.row_parts is not None else []

    def objects() -> Iterator[Target]:
        # Read from the parts once they are checked: a damaged part is reported, not raised.
        if manifest.objects and not any(isinstance(damage.entry, FilePart) for damage in report.damaged):
            yield from (
                (layout.object_path(manifest.name, e.sha256), e.size, e.sha256, e.path, e) for e in manifest.files
            )

    targets: Iterable[Target] = itertools.chain(
        [(layout.list_path(manifest), manifest.list_size, manifest.list_sha256, "the list", None)]
        if manifest.has_list
        else [],
        ((f"{folder}/{part.path}", part.size, part.sha256, f"file entries {part.path}", part) for part in parts),
        ((f"{folder}/{part.path}", part.size, part.sha256, f"row index {part.path}", part) for part in row_parts),
        objects(),
        ((layout.shard_path(manifest.name, s), s.size, s.sha256, f"shard {s.path}", s) for s in manifest.shards),
    )
    for path, size, sha256, label, entry in targets:
        report.checked += 1
        damage = _damage(store, path, size, sha256, label, entry)
        if damage is not None:
            report.damaged.append(damage)
        if on_checked is not None:
            on_checked(size)
    return report


def _damage(
    store: Store, path: str, size: int, sha256: str, label: str, entry: FileEntry | ShardEntry | FilePart | None
) -> Damage | None:
    """What is wrong with the part at ``path`` (None when it matches ``size`` and ``sha256``): read and hashed
    alone, with no listing of the store, so that a version of any number of objects is checked in bounded memory
    (its size is asked for only when its content does not match)."""
    try:
        found = store.checksums(path)
    except ObjectNotFoundError:
        return Damage(path, label, f"missing: {label} ({store.url_for(path)})", entry, missing=True)
    if found[0] != sha256:
        stored = store.info(path).size
        if stored != size:
            return Damage(path, label, f"wrong size: {label}: {stored} bytes, manifest says {size}", entry)
        return Damage(path, label, f"wrong content: {label} ({store.url_for(path)}) does not match its sha256", entry)
    if isinstance(entry, FileEntry) and entry.xxh3 and found[1] != entry.xxh3:
        why = f"wrong checksum: {label}: the manifest's xxh3-64 {entry.xxh3} is not its content's {found[1]}"
        return Damage(path, label, why, entry)
    return None


#: What verify checks: a store path, its size and sha256, what to call it, and its manifest entry.
Target = tuple[str, int, str, str, FileEntry | ShardEntry | FilePart | None]


@dataclass
class RepairReport:
    """What ``repair`` found and did: the damage found first, what was put back, and what could not be."""

    found: VerifyReport
    repaired: list[Damage] = field(default_factory=list)
    unrepaired: list[tuple[Damage, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unrepaired


def repair(
    store: Store,
    manifest: Manifest,
    *,
    source: str | os.PathLike[str] | None = None,
    root: str | None = None,
    progress: Progress | None = None,
) -> RepairReport:
    """Verify ``manifest``'s version, then put back every damaged or missing part whose right bytes can be found.

    A file's object comes back from ``source`` (the ``.list`` it was uploaded from, its paths relative to ``root``
    or the list's folder) when the file there still has the sha256 the manifest records, else from the version's
    own shards; the list comes back from ``source``; a shard that ``pack`` made comes back by packing its rows again
    from the version's objects (the same bytes). Nothing is written that does not match the manifest's sha256.
    """
    report = progress or Silent()
    found = verify(store, manifest)
    result = RepairReport(found)
    if found.ok:
        return result
    sources = _source_files(manifest, source, root, report) if source is not None else {}
    with locks.writing(store, manifest.name, purpose="repair"):
        for damage in found.damaged:
            try:
                why_not = _put_back(store, manifest, damage, sources, source, root)
            except DatamountError as exc:
                why_not = str(exc)
            if why_not is None:
                result.repaired.append(damage)
            else:
                result.unrepaired.append((damage, why_not))
    return result


def _source_files(
    manifest: Manifest, source: str | os.PathLike[str], root: str | None, report: Progress
) -> dict[str, str]:
    """The local file of every sha256 the source list's files have (hashed now)."""
    with parse_list(source, kind=manifest.kind, root=root) as parsed:
        return {entry.sha256: parsed.local_path(entry.path) for entry in hash_files(parsed, report)}


def _put_back(
    store: Store,
    manifest: Manifest,
    damage: Damage,
    sources: dict[str, str],
    source: str | os.PathLike[str] | None,
    root: str | None,
) -> str | None:
    """Put ``damage`` back; None when done, else why it could not be."""
    if isinstance(damage.entry, FileEntry):
        return _put_back_object(store, manifest, damage.entry, sources)
    if isinstance(damage.entry, ShardEntry):
        return _put_back_shard(store, manifest, damage.entry)
    if isinstance(damage.entry, FilePart):
        return f"{damage.label} holds the only copy of those entries: copy the version from another store"
    if source is None:
        return "the list can come back only from the .list it was uploaded from (--from LIST)"
    with parse_list(source, kind=manifest.kind, root=root) as parsed:
        if parsed.list_sha256 != manifest.list_sha256:
            return f"{os.fspath(source)} is not the list this version was uploaded from (its rows differ)"
        store_list(store, damage.path, parsed)
    return None


def _put_back_object(store: Store, manifest: Manifest, entry: FileEntry, sources: dict[str, str]) -> str | None:
    path = layout.object_path(manifest.name, entry.sha256)
    if entry.sha256 in sources:
        # Checked against the sha256 (not the xxh3-64) in the read that sends it: the file may have changed since
        # it was hashed, and what the manifest names an object by is its sha256.
        store.put_many([(sources[entry.sha256], path, entry.sha256)])
        return None
    data = _from_shards(store, manifest, entry)
    if data is not None:
        store.write(path, data)
        return None
    where = "no file of the source list has its sha256" if sources else "give the list it was uploaded from (--from)"
    return f"{entry.path}: {where}" + ("" if manifest.shards else "; the version is not packed, so no shard holds it")


def _from_shards(store: Store, manifest: Manifest, entry: FileEntry) -> bytes | None:
    """The bytes of ``entry``'s file from the version's shards, if a shard holds them intact."""
    if not manifest.shards or manifest.kind is not Kind.IMAGE:
        return None
    if not manifest.has_list or not store.exists(layout.list_path(manifest)):
        return None
    rows = ShardRows(store, manifest)
    try:
        lines = read_lines(store, manifest)
    except IntegrityError:
        return None  # a damaged list says nothing of where a file's row is
    for index, line in enumerate(lines):
        if line[0] == entry.path:
            data = rows.row(index)[0]
            return data if hashlib.sha256(data).hexdigest() == entry.sha256 else None
    return None


def _put_back_shard(store: Store, manifest: Manifest, shard: ShardEntry) -> str | None:
    settings = layout.pack_settings(layout.pack_folder_of(shard))
    if not manifest.objects:
        return f"shard {shard.path} holds files stored nowhere else: upload the list again (a new version)"
    if settings is None or not manifest.has_list:
        return f"shard {shard.path} was written by an import or an install, not by pack: nothing can make it again"
    unbuilt = manifest.with_shards([])
    units = plan_pack(
        store,
        unbuilt,
        settings.shard_bytes,
        settings.row_group_bytes,
        settings.first_group_bytes,
        settings.compression,
    )
    unit = next((unit for unit in units if layout.shard_key(unit.folder, unit.number) == shard.path), None)
    if unit is None:
        return f"shard {shard.path} is not one this version's pack makes"
    write_unit(store, unbuilt, unit, sha256=shard.sha256)  # compared before it is sent: an IntegrityError if not
    return None
