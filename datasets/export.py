"""``export``: a version back out as files, as ``dvc pull`` gives them: each image row's file at its list path and the
list itself; a text version's list; a table version's Parquet shards; the rows of a version without a list (a public
dataset) in its dataset's form (:mod:`~datamount.datasets.row_folders`), with the files kept with it. Every byte is
checked on the way out.

The folder appears whole or not at all (:func:`~datamount.storage.staging.staged_folder`): the files are written
into a hidden sibling, renamed into place once the last is written; a failure (a damaged part, Ctrl-C, SIGTERM)
removes the sibling, and its error names what puts the part back, as a reader's does. An export killed with SIGKILL
leaves its hidden sibling, which the next export of the same version into the same folder takes over, keeping the
files already written. A folder that holds anything is never written: an export into a folder that holds this
export already is done (run twice, it writes nothing), into any other it is refused.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from importlib.metadata import version as package_version
from pathlib import Path

from datamount.datasets import catalog, layout
from datamount.datasets.errors import DatasetNotFoundError
from datamount.datasets.manifest import FileEntry, Kind, Manifest
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.repairs import object_repair, shard_repair
from datamount.datasets.row_folders import row_file_contents, shows_rows
from datamount.datasets.rows import (
    closing,
    damaged_object,
    missing_list,
    object_location,
    open_rows,
    read_lines,
)
from datamount.storage import IntegrityError, ObjectNotFoundError, Store, UnsafePathError, open_store
from datamount.storage.checksums import checked_by, matches
from datamount.storage.staging import is_empty, staged_folder


@dataclass(frozen=True)
class ExportResult:
    """What ``export`` wrote: the version, the list (if the version has one), the files written and their bytes, and
    the files an export of the same version killed before had written with the right bytes (kept)."""

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
    dataset's form, as ``datamount mount`` shows them, and the files kept with it. Paths are checked: none can climb
    out of ``folder``.

    ``folder`` appears whole or not at all (module docstring): after a failure it is as it was. A folder that holds
    anything is never written: when it holds this export already (every file, with the same bytes) the export is
    done (``unchanged`` counts them), else it is a :class:`FileExistsError` naming the first file that differs.
    ``unchanged`` also counts the files an export of the same version killed before had written, and that are kept.
    """
    target = open_store(store)
    manifest = catalog.resolve(target, ref)
    report = progress or Silent()
    files: _Files
    if os.path.isdir(folder) and not is_empty(folder, command="export"):
        files = _Compared(Path(folder), manifest)
        listed_as = _export(target, manifest, files, report)
    else:
        with staged_folder(folder, command="export", key=_stage_key(manifest)) as stage:
            files = _Staged(stage)
            listed_as = _export(target, manifest, files, report)
    list_file = Path(folder) / listed_as if listed_as is not None else None
    return ExportResult(manifest, list_file, files.written, files.unchanged, files.size)


def _stage_key(manifest: Manifest) -> str:
    """What an export writes, for a sibling left by a killed export to be taken over only by one that writes the
    same: the version's manifest, and the rules of this release of datamount."""
    return f"{manifest.manifest_sha256} {manifest.ref} {package_version('datamount')}"


def _export(store: Store, manifest: Manifest, files: _Files, report: Progress) -> str | None:
    """Write ``manifest``'s version through ``files``; return the list's name, if it has one."""
    if manifest.kind is Kind.TABLE:
        report.start("export", items=len(manifest.shards), size=sum(shard.size for shard in manifest.shards))
        for shard in manifest.shards:
            path = layout.shard_path(manifest.name, shard)
            data = store.read(path)
            if hashlib.sha256(data).hexdigest() != shard.sha256:
                raise IntegrityError(
                    f"{manifest.ref}: the shard {store.url_for(path)} does not match its manifest's sha256: the store "
                    f"holds a damaged copy ({shard_repair(manifest)})"
                )
            files.put(os.path.basename(shard.path), data)
            report.advance(size=len(data))
        report.finish()
        return None
    if shows_rows(manifest):
        _export_row_files(store, manifest, files, report)
        return None
    path = layout.list_path(manifest)
    try:
        listed = store.read(path)
    except ObjectNotFoundError as missing:
        raise missing_list(store, manifest, missing) from missing
    if hashlib.sha256(listed).hexdigest() != manifest.list_sha256:
        raise IntegrityError(
            f"{manifest.ref}: its list {store.url_for(path)} does not match its manifest's sha256: the store holds a "
            f"damaged copy ({object_repair(manifest)})"
        )
    if manifest.kind is Kind.IMAGE:
        _export_files(store, manifest, files, report)
    listed_as = list_name(manifest)
    files.put(listed_as, listed)
    return listed_as


