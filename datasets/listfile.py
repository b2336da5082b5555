"""Reading and checking ``.list`` files: one sample per line, columns separated by one TAB.

Image lists name a file in their first column (relative to the list's folder, or to ``root``) and labels in the
others; text lists (e.g. translation pairs) hold text in every column. Every problem is found, with its line number,
before anything is written anywhere.

A kind that is not given is never guessed against the evidence, and the parsed list says which it is and why
(:attr:`ParsedList.kind_reason`): image as soon as one row's first column names an existing file or looks like a
file's path (and then every row must name one), text only when none does, and never for a line that starts with an
existing file's path followed by white space and more (an image list whose columns were joined by spaces, not TABs):
such lines are refused, each with its number, unless the caller says the list is text.

A list of any length is checked in memory that does not grow with its rows: it is read as a stream (twice when its
kind is detected: the detection stops at the first row that decides it), the normalised list is written to a
temporary file as it is read, and what must be compared across rows (an image list's paths, each named by one or
more rows) is sorted on disk (:class:`~datamount.datasets.spool.ExternalSort`): each distinct file is then checked
once, in path order, and the files' entries and each row's file size are spooled to disk for the upload. Problems
are sorted by line on disk too; an error spells out the first (:mod:`._list_problems`).
"""

from __future__ import annotations

import array
import codecs
import functools
import hashlib
import itertools
import operator
import os
import re
import shutil
import stat
import tempfile
import unicodedata
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import BinaryIO

from datamount.datasets._list_problems import ProblemLog
from datamount.datasets.errors import ListFormatError, ListProblem
from datamount.datasets.list_blocks import ListBlocks, ListBlocksWriter
from datamount.datasets.manifest import FileEntry, Kind
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.spool import BLOCK_RECORDS, ExternalSort, FileSpool
from datamount.storage.paths import LinkGuard

#: Bytes of the list read at once (whole lines of them decoded at once).
READ_BYTES = 4 << 20
#: Rows whose files are checked between two reports of progress.
PROGRESS_ROWS = 1 << 14


@dataclass(frozen=True)
class SourceFile:
    """A local file named by an image list: where it is, and its path relative to the list's root."""

    local_path: str
    relative_path: str
    size: int


@dataclass(eq=False)
class ParsedList:
    """A checked ``.list`` file, kept on local disk until :meth:`close` (it is a context manager).

    :attr:`row_count` rows of :attr:`width` columns; :meth:`rows` reads them again, normalised (image paths
    normalised, UTF-8, LF) from the temporary copy whose sha256 and size are :attr:`list_sha256` and
    :attr:`list_size`, the list as a version stores it. For an image list, :attr:`files` holds each distinct file
    once, sorted by path, as :class:`FileEntry` without digests (its ``size`` as checked), and :meth:`row_sizes` each
    row's file size in row order.
    """

    path: str
    kind: Kind
    width: int
    row_count: int
    root: str
    list_sha256: str
    list_size: int
    normalised_path: str
    files: FileSpool
    #: Bytes of :attr:`files`, all together.
    files_bytes: int
    _folder: str = field(repr=False)
    #: Each row's file size as ``(line, size)``, sorted into row order when first asked for.
    _sizes: ExternalSort | None = field(repr=False, default=None)
    _sizes_path: str = field(repr=False, default="")
    _spools: list[FileSpool] = field(repr=False, default_factory=list)
    #: Where each block of the normalised list's lines starts, and its xxh3-64.
    list_blocks: ListBlocks | None = None
    #: Why the list is of its :attr:`kind`, when that was detected (``None``: the caller gave it).
    kind_reason: str | None = None

    def __post_init__(self) -> None:
        # A list nobody closed still leaves nothing behind once it is collected.
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._folder, ignore_errors=True)

    def columns(self) -> list[str]:
        """Column names, in list order."""
        return column_names(self.kind, self.width)

    def rows(self) -> Iterator[tuple[str, ...]]:
        """The rows, normalised, read again from the temporary copy (each call a new pass)."""
        with open(self.normalised_path, "rb") as lines:
            for line in lines:
                yield tuple(line[:-1].decode().split("\t"))

    def row_sizes(self) -> Iterator[int]:
        """Each row's file size, in row order (image lists); sorted on disk the first time."""
        if self._sizes is not None:
            self._sizes_path = os.path.join(self._folder, "sizes")
            with open(self._sizes_path, "wb") as out:
                source = (size for _, size in self._sizes.sorted())
                while run := array.array("Q", itertools.islice(source, BLOCK_RECORDS)):
                    run.tofile(out)
            self._sizes = None
        with open(self._sizes_path, "rb") as sizes:
            while block := sizes.read(8 * BLOCK_RECORDS):
                yield from array.array("Q", block)

    def local_path(self, relative: str) -> str:
        """The local file of the list's path ``relative`` (as :attr:`files` and :meth:`rows` write it)."""
        return os.path.join(self.root, relative)

    def source_file(self, entry: FileEntry) -> SourceFile:
        return SourceFile(self.local_path(entry.path), entry.path, entry.size)

    def spool(self) -> FileSpool:
        """A new spool of file entries beside the list's, removed with them."""
        spool = FileSpool(self._folder, f"spool-{len(self._spools)}")
        self._spools.append(spool)
        return spool

    def external_sort(self) -> ExternalSort:
        """A new external sort whose runs go beside the list's copy, removed with it."""
        return ExternalSort(self._folder)

    def close(self) -> None:
        """Remove the temporary copy and spools."""
        for spool in (self.files, *self._spools):
            spool.close()
        self._cleanup()

    def __enter__(self) -> ParsedList:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def column_names(kind: Kind, width: int) -> list[str]:
    """Names for a list's columns: ``file, label`` / ``source, target`` or numbered ones."""
    if kind is Kind.IMAGE:
        labels = ["label"] if width == 2 else [f"label{i}" for i in range(1, width)]
        return ["file", *labels]
    if width == 1:
        return ["text"]
    if width == 2:
        return ["source", "target"]
    return [f"column{i}" for i in range(1, width + 1)]


