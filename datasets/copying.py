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
import pickle
import posixpath
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO

from datamount.datasets import catalog, layout, locks, object_buckets
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
        with tempfile.TemporaryFile(prefix="datamount-copy-") as spool:
            missing = _spool_missing(destination, manifest, draft, spool)
            _send(origin, destination, manifest, missing, spool, progress or Silent())
        committed = catalog.commit(destination, draft)
        return CopyResult(committed, missing.parts, missing.size, missing.named - missing.parts, True)


@dataclass
class _Missing:
    """How many parts a version names (``named``), and how many of them (``parts``, of ``size`` bytes) the target
    lacks: those are spooled to disk in batches of :data:`BATCH_PARTS`."""

    named: int = 0
    parts: int = 0
    size: int = 0
    batches: int = 0


def _spool_missing(destination: Store, manifest: Manifest, draft: Manifest, spool: IO[bytes]) -> _Missing:
    """Write the parts of ``manifest`` that ``destination`` lacks to ``spool``, a batch at a time: a version's
    objects may be millions, so neither they nor the target's listing are held at once (the objects are compared a
    folder of ``objects/`` at a time, in that order)."""
    found = _Missing()
    batch: list[_Part] = []
    for part, stored in _compared(destination, manifest, draft):
        found.named += 1
        if stored:
            continue
        found.parts += 1
        found.size += part.size
        batch.append(part)
        if len(batch) == BATCH_PARTS:
            pickle.dump(batch, spool, protocol=pickle.HIGHEST_PROTOCOL)
            found.batches += 1
            batch = []
    if batch:
        pickle.dump(batch, spool, protocol=pickle.HIGHEST_PROTOCOL)
        found.batches += 1
    spool.seek(0)
    return found


def _compared(destination: Store, manifest: Manifest, draft: Manifest) -> Iterator[tuple[_Part, bool]]:
    """Every part of ``manifest``'s version (where it is in the source and where ``draft`` names it), and whether
    ``destination`` holds it at its size."""
    others = list(_other_parts(manifest, draft))  # the list and the shards: a few
    there: dict[str, int] = {}
    for prefix in sorted({posixpath.dirname(part.target) for part in others}):
        there.update(destination.list(prefix, recursive=False))
    yield from ((part, there.get(part.target) == part.size) for part in others if not part.shard)
    if manifest.objects:
        for sha256, size, stored in object_buckets.compared(destination, manifest.name, manifest.files):
            path = layout.object_path(manifest.name, sha256)
            yield _Part(path, path, size, sha256), stored
    yield from ((part, there.get(part.target) == part.size) for part in others if part.shard)


def _send(
    origin: Store, destination: Store, manifest: Manifest, missing: _Missing, spool: IO[bytes], report: Progress
) -> None:
    """Copy the ``missing`` parts of ``manifest``'s version (batches in ``spool``) from ``origin`` to
    ``destination``, each checked as it is read."""
    report.start("copy", items=missing.parts, size=missing.size)
    with ThreadPoolExecutor(max_workers=destination.default_max_requests, thread_name_prefix="datamount-copy") as pool:
        for _ in range(missing.batches):
            batch: list[_Part] = pickle.load(spool)  # written by this process, just now
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


def _other_parts(manifest: Manifest, draft: Manifest) -> Iterator[_Part]:
    """The parts of ``manifest``'s version but its objects (its list, then its shards): where each is in the source
    and where ``draft`` names it."""
    if manifest.has_list:
        yield _Part(layout.list_path(manifest), layout.list_path(draft), manifest.list_size, manifest.list_sha256)
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
