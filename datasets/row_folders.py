"""The files a version without a list shows (a public dataset: its rows only in Parquet shards), for every front end
that shows a version as files: ``export`` and ``datamount mount`` build it here, and nowhere else.

Such a version's manifest names no file per row, so its rows are shown in the form its dataset suggests: a path
template and an encoding (:class:`RowFiles`), which its public dataset declares (:attr:`PublicDataset.row_files`):

==========  ==================================  =============================================================
dataset     template                            each file holds
==========  ==================================  =============================================================
mnist       ``{split}/{label}/{number}.png``    the row's 784 pixels as a 28x28 grey PNG, the IDX values as is
imdb        ``{split}/{label}/{number}.txt``    the review exactly as stored (UTF-8)
imagenet    ``{split}/{label}/{name}``          the JPEG's exact bytes, under its name in the published files
wmt14       ``{split}/{split}``                 the split's pairs, ``source<TAB>target`` a line (the archive's)
==========  ==================================  =============================================================

``{split}`` is the split that holds the row; ``{number}`` the row's number in its split (its place in
``reader(name, split=...)``), zero-padded to the width of the split's last; ``{label}`` the row's second value;
``{name}`` the file name of the row's source (the shards' ``path`` column). A version of no splits leaves the
``{split}`` folder out. Rows given the same path make one file, their bytes in row order (they must be
consecutive). The files kept with the version (the manifest's ``files``: a dictionary, a class table) are shown
beside them, at their names.

The manifest has no sizes for these files: :func:`plan_row_files` reads the rows once, through the version's row
source (each page checked against its CRC, each row group's row count against the manifest), and gives each file's
size and xxh3-64, against which every later read of the file is checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import xxhash

from datamount.datasets.errors import DatasetNotFoundError, ManifestError
from datamount.datasets.manifest import SPLITS_KEY, Kind, Manifest
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.rows import Row, ShardRows, closing, split_bounds
from datamount.datasets.shard_writer import PATH_COLUMN
from datamount.storage import Store, UnsafePathError
from datamount.storage.cache import ContentCache


def first_value(row: Row) -> bytes:
    """A row's first value as a file: an image's bytes as they are, a text as UTF-8."""
    value = row[0]
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def tab_line(row: Row) -> bytes:
    """A row as a line of a list: its values joined by TABs, then a newline (UTF-8)."""
    return ("\t".join(map(str, row)) + "\n").encode("utf-8")


@dataclass(frozen=True)
class RowFiles:
    """How the rows of a version without a list are shown as files: each row's path (``path``, a template of
    ``{split}``, ``{label}``, ``{number}`` and ``{name}``: see the module) and its bytes (``encode``, given the row's
    values)."""

    path: str
    encode: Callable[[Row], bytes] = first_value

    @property
    def uses_source(self) -> bool:
        """Whether the paths need each row's source path (``{name}``)."""
        return "{name}" in self.path


class RowFile(NamedTuple):
    """A file made of rows ``start`` to ``stop - 1``: its path, size and xxh3-64 (as its rows were read)."""

    path: str
    start: int
    stop: int
    size: int
    xxh3: str


def shows_rows(manifest: Manifest) -> bool:
    """Whether ``manifest``'s version is shown by its rows (an image or text version without a list)."""
    return manifest.kind is not Kind.TABLE and not manifest.has_list


def row_files_of(manifest: Manifest) -> RowFiles:
    """The form of the version's public dataset, else the default: ``{split}/{label}/{number}`` holding an image's
    bytes, ``{split}/{number}.txt`` holding a text row as a list line."""
    # Imported here: the public datasets declare their forms with this module's types.
    from datamount.datasets import public
    from datamount.datasets.public.writer import PUBLIC_KEY

    name = manifest.extra.get(PUBLIC_KEY)
    if isinstance(name, str):
        try:
            declared = public.get(name).row_files
        except DatasetNotFoundError:  # a dataset this datamount does not know: the default form
            declared = None
        if declared is not None:
            return declared
    if manifest.kind is Kind.IMAGE:
        return RowFiles("{split}/{label}/{number}" if len(manifest.columns) > 1 else "{split}/{number}")
    return RowFiles("{split}/{number}.txt", tab_line)


