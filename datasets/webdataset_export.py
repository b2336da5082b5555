"""``export --format webdataset``: a version as WebDataset tar shards, so that leaving datamount is one command.

The rule: one sample per row, in row order, each row's values as ``reader()`` yields them, checked as it checks
them. A sample's key is its row number, zero-padded to the width of the last one (at least six digits:
``000042``); its files are named after the version's columns (``docs/datasets.md`` has the table):

- an image version's file column: ``KEY.EXT``, the bytes as uploaded, ``EXT`` the list path's own extension in lower
  case (``bin`` when it has none), so that WebDataset's decoders know an image by it;
- a string column: ``KEY.COLUMN.txt`` (UTF-8), a binary one ``KEY.COLUMN.bin``, any other ``KEY.COLUMN.json``; a
  null value writes no file.

A shard is closed before the sample that would take it past ``shard_bytes`` (a sample larger than that gets a shard
of its own) or ``shard_samples``; shards are ``NAME-000000.tar``, ``NAME-000001.tar``... (``NAME`` the dataset's
name, ``/`` as ``-``). Their members are plain files with fixed owner, mode and time (the version's creation), so
that an export run again writes the same bytes.

Into a local folder the shards appear whole or not at all (:func:`~datamount.storage.staging.staged_folder`, as
``export`` writes files). At a store's URL (``s3://bucket/prefix``...) each shard is written to a local temporary
file and sent whole; a marker (:data:`MARKER`) says an export is under way and names what it writes, and is removed
last: a failure removes what this run sent; a target that holds anything else than an unfinished export of the same
version with the same settings (which is written again, the same bytes) is refused.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import posixpath
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import version as package_version
from pathlib import Path
from typing import IO, Any

from datamount.datasets import catalog
from datamount.datasets.manifest import Kind, Manifest
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.rows import ListRows, closing, open_rows
from datamount.storage import Store, open_store
from datamount.storage.staging import staged_folder

#: Shards close before this many bytes of samples (WebDataset's own writer allows 3 GB; a 1 GB shard is a few
#: seconds of a reader's time at cloud rates).
DEFAULT_SHARD_BYTES = 1 << 30
#: The file at a URL target while an export is under way: what it writes (see the module's rule).
MARKER = ".datamount-webdataset-export"
#: A member's header and its padding at most: what a sample's file adds to its shard beyond its bytes.
_MEMBER_BYTES = 2 * tarfile.BLOCKSIZE


@dataclass(frozen=True)
class WebDatasetExport:
    """What ``export --format webdataset`` wrote: the version, its shards' names (in order), samples and bytes."""

    manifest: Manifest
    target: str
    shards: list[str]
    samples: int
    size: int

    @property
    def pattern(self) -> str:
        """The shards as WebDataset's brace pattern names them: ``TARGET/NAME-{000000..000012}.tar``."""
        if not self.shards:
            return self.target
        first, last = self.shards[0], self.shards[-1]
        stem = first[: -len("000000.tar")]
        numbers = first[len(stem) : -4] if first == last else f"{{{first[len(stem) : -4]}..{last[len(stem) : -4]}}}"
        return posixpath.join(self.target, f"{stem}{numbers}.tar")


def export_webdataset(
    ref: str,
    target: str | os.PathLike[str] | Store,
    *,
    store: Store | str | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    shard_samples: int | None = None,
    progress: Progress | None = None,
) -> WebDatasetExport:
    """Write version ``ref`` (``name`` or ``name@N``) as WebDataset tar shards into ``target``: a local folder,
    which must not exist or be empty, or a store (its URL, or a :class:`~datamount.storage.Store` opened with its
    options) whose root takes the shards (module docstring). Every value is checked as ``reader()`` checks it; a
    damaged part is its error, and nothing is left of this export."""
    if shard_bytes < 1 or (shard_samples is not None and shard_samples < 1):
        raise ValueError("a shard's size and sample count must be positive")
    source = open_store(store)
    manifest = catalog.resolve(source, ref)
    report = progress or Silent()
    key = f"{manifest.manifest_sha256} {manifest.ref} {shard_bytes} {shard_samples} {package_version('datamount')}"
    cut = _Cut(shard_bytes, shard_samples)
    given = target.url if isinstance(target, Store) else os.fspath(target)
    if isinstance(target, Store) or "://" in given:
        with _store_target(target if isinstance(target, Store) else open_store(given), key) as put:
            shards, samples, size = _write(source, manifest, cut, put, report)
    else:
        with staged_folder(given, command="export", key=key) as stage:
            shards, samples, size = _write(source, manifest, cut, _folder_target(stage), report)
    return WebDatasetExport(manifest, given.rstrip("/") or given, shards, samples, size)


@dataclass(frozen=True)
class _Cut:
    shard_bytes: int
    shard_samples: int | None

    def full(self, held: int, samples: int, adding: int) -> bool:
        """Whether a shard holding ``samples`` samples of ``held`` bytes closes before one of ``adding`` bytes."""
        if samples == 0:
            return False
        return held + adding > self.shard_bytes or (self.shard_samples is not None and samples >= self.shard_samples)