def parse_list(
    path: str | os.PathLike[str],
    *,
    kind: Kind | str | None = None,
    root: str | None = None,
    follow_links: bool = False,
    progress: Progress | None = None,
) -> ParsedList:
    """Read and check the ``.list`` file at ``path``; close the result when done with it.

    Parameters
    ----------
    path
        The list file.
    kind
        ``"image"`` or ``"text"``; detected when not given: image as soon as one row's first column names an
        existing file under the root or looks like a file's path (a name with an image, audio, array or binary
        file's suffix), text otherwise, but never for a line that starts with an existing file's path followed by
        white space and more (columns joined by spaces): those lines are problems. The result's ``kind_reason``
        says why the kind was chosen.
    root
        The folder that image paths are relative to (default: the list file's folder).
    follow_links
        Read files through links that lead outside the root (a ``data/`` folder that is a link elsewhere); by
        default such paths are refused, one problem per link.
    progress
        Receives the ``check`` phase (the list's bytes read), then for an image list the ``files`` phase (its files
        checked).

    Raises
    ------
    ListFormatError
        With every problem found (file, line number, what is wrong): the first are in the message and in its
        ``problems``, all of them in its ``report`` file when there are more than the message shows.
    """
    path = os.fspath(path)
    report = progress or Silent()
    root_dir = os.path.abspath(root if root is not None else os.path.dirname(os.path.abspath(path)))
    if kind is not None:
        detection = _Detection(_list_kind(kind), detected=False)
    else:
        evidence = _file_evidence(path, root_dir)
        detection = _Detection(Kind.IMAGE if evidence else Kind.TEXT, detected=True, evidence=evidence)
    folder = tempfile.mkdtemp(prefix="datamount-list-")
    try:
        return _check(path, detection, root, root_dir, folder, report, follow_links=follow_links)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


