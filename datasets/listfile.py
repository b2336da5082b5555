"""Reading and checking ``.list`` files: one sample per line, columns separated by one TAB.

Image lists name a file in their first column (relative to the list's folder, or to ``root``) and labels in the
others; text lists (e.g. translation pairs) hold text in every column. Every problem is collected, with its line
number, before anything is written anywhere.
"""

from __future__ import annotations

import os
import stat
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from datamount.datasets.errors import ListFormatError, ListProblem
from datamount.datasets.manifest import Kind
from datamount.storage.paths import LinkGuard


@dataclass(frozen=True)
class SourceFile:
    """A local file named by an image list: where it is, and its path relative to the list's root."""

    local_path: str
    relative_path: str
    size: int


@dataclass(frozen=True)
class ParsedList:
    """A checked ``.list`` file: its kind, its rows (tuples of strings) and, for image lists, the files."""

    path: str
    kind: Kind
    width: int
    rows: list[tuple[str, ...]]
    line_numbers: list[int]
    files: dict[str, SourceFile]

    def columns(self) -> list[str]:
        """Column names, in list order."""
        return column_names(self.kind, self.width)


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
) -> ParsedList:
    """Read and check the ``.list`` file at ``path``.

    Parameters
    ----------
    path
        The list file.
    kind
        ``"image"`` or ``"text"``; detected when not given: image as soon as one row's first column names an
        existing file under the root or looks like a file's path (a name with an image, audio, array or binary
        file's suffix), text otherwise.
    root
        The folder that image paths are relative to (default: the list file's folder).
    follow_links
        Read files through links that lead outside the root (a ``data/`` folder that is a link elsewhere); by
        default such paths are refused, one problem per link.

    Raises
    ------
    ListFormatError
        With every problem found (file, line number, what is wrong).
    """
    path = os.fspath(path)
    rows, numbers = _read_rows(path)
    problems = _check_widths(rows, numbers)
    root_dir = os.path.abspath(root if root is not None else os.path.dirname(os.path.abspath(path)))
    evidence = None if kind is not None else _file_evidence(rows, numbers, root_dir)
    chosen = _list_kind(kind) if kind is not None else Kind.IMAGE if evidence else Kind.TEXT
    files: dict[str, SourceFile] = {}
    if chosen is Kind.IMAGE:
        if root is not None and not os.path.isdir(root_dir):
            raise ListFormatError(path, [ListProblem(0, f"the root folder {root_dir} does not exist")])
        problems += _resolve_files(rows, numbers, root_dir, files, follow_links=follow_links)
    if problems:
        hint = ""
        if evidence is not None:
            hint = (
                f"(taken for an image list because {evidence}; if its first column is text, not file paths, "
                "say so: --kind text)"
            )
        raise ListFormatError(path, sorted(problems, key=lambda p: p.line), hint=hint)
    return ParsedList(path, chosen, len(rows[0]), rows, numbers, files)


def _list_kind(kind: Kind | str) -> Kind:
    if kind not in (Kind.IMAGE, Kind.TEXT):
        raise ValueError(f"kind must be 'image' or 'text' (what a .list holds), got {kind!r}")
    return Kind(kind)


def _read_rows(path: str) -> tuple[list[tuple[str, ...]], list[int]]:
    try:
        raw = Path(path).read_bytes()
    except IsADirectoryError:
        raise ListFormatError(path, [ListProblem(0, "is a folder, not a .list file")]) from None
    except FileNotFoundError:
        raise ListFormatError(path, [ListProblem(0, "no such file")]) from None
    except PermissionError:
        raise ListFormatError(path, [ListProblem(0, "cannot be read (permission denied)")]) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad_line = raw[: exc.start].count(b"\n") + 1
        raise ListFormatError(path, [ListProblem(bad_line, f"not UTF-8 text (byte {raw[exc.start]:#04x})")]) from None
    rows: list[tuple[str, ...]] = []
    numbers: list[int] = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if line.strip(" "):  # a line of spaces is blank; one with a TAB is a row, however empty its fields
            rows.append(tuple(line.split("\t")))
            numbers.append(number)
    if not rows:
        raise ListFormatError(path, [ListProblem(0, "the list is empty: expected one sample per line")])
    return rows, numbers