#: Where a shard goes: called with its name, gives a binary file to write it to, and sends it when the block ends
#: (nothing is sent when the block raises).
_Put = Callable[[str], AbstractContextManager[IO[bytes]]]


def _write(store: Store, manifest: Manifest, cut: _Cut, put: _Put, report: Progress) -> tuple[list[str], int, int]:
    """Every row's sample into shards given by ``put``: their names, the samples and the bytes of the shards."""
    stem = manifest.name.replace("/", "-")
    mtime = _created(manifest)
    width = max(6, len(str(max(manifest.rows - 1, 0))))
    shards: list[str] = []
    samples = total = 0
    report.start("export", items=manifest.rows, size=manifest.files_size)
    rows = _samples(store, manifest)
    pending = next(rows, None)
    while pending is not None:
        name = f"{stem}-{len(shards):06d}.tar"
        with put(name) as file, tarfile.open(fileobj=file, mode="w", format=tarfile.PAX_FORMAT) as shard:
            count = held = 0
            while pending is not None:
                adding = _bytes_in_tar(pending)
                if cut.full(held, count, adding):
                    break
                key = f"{samples:0{width}d}"
                for suffix, data in pending:
                    shard.addfile(_member(f"{key}.{suffix}", len(data), mtime), io.BytesIO(data))
                report.advance(size=sum(len(data) for _, data in pending))
                count, held, samples = count + 1, held + adding, samples + 1
                pending = next(rows, None)
            total += held
        shards.append(name)
    report.finish()
    return shards, samples, total


def _bytes_in_tar(members: list[tuple[str, bytes]]) -> int:
    """What a sample adds to its shard: each file's bytes, header and padding."""
    return sum(_MEMBER_BYTES + len(data) for _, data in members)


def _samples(store: Store, manifest: Manifest) -> Iterator[list[tuple[str, bytes]]]:
    """Each row's files, in row order: ``(suffix, bytes)`` (see the module's rule)."""
    rows = open_rows(store, manifest).rows(0, manifest.rows)
    names = [_column_suffix(name) for name in manifest.columns]
    image = manifest.kind is Kind.IMAGE and manifest.has_list
    paths = (line[0] for line in ListRows(store, manifest).rows(0, manifest.rows)) if image else None
    with closing(rows):
        for row in rows:
            members = []
            for index, value in enumerate(row):
                if value is None:
                    continue
                if index == 0 and paths is not None:
                    members.append((_extension(next(paths)), bytes(value)))
                else:
                    members.append(_encoded(names[index], value))
            yield members


def _extension(path: str) -> str:
    suffix = posixpath.splitext(path)[1].lower().lstrip(".")
    return suffix if suffix and suffix.isalnum() else "bin"


def _column_suffix(name: str) -> str:
    """A column's name as a file name's part: WebDataset splits a sample's file names at their first dot."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name) or "column"


def _encoded(column: str, value: Any) -> tuple[str, bytes]:
    if isinstance(value, str):
        return f"{column}.txt", value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return f"{column}.bin", bytes(value)
    return f"{column}.json", json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")


def _member(name: str, size: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, mtime, 0o444
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _created(manifest: Manifest) -> int:
    """The version's creation, in whole seconds (a fraction would add a PAX header to every member)."""
    try:
        return int(datetime.fromisoformat(manifest.created).timestamp())
    except ValueError:
        return 0


def _folder_target(folder: Path) -> _Put:
    @contextlib.contextmanager
    def put(name: str) -> Iterator[IO[bytes]]:
        with open(folder / name, "wb") as file:
            yield file

    return put


@contextlib.contextmanager
def _store_target(target: Store, key: str) -> Iterator[_Put]:
    """Shards sent to ``target`` one by one under :data:`MARKER` (see the module's rule)."""
    held = target.list("", recursive=True) if target.root_exists else {}
    others = sorted(path for path in held if path != MARKER)
    if held and (MARKER not in held or target.read(MARKER).decode("utf-8", "replace") != key):
        shown = others[0] if others else MARKER
        raise FileExistsError(
            f"{target.url_for(shown)} is there already: a WebDataset export goes to an empty place (or one an "
            "export of the same version with the same settings left unfinished)"
        )
    target.write(MARKER, key.encode())
    sent: list[str] = []

    @contextlib.contextmanager
    def put(name: str) -> Iterator[IO[bytes]]:
        with tempfile.TemporaryDirectory(prefix="datamount-wds-") as folder:
            local = os.path.join(folder, name)
            with open(local, "wb") as file:
                yield file
            target.put_file(local, name)
            sent.append(name)

    try:
        yield put
    except BaseException:
        for name in sent:
            with contextlib.suppress(Exception):
                target.remove(name)
        with contextlib.suppress(Exception):
            target.remove(MARKER)
        raise
    target.remove(MARKER)