@dataclass(frozen=True)
class _Detection:
    """The kind a list is read as: given by the caller, or detected (an image list by the row in ``evidence``)."""

    kind: Kind
    detected: bool
    evidence: str | None = None

    @property
    def refuses_spaced_lines(self) -> bool:
        """Whether a line that starts with a file's path and white space is a problem: in a list taken for text."""
        return self.detected and self.kind is Kind.TEXT

    def reason(self, root_dir: str, width: int) -> str | None:
        """Why a list that passed its checks is of this kind (``None`` when the caller gave it)."""
        if not self.detected:
            return None
        if self.kind is Kind.TEXT:
            return (
                f"text: no line's first column names a file in {root_dir} (whole, or up to white space) or looks "
                "like a file's path (a name ending in .jpg, .png, .wav, .npy...)"
            )
        labels = " (one column: files without labels)" if width == 1 else ""
        return f"image: every line's first column names a file in {root_dir}{labels}"

    def hint(self, spaced_lines: int) -> str:
        """What the error of a list with problems adds: why it was taken for its kind, and the fix."""
        if spaced_lines:
            lines = "a line starts" if spaced_lines == 1 else f"{spaced_lines:,} lines start"
            return (
                f"(taken for a text list, but {lines} with the path of an existing file followed by white space "
                "and more: an image list whose columns are separated by spaces? Separate the columns with TABs, or "
                "give --kind text to store the lines as text)"
            )
        if self.evidence is not None:
            return (
                f"(taken for an image list because {self.evidence}; if its first column is text, not file paths, "
                "say so: --kind text)"
            )
        return ""


def _check(
    path: str,
    detection: _Detection,
    root: str | None,
    root_dir: str,
    folder: str,
    report: Progress,
    *,
    follow_links: bool,
) -> ParsedList:
    """The list's checked form in ``folder``; its problems raised."""
    kind = detection.kind
    problems = ProblemLog(path, folder)
    written = NormalisedCopy(os.path.join(folder, "list"))
    paths = ExternalSort(folder)  # (relative path, line, value as written when it differs)
    spaced = _SpacedLines(root_dir, problems) if detection.refuses_spaced_lines else None
    width = first_line = 0
    report.start("check", items=0, size=os.path.getsize(path))
    with written:
        for number, row in _read_rows(path, report):
            if not first_line:
                width, first_line = len(row), number
            elif len(row) != width:
                problems.add(
                    number, f"{len(row)} column(s), but line {first_line} has {width} (columns are TAB-separated)"
                )
            if kind is Kind.IMAGE:
                relative, problem = _relative_file(row[0], root_dir)
                if problem:
                    problems.add(number, problem, order=1)
                elif relative == row[0]:
                    paths.add((relative, number, ""))
                else:
                    paths.add((relative, number, row[0]))
                    row = (relative, *row[1:])
            elif spaced is not None:
                spaced.check(number, row[0])
            written.add(row)
    report.finish()
    if not written.rows:
        raise ListFormatError(path, [ListProblem(0, "the list is empty: expected one sample per line")])
    files = FileSpool(folder)
    sizes = ExternalSort(folder)  # (line, size) of each row
    files_bytes = 0
    if kind is Kind.IMAGE:
        if root is not None and not os.path.isdir(root_dir):
            raise ListFormatError(path, [ListProblem(0, f"the root folder {root_dir} does not exist")])
        resolved = _FileCheck(root_dir, first_line, problems, folder, follow_links=follow_links)
        files_bytes = resolved.run(paths, files, sizes, report)
        sizes.spill()  # read only by an upload into shards
    problems.raise_if_any(hint=detection.hint(spaced.count if spaced is not None else 0))
    return ParsedList(
        path,
        kind,
        width,
        written.rows,
        root_dir,
        written.sha256,
        written.size,
        written.path,
        files,
        files_bytes,
        folder,
        sizes,
        list_blocks=written.blocks,
        kind_reason=detection.reason(root_dir, width),
    )


def _list_kind(kind: Kind | str) -> Kind:
    if kind not in (Kind.IMAGE, Kind.TEXT):
        raise ValueError(f"kind must be 'image' or 'text' (what a .list holds), got {kind!r}")
    return Kind(kind)