def _check_widths(rows: list[tuple[str, ...]], numbers: list[int]) -> list[ListProblem]:
    width = len(rows[0])
    return [
        ListProblem(number, f"{len(row)} column(s), but line {numbers[0]} has {width} (columns are TAB-separated)")
        for row, number in zip(rows, numbers, strict=True)
        if len(row) != width
    ]


#: Suffixes that make a first-column value a file's path: images, audio, video, arrays and binary blobs.
FILE_SUFFIXES = frozenset(
    {
        *(".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm", ".pbm", ".ico"),
        *(".heic", ".avif", ".svg", ".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".mp4", ".avi", ".mkv"),
        *(".mov", ".webm", ".npy", ".npz", ".bin", ".dat", ".pt", ".pth", ".pkl", ".pickle", ".tfrecord"),
        *(".arrow", ".parquet", ".h5", ".hdf5"),
    }
)


def _file_evidence(rows: list[tuple[str, ...]], numbers: list[int], root: str) -> str | None:
    """Why the list is an image list (the first row whose first column looks like a file's path, then the first
    that names an existing file), or None: a text list."""
    for row, number in zip(rows, numbers, strict=True):
        if _looks_like_path(row[0]):
            return f"line {number} names a file ({row[0]!r})"
    for row, number in zip(rows, numbers, strict=True):
        if _names_a_file(row[0], root):
            return f"line {number} names an existing file ({row[0]!r})"
    return None


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


def _resolve_files(
    rows: list[tuple[str, ...]], numbers: list[int], root: str, files: dict[str, SourceFile], *, follow_links: bool
) -> list[ListProblem]:
    links = None if follow_links else LinkGuard(root)
    problems = []
    escaping: dict[str, list[tuple[int, str]]] = {}  # a link leading outside the root: the rows going through it
    for row, number in zip(rows, numbers, strict=True):
        value = row[0]
        relative, problem = _relative_file(value, root)
        if problem:
            problems.append(ListProblem(number, problem))
            continue
        if relative in files:
            continue
        local = os.path.join(root, relative)
        try:  # one lstat tells a link from a file and, for a file (almost every one), all the rest
            info: os.stat_result | None = os.lstat(local)
        except (FileNotFoundError, NotADirectoryError):  # the second: a folder of the path is a file
            info = None
        is_link = info is not None and stat.S_ISLNK(info.st_mode)
        if links is not None and not links.leads_inside(local, is_link=is_link):  # only where links are checked
            escaping.setdefault(_escaping_link(links, relative), []).append((number, value))
            continue
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
            hint = _path_hint(value, root, first=number == numbers[0])
            problems.append(ListProblem(number, f"file {value!r} does not exist ({local}){hint}"))
            continue
        except IsADirectoryError:
            problems.append(ListProblem(number, f"{value!r} is a folder, not a file"))
            continue
        except PermissionError:
            problems.append(ListProblem(number, f"file {value!r} cannot be read (permission denied)"))
            continue
        files[relative] = SourceFile(local, relative, info.st_size)
    for link, through in escaping.items():
        (number, value), others = through[0], len(through) - 1
        more = f" (and {others} more line{'s' if others > 1 else ''} through it)" if others else ""
        problems.append(
            ListProblem(
                number,
                f"path {value!r}{more} leads outside the root folder {root} through the link {link!r} (to "
                f"{os.path.realpath(os.path.join(root, link))}); give a --root that holds both, or --follow-links "
                "to read files through links",
            )
        )
    return problems


#: First-line paths that are column names: a header line, which a ``.list`` does not have.
_HEADER_WORDS = frozenset({"path", "paths", "file", "files", "filename", "file_name", "filepath", "image", "images"})


def _path_hint(value: str, root: str, *, first: bool) -> str:
    """What may be wrong with a path that names no file: a header line, white space around it, Windows' separators,
    or its letters in another Unicode form than the file's name (a name written on macOS, say)."""
    if first and value.strip().lower() in _HEADER_WORDS:
        return " (a header line? a .list has none: its first line is a row; remove that line)"
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
