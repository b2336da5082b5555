"""``copy_version``: a committed version from one store to another (the local store to the team's S3, one cluster's
store to another's, the team's store to a local folder), as an upload would make it there: only the parts the target
lacks travel, each checked, and the version is committed last.

A copy that fails or is killed commits nothing: the version does not exist in the target, on any store, local or
not. The parts it sent stay in the target's dataset folder (named by their content, they are what the next copy
does not send again: it resumes), unused until a version names them; ``datamount rm`` of the dataset there removes
them. A damaged or missing part of the source is named with what puts it back, as a reader names it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from datamount.datasets import catalog, layout, locks
from datamount.datasets.errors import MissingPartError
from datamount.datasets.manifest import OBJECTS_FORMAT_VERSION, Manifest, same_files
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.repairs import object_repair, shard_repair
from datamount.storage import IntegrityError, ObjectNotFoundError, Store, open_store

#: Parts read, checked and written per batch (objects are small; a batch keeps every writer busy).
BATCH_PARTS = 64


@dataclass(frozen=True)
class CopyResult:
    """The version in the target store, the parts sent and their bytes, the parts it already had, and whether a new
    version was committed (not when the target's latest version already holds the same content)."""

    manifest: Manifest
    sent: int
    sent_bytes: int
    present: int
    created: bool


@dataclass(frozen=True)
class _Part:
    """One stored part of a version: where it is in the source and goes in the target, its size and sha256, and
    whether it is a shard (else an object or the list)."""

    source: str
    target: str
    size: int
    sha256: str
    shard: bool = False


def copy_version(
    ref: str,
    *,
    source: Store | str | None = None,
    target: Store | str,
    progress: Progress | None = None,
) -> CopyResult:
    """Copy version ``ref`` (``name`` or ``name@N``) of ``source`` (default: the default store) to ``target``.

    The version's list, objects and shards go to the same places in the target's dataset folder; a part the target
    already holds with the right size is not sent (objects are named by their sha256, so this is what an interrupted
    copy resumes from). Every part sent is checked against the sha256 in the manifest as it is read, and the
    manifest is committed last, through the same exclusive commit as an upload: the version exists in the target
    only once all of it is there. Copying again commits nothing when the target's latest version holds the same
    list, files and shards.
    """
    origin, destination = open_store(source), open_store(target)
    manifest = catalog.resolve(origin, ref, public_fallback=False)
    draft = dataclasses.replace(
        manifest,
        version=0,
        created="",
        datamount_version="",
        format_version=max(manifest.format_version, OBJECTS_FORMAT_VERSION),  # the list is named by its content
    )
    with locks.writing(destination, manifest.name, purpose="copy"):
        latest = catalog.latest(destination, manifest.name)
        if latest is not None and _same_content(latest, draft):
            return CopyResult(latest, 0, 0, 0, created=False)
        parts = list(_parts(manifest, draft))
        there = destination.list(layout.dataset_folder(manifest.name))
        missing = [part for part in parts if there.get(part.target) != part.size]
        _send(origin, destination, manifest, missing, progress or Silent())
        committed = catalog.commit(destination, draft)
        return CopyResult(committed, len(missing), sum(part.size for part in missing), len(parts) - len(missing), True)


def _send(origin: Store, destination: Store, manifest: Manifest, parts: list[_Part], report: Progress) -> None:
    """Copy ``parts`` of ``manifest``'s version from ``origin`` to ``destination``, each checked as it is read."""
    report.start("copy", items=len(parts), size=sum(part.size for part in parts))
    with ThreadPoolExecutor(max_workers=destination.default_max_requests, thread_name_prefix="datamount-copy") as pool:
        for start in range(0, len(parts), BATCH_PARTS):
            batch = parts[start : start + BATCH_PARTS]
            blobs = origin.read_many_hashed([part.source for part in batch], sizes=[part.size for part in batch])
            writes = []
            for part in batch:
                try:
                    data, digest = next(blobs)
                except ObjectNotFoundError as missing:
                    problem = "is missing from the store copied from"
                    message = _unusable(origin, destination, manifest, part, problem)
                    raise MissingPartError(message, missing) from missing
                if digest != part.sha256:
                    problem = "does not match its sha256: the store copied from holds a damaged copy"
                    raise IntegrityError(_unusable(origin, destination, manifest, part, problem))
                writes.append(pool.submit(destination.write, part.target, data))
            for part, write in zip(batch, writes, strict=True):
                write.result()
                report.advance(size=part.size)
    report.finish()


def _unusable(origin: Store, destination: Store, manifest: Manifest, part: _Part, problem: str) -> str:
    """Why a copy stopped at ``part`` of the source (``problem``), what puts it back, and what became of the copy."""
    repair = shard_repair(manifest) if part.shard else object_repair(manifest)
    return (
        f"{manifest.ref}: {origin.url_for(part.source)} {problem} ({repair}); nothing was committed to "
        f"{destination.url}: the parts sent stay there, and the next copy sends only the rest"
    )


def _parts(manifest: Manifest, draft: Manifest) -> Iterator[_Part]:
    """Every part of ``manifest``'s version: where it is in the source and where ``draft`` names it."""
    if manifest.has_list:
        yield _Part(layout.list_path(manifest), layout.list_path(draft), manifest.list_size, manifest.list_sha256)
    if manifest.objects:
        unique = {entry.sha256: entry for entry in manifest.files}.values()
        for entry in unique:
            path = layout.object_path(manifest.name, entry.sha256)
            yield _Part(path, path, entry.size, entry.sha256)
    for shard in manifest.shards:
        path = layout.shard_path(manifest.name, shard)
        yield _Part(path, path, shard.size, shard.sha256, shard=True)


def _same_content(committed: Manifest, draft: Manifest) -> bool:
    """Whether ``committed`` holds what ``draft`` would: the same list, files, shards and kind of storage."""
    return (
        committed.list_sha256 == draft.list_sha256
        and same_files(committed.files, draft.files)
        and [shard.sha256 for shard in committed.shards] == [shard.sha256 for shard in draft.shards]
        and committed.objects == draft.objects
        and committed.kind == draft.kind
    )