def _export_files(store: Store, manifest: Manifest, files: _Files, report: Progress) -> None:
    """Each row's file at its list path: read in list order (from shards when packed), each checked against the
    size and checksum its manifest records for that path (:func:`~datamount.storage.checksums.matches`: the xxh3-64,
    or the sha256 of an entry without one); a mismatch is the error a reader gives for that row."""
    lines = read_lines(store, manifest)
    entries = {entry.path: entry for entry in manifest.files}
    report.start("export", items=len(lines), size=manifest.files_size)
    rows = open_rows(store, manifest, verify=False).rows(0, len(lines))  # checked here, once, for every layout
    with closing(rows):
        for number, (line, row) in enumerate(zip(lines, rows, strict=True)):
            path, data = line[0], row[0]
            entry = entries.get(path)
            if entry is None or len(data) != entry.size or not matches(data, entry.sha256, entry.xxh3):
                raise _damaged_row(store, manifest, number, path, entry)
            files.put(path, data)
            report.advance(size=len(data))
    report.finish()


def _damaged_row(store: Store, manifest: Manifest, row: int, path: str, entry: FileEntry | None) -> Exception:
    """The error for row ``row``, whose bytes read for ``path`` do not match the checksum its manifest records: a
    damaged object as a reader names it, or a damaged shard."""
    if entry is None:
        return DatasetNotFoundError(f"{manifest.ref}: the manifest has no file for {path!r}")
    checksum = checked_by(entry.xxh3)
    if not manifest.shards:
        return damaged_object(store, manifest, row, object_location(manifest, entry), f"does not match its {checksum}")
    return IntegrityError(
        f"{manifest.ref}, row {row}: the bytes its shards hold for {path!r} do not match its manifest's {checksum}: "
        f"the store holds a damaged shard ({shard_repair(manifest)})"
    )


def _export_row_files(store: Store, manifest: Manifest, files: _Files, report: Progress) -> None:
    """The rows of a version without a list as files (their rows checked as any reader checks them: pages' CRCs,
    row counts), then the files kept with it, each checked against its checksum."""
    report.start("export", items=manifest.rows, size=0)
    for file, data in row_file_contents(store, manifest):
        files.put(file.path, data)
        report.advance(items=file.stop - file.start, size=len(data))
    for entry in manifest.files:
        path = layout.object_path(manifest.name, entry.sha256)
        data = store.read(path)
        if len(data) != entry.size or not matches(data, entry.sha256, entry.xxh3):
            raise IntegrityError(f"{store.url_for(path)} ({entry.path} of {manifest.ref}) does not match its checksum")
        files.put(entry.path, data)
    report.finish()


def list_name(manifest: Manifest) -> str:
    """The list's file name in an export or a mount: the uploaded list's own, else ``NAME.list``."""
    name = os.path.basename(manifest.source)
    return name if name and name not in (".", "..") else f"{manifest.name.replace('/', '-')}.list"


class _Files:
    """Where an export's files go (``folder``), each checked to stay inside it, and what was done with them. A path
    named twice (by two rows) must have the same bytes, and counts once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.written = self.unchanged = self.size = 0
        self._paths: set[str] = set()

    def put(self, relative: str, data: bytes | memoryview) -> None:
        path = _inside(self.folder, relative)
        key = os.path.normpath(relative)
        if key not in self._paths:
            self._paths.add(key)
            self._put(path, relative, data)
        elif path.read_bytes() != data:
            raise FileExistsError(f"{relative!r} is named twice with other bytes: it cannot be exported as one file")

    def _put(self, path: Path, relative: str, data: bytes | memoryview) -> None:
        raise NotImplementedError


class _Staged(_Files):
    """Files written into the folder being staged; one found there already (left by a killed export of the same
    version) is kept when its bytes are right, else written again."""

    def _put(self, path: Path, relative: str, data: bytes | memoryview) -> None:
        if _holds(path, data):
            self.unchanged += 1
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.written += 1
        self.size += len(data)


class _Compared(_Files):
    """Files compared with those of a folder that holds something, never written: the export is done if every one is
    there with the same bytes; the first that is not is a :class:`FileExistsError`."""

    def __init__(self, folder: Path, manifest: Manifest) -> None:
        super().__init__(folder)
        self.manifest = manifest

    def _put(self, path: Path, relative: str, data: bytes | memoryview) -> None:
        if not _holds(path, data):
            differs = "has other bytes" if path.exists() else "is missing"
            raise FileExistsError(
                f"{self.folder} is not empty, and is not an export of {self.manifest.ref}: its {relative} {differs}; "
                "export into a folder that does not exist yet or is empty (nothing was written)"
            )
        self.unchanged += 1


def _holds(path: Path, data: bytes | memoryview) -> bool:
    """Whether ``path`` is a file of the bytes ``data``."""
    return path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data


def _inside(out: Path, relative: str) -> Path:
    """``out/relative``, refused if ``relative`` is absolute or climbs out (a list written by a damaged store)."""
    normal = os.path.normpath(relative)
    if os.path.isabs(normal) or normal == ".." or normal.startswith(".." + os.sep) or normal in ("", "."):
        raise UnsafePathError(f"path {relative!r} would leave the export folder")
    return out / normal