def _read_rows(path: str, report: Progress | None = None) -> Iterator[tuple[int, tuple[str, ...]]]:
    """The list's rows as a stream, ``(line number, columns)``, read and decoded a block at a time (``report``
    advanced by each block's bytes); blank lines are skipped, and a line that is not UTF-8 stops the reading with
    its problem."""
    try:
        source = open(path, "rb")  # noqa: SIM115 (closed below, once the generator ends)
    except IsADirectoryError:
        raise ListFormatError(path, [ListProblem(0, "is a folder, not a .list file")]) from None
    except FileNotFoundError:
        raise ListFormatError(path, [ListProblem(0, "no such file")]) from None
    except PermissionError:
        raise ListFormatError(path, [ListProblem(0, "cannot be read (permission denied)")]) from None
    number = 0
    with source:
        for block in _whole_lines(source, report):
            try:
                text = block.decode("utf-8")
            except UnicodeDecodeError as exc:
                bad = number + block.count(b"\n", 0, exc.start) + 1
                raise ListFormatError(
                    path, [ListProblem(bad, f"not UTF-8 text (byte {block[exc.start]:#04x})")]
                ) from None
            for line in text.split("\n"):
                number += 1
                line = line.removesuffix("\r")
                if line.strip(" "):  # a line of spaces is blank; one with a TAB is a row, however empty its fields
                    yield number, tuple(line.split("\t"))


def _whole_lines(source: BinaryIO, report: Progress | None) -> Iterator[bytes]:
    """The file's bytes in blocks of whole lines (each without its last line break), a byte-order mark at its start
    left out. A line break is never part of a multi-byte UTF-8 character, so each block decodes on its own."""
    tail = b""
    first = True
    while chunk := source.read(READ_BYTES):
        if report is not None:
            report.advance(items=0, size=len(chunk))
        if first and chunk.startswith(codecs.BOM_UTF8):
            chunk = chunk[len(codecs.BOM_UTF8) :]
        first = False
        chunk = tail + chunk
        cut = chunk.rfind(b"\n")
        if cut < 0:
            tail = chunk
            continue
        tail = chunk[cut + 1 :]
        yield chunk[:cut]
    if tail:
        yield tail


