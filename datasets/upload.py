"""``upload``: check a ``.list`` file, send its files to a store, and commit a new dataset version."""

from __future__ import annotations

import collections
import dataclasses
import itertools
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from datamount.datasets import catalog, layout, locks
from datamount.datasets.listfile import ParsedList, parse_list
from datamount.datasets.manifest import (
    FILE_CHECKS_FORMAT_VERSION,
    SPLITS_KEY,
    FileEntry,
    Kind,
    Manifest,
    same_files,
)
from datamount.datasets.names import validate_name
from datamount.datasets.pack import pack
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.rows.split import row_splits
from datamount.datasets.shard_writer import DEFAULT_ROW_GROUP_BYTES, DEFAULT_SHARD_BYTES, check_sizes
from datamount.datasets.spool import FileSpool
from datamount.datasets.upload_shards import commit_packed
from datamount.storage import Store, arguments, open_store
from datamount.storage.checksums import file_digests

HASH_WORKERS = 4
#: Files hashed or waiting to be at once: the window that bounds the memory of hashing a list of any length.
HASH_AHEAD = 4 * HASH_WORKERS
#: Temporary files older than this were left by a writer that was killed: the next upload removes them.
STALE_TEMPORARY_SECONDS = 24 * 3600

R = TypeVar("R")


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
    #: Why the list was taken for its kind, when that was detected (``None``: the caller gave ``kind``).
    kind_reason: str | None = None


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

    The whole list is checked first (every problem reported, nothing written when there is one), as a stream: the
    memory an upload takes does not grow with the list's rows, which are kept on local disk (the normalised list,
    the files' entries) while it runs (:mod:`.listfile`); files are sent concurrently, a bounded window of them at
    once; the manifest is written last, so the version exists only once all of it is stored. Running the same
    upload again after a failure sends only what is missing; running it after success creates nothing (the latest
    version already holds exactly this list).

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
        ``"image"`` or ``"text"``; detected when not given (as :func:`.parse_list` does: a line that starts with an
        existing file's path followed by white space is refused unless ``kind`` is given), the result's
        ``kind_reason`` saying why.
    root
        The folder image paths are relative to (default: the list file's folder).
    progress
        Receives the ``check`` phase (the list read; then ``files``, an image list's files checked), then the
        ``upload`` phase, after a ``hash`` phase where the files are hashed before they are sent (on stores that
        cannot name an object after writing it, or when the latest version has the same list).
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
    if split:
        split_seed = arguments.whole_number(split_seed, "split_seed")
    report = progress or Silent()
    follow_links = arguments.boolean(follow_links, "follow_links")
    with parse_list(list_file, kind=kind, root=root, follow_links=follow_links, progress=report) as parsed:
        target = open_store(store)
        draft = Manifest(
            name=name,
            kind=parsed.kind,
            columns=parsed.columns(),
            rows=parsed.row_count,
            list_sha256=parsed.list_sha256,
            list_size=parsed.list_size,
            list_blocks=parsed.list_blocks,
            source=os.path.basename(os.fspath(list_file)),
        )
        if split:
            draft = dataclasses.replace(draft, extra={SPLITS_KEY: row_splits(split, split_seed, parsed.row_count)})
        with locks.writing(target, name, purpose="upload"):
            sizes = _Sizes(packed=packed, shard_bytes=shard_bytes, row_group_bytes=row_group_bytes)
            done = _upload(target, draft, parsed, report, max_requests, sizes)
        return dataclasses.replace(done, kind_reason=parsed.kind_reason)


@dataclass(frozen=True)
class _Sizes:
    """How an upload is stored: as objects, or packed into shards of these sizes."""

    packed: bool
    shard_bytes: int
    row_group_bytes: int


def _upload(
    target: Store, draft: Manifest, parsed: ParsedList, report: Progress, max_requests: int | None, sizes: _Sizes
) -> UploadResult:
    """Store the checked list ``parsed`` as ``draft`` (or find it stored already), holding the dataset's lock."""
    folder = layout.dataset_folder(draft.name)
    if not target.atomic_put:  # temporary files of writers killed long ago
        target.remove_stale_temporaries(folder, older_than=STALE_TEMPORARY_SECONDS)
    latest = catalog.latest(target, draft.name)
    # The files are hashed first only where that is needed: to tell whether a latest version of the same list
    # holds these very files, or where the store cannot name an object after writing it. Otherwise they are
    # hashed as they are read to be stored: into objects on stores that can (a file system), into shards with
    # --pack.
    same_list = latest is not None and latest.list_sha256 == draft.list_sha256
    direct = sizes.packed and parsed.kind is Kind.IMAGE
    hashed_first = same_list or not (direct or target.names_after_writing)
    if hashed_first:
        draft = _with_files(draft, hash_files(parsed, report))
    same_splits = latest is not None and latest.extra.get(SPLITS_KEY) == draft.extra.get(SPLITS_KEY)
    if latest is not None and same_list and same_files(latest.files, draft.files) and same_splits:
        if latest.objects:
            repaired = _send_missing(target, latest, parsed, report, max_requests)
            if sizes.packed:
                latest = pack(
                    latest.ref, store=target, shard_bytes=sizes.shard_bytes, row_group_bytes=sizes.row_group_bytes
                )
            return UploadResult(latest, repaired, 0, len(draft.files), created=False, repaired_files=repaired)
        if not catalog.missing(target, latest):
            return UploadResult(latest, 0, 0, len(draft.files), created=False)
        # Shards of it are lost: what is stored only in them comes back as a new version.
    if direct:
        return _upload_shards(target, draft, parsed, report, sizes.shard_bytes, sizes.row_group_bytes)

    present = target.list(f"{folder}/{layout.OBJECTS}")
    if hashed_first:
        sent = _send_hashed(target, draft, parsed, present, report, max_requests)
    else:
        sent, files = _store_by_content(target, draft, parsed, present, report, max_requests)
        draft = _with_files(draft, files)
    store_list(target, layout.list_path(draft), parsed)
    again = 0

    def send_again(gone: list[str]) -> None:  # what the store lost since it was sent, as the commit finds it
        nonlocal again
        again = _send_missing(target, draft, parsed, report, max_requests, absent=gone)

    manifest = _committed(target, catalog.commit(target, draft, restore=send_again))
    if sizes.packed:
        manifest = pack(
            manifest.ref, store=target, shard_bytes=sizes.shard_bytes, row_group_bytes=sizes.row_group_bytes
        )
    reused = _distinct_contents(parsed, draft.files) - sent.files_sent
    return UploadResult(manifest, sent.files_sent + again, sent.bytes_sent, reused, created=True)


def _with_files(draft: Manifest, files: FileSpool) -> Manifest:
    """``draft`` with ``files``, in the format their entries need (format 4 for entries with an xxh3-64: a spool is
    not read through to find out)."""
    needed = FILE_CHECKS_FORMAT_VERSION if files.any_xxh3 else draft.format_version
    return dataclasses.replace(draft, files=files, format_version=max(draft.format_version, needed))


def _committed(store: Store, manifest: Manifest) -> Manifest:
    """``manifest`` as its commit stored it: the draft's files were spooled in a temporary folder, gone once the
    upload returns."""
    return catalog.read_manifest(store, manifest.name, manifest.version, packed=False)


def store_list(store: Store, path: str, parsed: ParsedList) -> None:
    """Store the normalised list of ``parsed`` at ``path``, sent from its temporary copy and checked against its
    sha256 in the read that sends it."""
    store.put_many([(parsed.normalised_path, path, parsed.list_sha256)])


@dataclass(frozen=True)
class _Sent:
    """What storing a version's files sent."""

    files_sent: int
    bytes_sent: int


def _send_hashed(
    store: Store,
    draft: Manifest,
    parsed: ParsedList,
    present: Mapping[str, int],
    report: Progress,
    max_requests: int | None,
) -> _Sent:
    """Send the hashed files of ``draft`` that ``present`` (the objects listed) lacks."""
    missing = parsed.spool()
    missing.extend(
        _by_content(parsed, (e for e in draft.files if present.get(layout.object_path(draft.name, e.sha256)) != e.size))
    )
    return _Sent(len(missing), _send(store, draft.name, parsed, missing, report, max_requests))


def _store_by_content(
    store: Store,
    draft: Manifest,
    parsed: ParsedList,
    present: Mapping[str, int],
    report: Progress,
    max_requests: int | None,
) -> tuple[_Sent, FileSpool]:
    """Store the list's files as objects named by their content, each read once (hashed as it is stored), those
    ``present`` already (the objects listed) hashed but not written; their manifest entries (the ``upload`` phase),
    spooled in path order."""
    report.start("upload", items=len(parsed.files), size=parsed.files_bytes)
    entries = parsed.spool()
    written = parsed.spool()  # an object may be written twice when two files of one content are in flight at once
    stored = store.put_many_by_content(
        ((parsed.local_path(f.path), f.size) for f in parsed.files),
        lambda sha256: layout.object_path(draft.name, sha256),
        staging=f"{layout.dataset_folder(draft.name)}/{layout.OBJECTS}",
        present=present,
        max_requests=max_requests,
    )
    for source, done in zip(parsed.files, stored, strict=True):
        entry = FileEntry(source.path, done.size, done.sha256, done.xxh3)
        entries.append(entry)
        if done.written:
            written.append(entry)
        report.advance(size=done.size)
    report.finish()
    files_sent = bytes_sent = 0
    for entry in _by_content(parsed, written):
        files_sent, bytes_sent = files_sent + 1, bytes_sent + entry.size
    return _Sent(files_sent, bytes_sent), entries


def _upload_shards(
    store: Store,
    draft: Manifest,
    parsed: ParsedList,
    report: Progress,
    shard_bytes: int,
    row_group_bytes: int,
) -> UploadResult:
    """Commit ``draft`` with its files written straight into shards, hashed as they are read (no objects); the
    files in shards an earlier, killed run of this upload wrote count as already stored."""
    store_list(store, layout.list_path(draft), parsed)
    done = commit_packed(
        store, draft, parsed, shard_bytes=shard_bytes, row_group_bytes=row_group_bytes, progress=report
    )
    manifest = _committed(store, done.manifest)
    return UploadResult(manifest, done.sent_files, done.sent_bytes, done.resumed_files, created=True)


def _send_missing(
    store: Store,
    manifest: Manifest,
    parsed: ParsedList,
    report: Progress,
    max_requests: int | None,
    *,
    absent: Iterable[str] | None = None,
) -> int:
    """Send what ``manifest`` names that the store lacks (``absent``, its store paths: by default found from a
    listing); return how many files that was."""
    absent = set(catalog.missing(store, manifest) if absent is None else absent)
    if layout.list_path(manifest) in absent:
        store_list(store, layout.list_path(manifest), parsed)
    files = parsed.spool()
    files.extend(
        _by_content(parsed, (e for e in manifest.files if layout.object_path(manifest.name, e.sha256) in absent))
    )
    if files:
        _send(store, manifest.name, parsed, files, report, max_requests)
    return len(files)


def hash_files(parsed: ParsedList, report: Progress) -> FileSpool:
    """The manifest entries of a checked list's files, in path order, hashed by a few threads with a bounded
    number of files in flight (the ``hash`` phase); spooled beside the list's copy."""
    report.start("hash", items=len(parsed.files), size=parsed.files_bytes)
    entries = parsed.spool()
    with ThreadPoolExecutor(max_workers=HASH_WORKERS, thread_name_prefix="datamount-hash") as pool:
        digests = _in_order(pool, lambda f: file_digests(parsed.local_path(f.path)), parsed.files)
        for source, (sha256, fast) in digests:
            entries.append(FileEntry(source.path, source.size, sha256, fast))
            report.advance(size=source.size)
    report.finish()
    return entries


def _in_order(
    pool: ThreadPoolExecutor, work: Callable[[FileEntry], R], items: Iterable[FileEntry]
) -> Iterator[tuple[FileEntry, R]]:
    """``(item, work(item))`` in the order of ``items``, with at most :data:`HASH_AHEAD` of them in flight."""
    pending: collections.deque[tuple[FileEntry, Future[R]]] = collections.deque()
    try:
        for item in items:
            pending.append((item, pool.submit(work, item)))
            if len(pending) >= HASH_AHEAD:
                first, future = pending.popleft()
                yield first, future.result()
        while pending:
            first, future = pending.popleft()
            yield first, future.result()
    finally:
        for _, future in pending:
            future.cancel()


def _by_content(parsed: ParsedList, entries: Iterable[FileEntry]) -> Iterator[FileEntry]:
    """One of ``entries`` per content (the first by path), in sha256 order: sorted on disk."""
    order = parsed.external_sort()
    for entry in entries:
        order.add((entry.sha256, entry.path, entry.size, entry.xxh3))
    for _, same in itertools.groupby(order.sorted(), key=operator.itemgetter(0)):
        sha256, path, size, xxh3 = next(same)
        yield FileEntry(path, size, sha256, xxh3)


def _distinct_contents(parsed: ParsedList, entries: Iterable[FileEntry]) -> int:
    """How many contents ``entries`` hold."""
    return sum(1 for _ in _by_content(parsed, entries))


def _send(
    store: Store,
    name: str,
    parsed: ParsedList,
    entries: Sequence[FileEntry],
    report: Progress,
    max_requests: int | None,
) -> int:
    """Send the files of ``entries`` (one per content; each checked as it goes against what was hashed: its
    xxh3-64, or its sha256); return the bytes sent."""
    report.start("upload", items=len(entries), size=sum(e.size for e in entries))
    sent = store.put_many(
        ((parsed.local_path(e.path), layout.object_path(name, e.sha256), e.sha256, e.xxh3) for e in entries),
        max_requests=max_requests,
        on_done=lambda _, size: report.advance(size=size),
    )
    report.finish()
    return sent