def encoder_of(manifest: Manifest) -> Callable[[Row], bytes]:
    """How a row becomes its file's bytes: in its dataset's form for a version shown by its rows, else its first
    value (an image's bytes)."""
    return row_files_of(manifest).encode if shows_rows(manifest) else first_value


def split_ranges(manifest: Manifest) -> list[tuple[str, int, int]]:
    """``(split, start, stop)`` of each split in row order; ``("", 0, rows)`` for a version of no splits."""
    splits = manifest.extra.get(SPLITS_KEY) or {}
    if not splits:
        return [("", 0, manifest.rows)]
    ranges = sorted((*split_bounds(manifest, split)[:2], split) for split in splits)
    covered = 0
    for start, stop, split in ranges:
        if start != covered:
            raise ManifestError(f"{manifest.ref}: rows {covered} to {start - 1} are in no split (split {split!r})")
        covered = stop
    if covered != manifest.rows:
        raise ManifestError(f"{manifest.ref}: its splits hold {covered:,} rows of {manifest.rows:,}")
    return [(split, start, stop) for start, stop, split in ranges]


def row_file_contents(
    store: Store, manifest: Manifest, *, cache: ContentCache | None = None
) -> Iterator[tuple[RowFile, bytes]]:
    """Each file of the version's rows with its bytes, in row order (one file in memory at a time)."""
    path, start, chunks = "", 0, list[bytes]()
    seen: set[str] = set()
    row = 0
    for row, (placed, data) in enumerate(_placed_rows(store, manifest, cache)):
        if placed != path and chunks:
            yield _file(path, start, row, chunks)
            chunks = []
        if not chunks:
            if placed in seen:
                raise UnsafePathError(
                    f"{manifest.ref}: row {row} is shown at {placed!r}, as rows before it that do not come right "
                    "before it: two files at one path"
                )
            seen.add(placed)
            path, start = placed, row
        chunks.append(data)
    if chunks:
        yield _file(path, start, row + 1, chunks)


def plan_row_files(
    store: Store, manifest: Manifest, *, cache: ContentCache | None = None, progress: Progress | None = None
) -> list[RowFile]:
    """Every file of the version's rows, in row order: a pass over its rows (reported to ``progress`` as phase
    ``rows``, in rows)."""
    report = progress or Silent()
    report.start("rows", items=manifest.rows, size=0)
    files = []
    for file, _ in row_file_contents(store, manifest, cache=cache):
        files.append(file)
        report.advance(items=file.stop - file.start, size=file.size)
    report.finish()
    return files


def _file(path: str, start: int, stop: int, chunks: list[bytes]) -> tuple[RowFile, bytes]:
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return RowFile(path, start, stop, len(data), xxhash.xxh3_64_hexdigest(data)), data


def _placed_rows(store: Store, manifest: Manifest, cache: ContentCache | None) -> Iterator[tuple[str, bytes]]:
    """Each row's path and bytes, in row order."""
    form = row_files_of(manifest)
    width = len(manifest.columns)
    source = ShardRows(store, manifest, cache=cache, columns=[PATH_COLUMN] if form.uses_source else ())
    labels: set[str] = set()
    for split, start, stop in split_ranges(manifest):
        digits = len(str(max(stop - start - 1, 0)))
        with closing(source.rows(start, stop)) as rows:
            for number, row in enumerate(rows):
                values = row[:width]
                label = str(values[1]) if width > 1 else ""
                if label not in labels:
                    _check_part(label, manifest, start + number)
                    labels.add(label)
                name = ""
                if form.uses_source:
                    name = str(row[width]).rpartition("/")[2]
                    if not name:
                        raise UnsafePathError(f"{manifest.ref}, row {start + number}: its source names no file")
                    _check_part(name, manifest, start + number)
                path = form.path.format(split=split, label=label, number=f"{number:0{digits}d}", name=name)
                yield "/".join(part for part in path.split("/") if part), form.encode(values)


def _check_part(part: str, manifest: Manifest, row: int) -> None:
    """A label or a source file name must be one path component (none may leave the folder it is shown in)."""
    if part in (".", "..") or "/" in part or "\0" in part:
        raise UnsafePathError(f"{manifest.ref}, row {row}: {part!r} cannot name a file or folder")
