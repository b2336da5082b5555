"""``export``: a version back out as files, as ``dvc pull`` gives them: each image row's file at its list path and the
list itself; a text version's list; a table version's Parquet shards; the rows of a version without a list (a public
dataset) in its dataset's form (:mod:`~datamount.datasets.row_folders`), with the files kept with it. Every byte is
checked on the way out."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from datamount.datasets import catalog, layout
from datamount.datasets.manifest import Kind, Manifest
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.row_folders import row_file_contents, shows_rows
from datamount.datasets.rows import closing, open_rows, read_lines
from datamount.storage import IntegrityError, Store, UnsafePathError, open_store
from datamount.storage.checksums import matches


@dataclass(frozen=True)
class ExportResult:
    """What ``export`` wrote: the version, the list (if the version has one), and the files written or found
    already there with the same bytes."""

    manifest: Manifest
    list_file: Path | None
    written: int
    unchanged: int
    size: int


def export(
    ref: str, folder: str | os.PathLike[str], *, store: Store | str | None = None, progress: Progress | None = None
) -> ExportResult:
    """Write version ``ref`` (``name`` or ``name@N``) into ``folder`` as it was uploaded.

    An image version gives each row's file at its path in the list, byte for byte the file uploaded (each checked
    against its sha256 as it is read, packed or not), and the list under its original name; a text version its list;
    a table version its Parquet shards; a version without a list (a public dataset) its rows as files in its
    dataset's form, as ``datamount mount`` shows them, and the files kept with it. A file already in ``folder`` with
    the same bytes is left as it is (an interrupted export resumes); one with other bytes is an error naming it,
    never overwritten. Paths are checked: none can climb out of ``folder``.
    """
    target = open_store(store)
    manifest = catalog.resolve(target, ref)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    report = progress or Silent()
    counts = _Counts()
    if manifest.kind is Kind.TABLE:
        report.start("export", items=len(manifest.shards), size=sum(shard.size for shard in manifest.shards))
        for shard in manifest.shards:
            data = target.read(layout.shard_path(manifest.name, shard))
            if hashlib.sha256(data).hexdigest() != shard.sha256:
                raise IntegrityError(f"shard {shard.path} of {manifest.ref} does not match its manifest's sha256")
            counts.put(out, os.path.basename(shard.path), data)
            report.advance(size=len(data))
        report.finish()
        return ExportResult(manifest, None, counts.written, counts.unchanged, counts.size)
    if shows_rows(manifest):
        _export_row_files(target, manifest, out, counts, report)
        return ExportResult(manifest, None, counts.written, counts.unchanged, counts.size)
    listed = target.read(layout.list_path(manifest))
    if hashlib.sha256(listed).hexdigest() != manifest.list_sha256:
        raise IntegrityError(f"the list of {manifest.ref} does not match its manifest's sha256")
    if manifest.kind is Kind.IMAGE:
        _export_files(target, manifest, out, counts, report)
    listed_as = list_name(manifest)
    counts.put(out, listed_as, listed)
    return ExportResult(manifest, out / listed_as, counts.written, counts.unchanged, counts.size)


def _export_files(store: Store, manifest: Manifest, out: Path, counts: _Counts, report: Progress) -> None:
    """Each row's file at its list path: read in list order (from shards when packed), each checked against the
    sha256 its manifest records for that path."""
    lines = read_lines(store, manifest)
    digests = {entry.path: entry.sha256 for entry in manifest.files}
    report.start("export", items=len(lines), size=manifest.files_size)
    done: set[str] = set()
    rows = open_rows(store, manifest, verify=False).rows(0, len(lines))  # checked here, once, for every layout
    with closing(rows):
        for line, row in zip(lines, rows, strict=True):
            path, data = line[0], row[0]
            if hashlib.sha256(data).hexdigest() != digests.get(path):
                raise IntegrityError(f"{manifest.ref}: the bytes read for {path!r} do not match its manifest's sha256")
            if path not in done:  # a file named by several rows is written once
                counts.put(out, path, data)
                done.add(path)
            report.advance(size=len(data))
    report.finish()


def _export_row_files(store: Store, manifest: Manifest, out: Path, counts: _Counts, report: Progress) -> None:
    """The rows of a version without a list as files (their rows checked as any reader checks them: pages' CRCs,
    row counts), then the files kept with it, each checked against its checksum."""
    report.start("export", items=manifest.rows, size=0)
    for file, data in row_file_contents(store, manifest):
        counts.put(out, file.path, data)
        report.advance(items=file.stop - file.start, size=len(data))
    for entry in manifest.files:
        path = layout.object_path(manifest.name, entry.sha256)
        data = store.read(path)
        if len(data) != entry.size or not matches(data, entry.sha256, entry.xxh3):
            raise IntegrityError(f"{store.url_for(path)} ({entry.path} of {manifest.ref}) does not match its checksum")
        counts.put(out, entry.path, data)
    report.finish()


def list_name(manifest: Manifest) -> str:
    """The list's file name in an export or a mount: the uploaded list's own, else ``NAME.list``."""
    name = os.path.basename(manifest.source)
    return name if name and name not in (".", "..") else f"{manifest.name.replace('/', '-')}.list"


class _Counts:
    """Files written into the export folder, each checked to stay inside it; the same bytes already there are kept."""

    def __init__(self) -> None:
        self.written = self.unchanged = self.size = 0

    def put(self, out: Path, relative: str, data: bytes | memoryview) -> None:
        path = _inside(out, relative)
        if path.exists():
            if path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
                self.unchanged += 1
                return
            raise FileExistsError(f"{path} exists with other content; export into an empty folder, or remove it")
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.part")
        partial.write_bytes(data)
        os.replace(partial, path)
        self.written += 1
        self.size += len(data)


def _inside(out: Path, relative: str) -> Path:
    """``out/relative``, refused if ``relative`` is absolute or climbs out (a list written by a damaged store)."""
    normal = os.path.normpath(relative)
    if os.path.isabs(normal) or normal == ".." or normal.startswith(".." + os.sep) or normal in ("", "."):
        raise UnsafePathError(f"path {relative!r} would leave the export folder {out}")
    return out / normal
