"""``upload``: check a ``.list`` file, send its files to a store, and commit a new dataset version."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from datamount.datasets import catalog, layout, locks
from datamount.datasets.listfile import ParsedList, parse_list
from datamount.datasets.manifest import SPLITS_KEY, FileEntry, Kind, Manifest, same_files
from datamount.datasets.names import validate_name
from datamount.datasets.pack import pack
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.rows.split import row_splits
from datamount.datasets.shard_writer import DEFAULT_ROW_GROUP_BYTES, DEFAULT_SHARD_BYTES, check_sizes
from datamount.datasets.upload_shards import commit_packed
from datamount.storage import Store, arguments, open_store
from datamount.storage.checksums import file_digests

HASH_WORKERS = 4
#: Temporary files older than this were left by a writer that was killed: the next upload removes them.
STALE_TEMPORARY_SECONDS = 24 * 3600


@dataclass(frozen=True)
class UploadResult:
    """What an upload did: the committed manifest, and how much it had to send."""

    manifest: Manifest
    sent_files: int
    sent_bytes: int
    reused_files: int
    created: bool
    #: Files the version already needed that were missing from the store (lost, removed) and were sent again.
    repaired_files: int = 0


def upload(
    list_file: str | os.PathLike[str],
    name: str,
    *,
    store: Store | str | None = None,
    kind: Kind | str | None = None,
    root: str | None = None,
    progress: Progress | None = None,
    max_requests: int | None = None,
    packed: bool = False,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    follow_links: bool = False,
    split: Mapping[str, float] | None = None,
    split_seed: int = 0,
) -> UploadResult:
    """Upload the samples of ``list_file`` as a new version of dataset ``name``.

    The whole list is checked first (every problem reported, nothing written when there is one); files are sent
    concurrently; the manifest is written last, so the version exists only once all of it is stored. Running the
    same upload again after a failure sends only what is missing; running it after success creates nothing (the
    latest version already holds exactly this list).

    With ``packed``, the version is stored as Parquet shards: an image list's files go straight from the local disk
    into shards (:mod:`.upload_shards`; no object per file, ``Manifest.objects`` false), a text list is packed from
    its list.

    Parameters
    ----------
    list_file
        The ``.list`` file (``path<TAB>label`` rows for images, ``source<TAB>target`` for text).
    name
        The dataset name (``name`` or ``namespace/name``).
    store
        A Store, URL, path or profile name (default: the default store).
    kind
        ``"image"`` or ``"text"``; detected when not given.
    root
        The folder image paths are relative to (default: the list file's folder).
    progress
        Receives the ``upload`` phase, after a ``hash`` phase where the files are hashed before they are sent (on
        stores that cannot name an object after writing it, or when the latest version has the same list).
    max_requests
        Uploads in flight at most.
    packed, shard_bytes, row_group_bytes
        Store the version as shards of these sizes (as ``pack`` cuts them).
    follow_links
        Read image files through links that lead outside the root (refused by default).
    split, split_seed
        Splits of the rows, ``{name: fraction}`` (adding up to 1), each row put in one by a hash of its number and
        ``split_seed`` (:mod:`.rows.split`): recorded in the manifest, read with ``reader(name, split="train")``.
    """
    validate_name(name)
    if packed:
        check_sizes(shard_bytes, row_group_bytes)
    if max_requests is not None:
        max_requests = arguments.whole_number(max_requests, "max_requests", minimum=1)
    report = progress or Silent()
    parsed = parse_list(list_file, kind=kind, root=root, follow_links=arguments.boolean(follow_links, "follow_links"))
    target = open_store(store)
    with locks.writing(target, name, purpose="upload"):
        list_bytes = normalised_list(parsed)
        list_sha = hashlib.sha256(list_bytes).hexdigest()
        folder = layout.dataset_folder(name)
        if not target.atomic_put:  # temporary files of writers killed long ago
            target.remove_stale_temporaries(folder, older_than=STALE_TEMPORARY_SECONDS)
        draft = Manifest(
            name=name,
            kind=parsed.kind,
            columns=parsed.columns(),
            rows=len(parsed.rows),
            list_sha256=list_sha,
            list_size=len(list_bytes),
            source=os.path.basename(os.fspath(list_file)),
        )
        if split:
            seed = arguments.whole_number(split_seed, "split_seed")
            draft = dataclasses.replace(draft, extra={SPLITS_KEY: row_splits(split, seed, len(parsed.rows))})
        latest = catalog.latest(target, name)
        # The files are hashed first only where that is needed: to tell whether a latest version of the same list
        # holds these very files, or where the store cannot name an object after writing it. Otherwise they are
        # hashed as they are read to be stored: into objects on stores that can (a file system), into shards with
        # --pack.
        same_list = latest is not None and latest.list_sha256 == list_sha
        direct = packed and parsed.kind is Kind.IMAGE
        hashed_first = same_list or not (direct or target.names_after_writing)
        if hashed_first:
            draft = dataclasses.replace(draft, files=hash_files(parsed, report))
        same_splits = latest is not None and latest.extra.get(SPLITS_KEY) == draft.extra.get(SPLITS_KEY)
        if latest is not None and same_list and same_files(latest.files, draft.files) and same_splits:
            if latest.objects:
                repaired = _send_missing(target, latest, parsed, list_bytes, report, max_requests)
                if packed:
                    latest = pack(latest.ref, store=target, shard_bytes=shard_bytes, row_group_bytes=row_group_bytes)
                return UploadResult(latest, repaired, 0, len(draft.files), created=False, repaired_files=repaired)
            if not catalog.missing(target, latest):
                return UploadResult(latest, 0, 0, len(draft.files), created=False)
            # Shards of it are lost: what is stored only in them comes back as a new version.
        if direct:
            return _upload_shards(target, draft, parsed, list_bytes, report, shard_bytes, row_group_bytes)

        present = target.list(f"{folder}/{layout.OBJECTS}")
        if hashed_first:
            sent = _send_hashed(target, draft, parsed, present, report, max_requests)
        else:
            sent = _store_by_content(target, draft, parsed, present, report, max_requests)
            draft = dataclasses.replace(draft, files=sent.files)
        target.write(f"{folder}/{layout.list_key(list_sha)}", list_bytes)
        again = 0

        def send_again(gone: list[str]) -> None:  # what the store lost since it was sent, as the commit finds it
            nonlocal again
            again = _send_missing(target, draft, parsed, list_bytes, report, max_requests, absent=gone)

        manifest = catalog.commit(target, draft, restore=send_again)
        if packed:
            manifest = pack(manifest.ref, store=target, shard_bytes=shard_bytes, row_group_bytes=row_group_bytes)
        reused = len({e.sha256 for e in draft.files}) - sent.files_sent
        return UploadResult(manifest, sent.files_sent + again, sent.bytes_sent, reused, created=True)


@dataclass(frozen=True)
class _Sent:
    """What storing a version's files sent, and (when they were hashed as they were stored) their entries."""

    files_sent: int
    bytes_sent: int
    files: list[FileEntry] = dataclasses.field(default_factory=list)


def _send_hashed(
    store: Store,
    draft: Manifest,
    parsed: ParsedList,
    present: Mapping[str, int],
    report: Progress,
    max_requests: int | None,
) -> _Sent:
    """Send the hashed files of ``draft`` that ``present`` (the objects listed) lacks."""
    needed = {e.sha256: e for e in draft.files if present.get(layout.object_path(draft.name, e.sha256)) != e.size}
    missing = list(needed.values())
    return _Sent(len(missing), _send(store, draft.name, parsed, missing, report, max_requests))


def _store_by_content(
    store: Store,
    draft: Manifest,
    parsed: ParsedList,
    present: Mapping[str, int],
    report: Progress,
    max_requests: int | None,
) -> _Sent:
    """Store the list's files as objects named by their content, each read once (hashed as it is stored), those
    ``present`` already (the objects listed) hashed but not written; their manifest entries (the ``upload`` phase)."""
    files = sorted(parsed.files.values(), key=lambda f: f.relative_path)
    report.start("upload", items=len(files), size=sum(f.size for f in files))
    entries = []
    written: dict[str, int] = {}
    stored = store.put_many_by_content(
        ((f.local_path, f.size) for f in files),
        lambda sha256: layout.object_path(draft.name, sha256),
        staging=f"{layout.dataset_folder(draft.name)}/{layout.OBJECTS}",
        present=present,
        max_requests=max_requests,
    )
    for source, done in zip(files, stored, strict=True):
        entries.append(FileEntry(source.relative_path, done.size, done.sha256, done.xxh3))
        if done.written:
            written[done.sha256] = done.size
        report.advance(size=done.size)
    report.finish()
    return _Sent(len(written), sum(written.values()), entries)


def _upload_shards(
    store: Store,
    draft: Manifest,
    parsed: ParsedList,
    list_bytes: bytes,
    report: Progress,
    shard_bytes: int,
    row_group_bytes: int,
) -> UploadResult:
    """Commit ``draft`` with its files written straight into shards, hashed as they are read (no objects); the
    files in shards an earlier, killed run of this upload wrote count as already stored."""
    store.write(layout.list_path(draft), list_bytes)
    done = commit_packed(
        store, draft, parsed, shard_bytes=shard_bytes, row_group_bytes=row_group_bytes, progress=report
    )
    return UploadResult(done.manifest, done.sent_files, done.sent_bytes, done.resumed_files, created=True)


def _send_missing(
    store: Store,
    manifest: Manifest,
    parsed: ParsedList,
    list_bytes: bytes,
    report: Progress,
    max_requests: int | None,
    *,
    absent: Iterable[str] | None = None,
) -> int:
    """Send what ``manifest`` names that the store lacks (``absent``, its store paths: by default found from a
    listing); return how many files that was."""
    absent = set(catalog.missing(store, manifest) if absent is None else absent)
    if layout.list_path(manifest) in absent:
        store.write(layout.list_path(manifest), list_bytes)
    files = list(
        {e.sha256: e for e in manifest.files if layout.object_path(manifest.name, e.sha256) in absent}.values()
    )
    if files:
        _send(store, manifest.name, parsed, files, report, max_requests)
    return len(files)


def hash_files(parsed: ParsedList, report: Progress) -> list[FileEntry]:
    """The manifest entries of a checked list's files, hashed with a few threads (the ``hash`` phase)."""
    files = sorted(parsed.files.values(), key=lambda f: f.relative_path)
    report.start("hash", items=len(files), size=sum(f.size for f in files))
    entries = []
    with ThreadPoolExecutor(max_workers=HASH_WORKERS, thread_name_prefix="datamount-hash") as pool:
        for source, (sha256, fast) in zip(files, pool.map(lambda f: file_digests(f.local_path), files), strict=True):
            entries.append(FileEntry(source.relative_path, source.size, sha256, fast))
            report.advance(size=source.size)
    report.finish()
    return entries


def normalised_list(parsed: ParsedList) -> bytes:
    """The list as a version stores it: UTF-8, LF, TAB-separated, image paths normalised."""
    if parsed.kind is Kind.IMAGE:
        rows: Iterator[tuple[str, ...]] = ((os.path.normpath(r[0]), *r[1:]) for r in parsed.rows)
    else:
        rows = iter(parsed.rows)
    return "".join("\t".join(row) + "\n" for row in rows).encode("utf-8")


def _send(
    store: Store,
    name: str,
    parsed: ParsedList,
    entries: list[FileEntry],
    report: Progress,
    max_requests: int | None,
) -> int:
    """Send the files of ``entries`` (each checked as it goes against what was hashed: its xxh3-64, or its sha256);
    return the bytes sent."""
    report.start("upload", items=len(entries), size=sum(e.size for e in entries))
    files = {layout.object_path(name, e.sha256): (parsed.files[e.path].local_path, e) for e in entries}
    sent = store.put_many(
        ((local, key, entry.sha256, entry.xxh3) for key, (local, entry) in files.items()),  # same bytes: once
        max_requests=max_requests,
        on_done=lambda _, size: report.advance(size=size),
    )
    report.finish()
    return sent