class NormalisedCopy:
    """The list as a version stores it (UTF-8, LF, TAB-separated), written to ``path`` and hashed as rows come."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.rows = self.size = 0
        self._digest = hashlib.sha256()
        self._out = open(path, "wb")  # noqa: SIM115 (closed by __exit__)
        self._pending: list[bytes] = []
        self._blocks = ListBlocksWriter()
        self.blocks: ListBlocks | None = None

    def add(self, row: tuple[str, ...]) -> None:
        self._pending.append(("\t".join(row) + "\n").encode())
        self.rows += 1
        if len(self._pending) >= BLOCK_RECORDS:
            self._flush()

    def _flush(self) -> None:
        block = b"".join(self._blocks.add(self._pending))
        self._pending = []
        self._digest.update(block)
        self._out.write(block)
        self.size += len(block)

    @property
    def sha256(self) -> str:
        return self._digest.hexdigest()

    def __enter__(self) -> NormalisedCopy:
        return self

    def __exit__(self, *_: object) -> None:
        self._flush()
        self._out.close()
        self.blocks = self._blocks.finish()


#: Suffixes that make a first-column value a file's path: images, audio, video, arrays and binary blobs.
FILE_SUFFIXES = frozenset(
    {
        *(".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm", ".pbm", ".ico"),
        *(".heic", ".avif", ".svg", ".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".mp4", ".avi", ".mkv"),
        *(".mov", ".webm", ".npy", ".npz", ".bin", ".dat", ".pt", ".pth", ".pkl", ".pickle", ".tfrecord"),
        *(".arrow", ".parquet", ".h5", ".hdf5"),
    }
)


def _file_evidence(path: str, root: str) -> str | None:
    """Why the list is an image list (the first row whose first column looks like a file's path, else the first
    that names an existing file), or None: a text list. Read as a stream, up to the first row that looks like a
    path."""
    names_a_file = None
    for number, row in _read_rows(path):
        if _looks_like_path(row[0]):
            return f"line {number} names a file ({row[0]!r})"
        if names_a_file is None and _names_a_file(row[0], root):
            names_a_file = f"line {number} names an existing file ({row[0]!r})"
    return names_a_file


def _looks_like_path(value: str) -> bool:
    """A file's name with a known suffix, as a path is written (with a ``/``, or without white space), white space
    around it aside (a stray space after a path still makes an image list, which then names the file it lacks)."""
    value = value.strip()
    stem, suffix = os.path.splitext(value)
    return bool(stem) and suffix.lower() in FILE_SUFFIXES and ("/" in value or not any(c.isspace() for c in value))


def _names_a_file(value: str, root: str) -> bool:
    if not value or "\x00" in value:
        return False
    return os.path.isfile(os.path.join(root, value))


#: A file's suffix followed by white space: where a path with spaces in its name may end inside a column.
_SUFFIX_BEFORE_SPACE = re.compile(
    "(?:" + "|".join(re.escape(suffix) for suffix in sorted(FILE_SUFFIXES)) + r")(?=\s)", re.IGNORECASE
)


def _file_before_space(value: str, names_a_file: Callable[[str], bool]) -> str | None:
    """The path that ``value`` starts with of a file that ``names_a_file``, cut at a run of white space that more
    text follows (the first column of a line whose columns are separated by spaces, not TABs), or None.

    The cuts tried: after the first word, and after each word that ends in a file's suffix (a path with spaces in its
    name, ``my cat.png circle``); white space around ``value`` aside.
    """
    value = value.strip()
    words = value.split(None, 1)
    if len(words) < 2:
        return None
    if names_a_file(words[0]):
        return words[0]
    for found in _SUFFIX_BEFORE_SPACE.finditer(value):
        if names_a_file(value[: found.end()]):
            return value[: found.end()]
    return None


class _SpacedLines:
    """Reports each line of a list taken for text whose first column starts with an existing file's path followed
    by white space and more, and counts them.

    Whether a word names a file is remembered for the last :data:`REMEMBERED_WORDS` words asked about: a text's
    lines start with the same few words again and again, each a ``stat`` otherwise.
    """

    REMEMBERED_WORDS = 1 << 16

    def __init__(self, root: str, problems: ProblemLog) -> None:
        self.problems = problems
        self.count = 0
        self._names_a_file = functools.lru_cache(maxsize=self.REMEMBERED_WORDS)(
            functools.partial(_names_a_file, root=root)
        )

    def check(self, number: int, value: str) -> None:
        found = _file_before_space(value, self._names_a_file)
        if found is not None:
            self.count += 1
            self.problems.add(
                number,
                f"{value!r} starts with the path of the file {found!r}, then white space and more (columns are "
                "separated by TABs)",
                order=1,
            )


class _FileCheck:
    """Checks each distinct file an image list names once, in path order (the paths sorted on disk): its problems
    for each row that names it, its entry into the spool of files and its size for each row (sorted back into row
    order on disk)."""

    def __init__(self, root: str, first_line: int, problems: ProblemLog, folder: str, *, follow_links: bool) -> None:
        self.root, self.first_line, self.problems, self.folder = root, first_line, problems, folder
        self.links = None if follow_links else LinkGuard(root)
        #: A link leading outside the root: each row going through it, as ``(link, line, value)``.
        self.escaping = ExternalSort(folder)

    def run(self, paths: ExternalSort, files: FileSpool, sizes: ExternalSort, report: Progress) -> int:
        """Check the files of ``paths``, spooled into ``files`` (and each row's size into ``sizes``); their bytes."""
        total = checked = 0
        report.start("files", items=len(paths), size=0)
        for relative, group in itertools.groupby(paths.sorted(), key=operator.itemgetter(0)):
            rows = list(group)  # the rows naming one file (a few, or one)
            size = self._check(relative, rows)
            if size is not None:
                files.append(FileEntry(relative, size, ""))
                total += size
                for record in rows:
                    sizes.add((record[1], size))
            checked += len(rows)
            if checked >= PROGRESS_ROWS:  # a report per file would cost more than the check
                report.advance(items=checked)
                checked = 0
        report.advance(items=checked)
        report.finish()
        self._report_escaping()
        return total

    def _check(self, relative: str, rows: list[tuple[str, int, str]]) -> int | None:
        """The size of the file ``relative``, or None: its problem is reported for each of ``rows``."""
        local = os.path.join(self.root, relative)
        try:  # one lstat tells a link from a file and, for a file (almost every one), all the rest
            info: os.stat_result | None = os.lstat(local)
        except (FileNotFoundError, NotADirectoryError):  # the second: a folder of the path is a file
            info = None
        is_link = info is not None and stat.S_ISLNK(info.st_mode)
        if self.links is not None and not self.links.leads_inside(local, is_link=is_link):
            link = _escaping_link(self.links, relative)
            for _, number, value in rows:
                self.escaping.add((link, number, value or relative))
            return None
        try:
            if info is None:
                raise FileNotFoundError(local)
            if is_link:
                info = os.stat(local)
            if not stat.S_ISREG(info.st_mode):  # refused before anything opens it (a FIFO, a device)
                raise IsADirectoryError(local)
            if not os.access(local, os.R_OK):  # not an open and a close: a third of the check's time
                raise PermissionError(local)
        except FileNotFoundError:
            for _, number, value in rows:
                value = value or relative
                hint = _path_hint(value, self.root, first=number == self.first_line)
                self.problems.add(number, f"file {value!r} does not exist ({local}){hint}", order=1)
            return None
        except IsADirectoryError:
            for _, number, value in rows:
                self.problems.add(number, f"{value or relative!r} is a folder, not a file", order=1)
            return None
        except PermissionError:
            for _, number, value in rows:
                self.problems.add(number, f"file {value or relative!r} cannot be read (permission denied)", order=1)
            return None
        return info.st_size

    def _report_escaping(self) -> None:
        """One problem per link leading outside the root, at the first row going through it."""
        for link, through in itertools.groupby(self.escaping.sorted(), key=operator.itemgetter(0)):
            rows = iter(through)
            _, number, value = next(rows)
            others = sum(1 for _ in rows)
            more = f" (and {others} more line{'s' if others > 1 else ''} through it)" if others else ""
            self.problems.add(
                number,
                f"path {value!r}{more} leads outside the root folder {self.root} through the link {link!r} (to "
                f"{os.path.realpath(os.path.join(self.root, link))}); give a --root that holds both, or "
                "--follow-links to read files through links",
                order=1,
            )


#: First-line paths that are column names: a header line, which a ``.list`` does not have.
_HEADER_WORDS = frozenset({"path", "paths", "file", "files", "filename", "file_name", "filepath", "image", "images"})


def _path_hint(value: str, root: str, *, first: bool) -> str:
    """What may be wrong with a path that names no file: a header line, columns separated by spaces, white space
    around it, Windows' separators, or its letters in another Unicode form than the file's name (a name written on
    macOS, say)."""
    if first and value.strip().lower() in _HEADER_WORDS:
        return " (a header line? a .list has none: its first line is a row; remove that line)"
    spaced = _file_before_space(value, functools.partial(_names_a_file, root=root))
    if spaced is not None:
        return f" (columns separated by spaces? {spaced!r} exists: separate the columns with TABs)"
    if value != value.strip():
        return " (mind the white space around the path)"
    if "\\" in value:
        return " (paths in a .list separate folders with '/', not '\\')"
    for form in ("NFC", "NFD"):
        other = unicodedata.normalize(form, value)
        if other != value and os.path.exists(os.path.join(root, other)):
            return f" (there is {other!r}, the same name with its letters in Unicode form {form}: write it so)"
    return ""


def _escaping_link(links: LinkGuard, relative: str) -> str:
    """The first part of ``relative`` that is a link leading outside the root (``relative`` itself if none is)."""
    parts = relative.split(os.sep)
    for end in range(1, len(parts) + 1):
        partial = os.path.join(*parts[:end])
        full = os.path.join(links.root, partial)
        if os.path.islink(full) and not links.resolves_inside(full):
            return partial
    return relative


def _relative_file(value: str, root: str) -> tuple[str, str | None]:
    """The file's path relative to the root, normalised, or a problem."""
    if not value.strip():
        return "", "the file path (first column) is empty"
    if "\x00" in value:
        return "", "the file path contains a NUL character"
    if os.path.isabs(value) or value.startswith("~"):
        return "", f"absolute path {value!r}: paths must be relative to the list's folder (or --root)"
    relative = os.path.normpath(value)
    if relative == ".." or relative.startswith("../"):
        return "", f"path {value!r} leaves the root folder {root}"
    return relative, None
