"""The checks of a ``.list`` as datamount made them before lists were streamed: every row in memory, then each check
over all of them. The streaming checks (``datasets/listfile.py``) must find exactly the same problems; this is what
their property test compares them with."""

from __future__ import annotations

import os
import re
import stat
import unicodedata
from pathlib import Path

from datamount.datasets.errors import ListProblem
from datamount.datasets.listfile import FILE_SUFFIXES
from datamount.datasets.manifest import Kind
from datamount.storage.paths import LinkGuard


def reference_check(
    path: str, *, kind: Kind | None = None, root: str | None = None, follow_links: bool = False
) -> tuple[Kind, list[tuple[str, ...]], list[ListProblem]]:
    """The list's kind, rows (image paths normalised) and problems (sorted by line), as they were found in memory."""
    raw = Path(path).read_bytes()
    text = raw.decode("utf-8-sig")
    rows: list[tuple[str, ...]] = []
    numbers: list[int] = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if line.strip(" "):
            rows.append(tuple(line.split("\t")))
            numbers.append(number)
    if not rows:
        return kind or Kind.TEXT, [], [ListProblem(0, "the list is empty: expected one sample per line")]
    width = len(rows[0])
    problems = [
        ListProblem(number, f"{len(row)} column(s), but line {numbers[0]} has {width} (columns are TAB-separated)")
        for row, number in zip(rows, numbers, strict=True)
        if len(row) != width
    ]
    root_dir = os.path.abspath(root if root is not None else os.path.dirname(os.path.abspath(path)))
    if kind is None:
        evidence = next((number for row, number in zip(rows, numbers, strict=True) if _looks_like_path(row[0])), None)
        if evidence is None:
            names = (_names_a_file(row[0], root_dir) for row in rows)
            evidence = next((number for number, found in zip(numbers, names, strict=True) if found), None)
        kind = Kind.IMAGE if evidence is not None else Kind.TEXT
        if kind is Kind.TEXT:
            problems += _spaced_lines(rows, numbers, root_dir)
    if kind is Kind.IMAGE:
        problems += _resolve(rows, numbers, root_dir, follow_links=follow_links)
        rows = [(os.path.normpath(row[0]), *row[1:]) for row in rows]
    return kind, rows, sorted(problems, key=lambda p: p.line)


def _resolve(rows: list[tuple[str, ...]], numbers: list[int], root: str, *, follow_links: bool) -> list[ListProblem]:
    links = None if follow_links else LinkGuard(root)
    problems = []
    files: set[str] = set()
    escaping: dict[str, list[tuple[int, str]]] = {}
    for row, number in zip(rows, numbers, strict=True):
        value = row[0]
        relative, problem = _relative_file(value, root)
        if problem:
            problems.append(ListProblem(number, problem))
            continue
        if relative in files:
            continue
        local = os.path.join(root, relative)
        try:
            info: os.stat_result | None = os.lstat(local)
        except (FileNotFoundError, NotADirectoryError):
            info = None
        is_link = info is not None and stat.S_ISLNK(info.st_mode)
        if links is not None and not links.leads_inside(local, is_link=is_link):
            escaping.setdefault(_escaping_link(links, relative), []).append((number, value))
            continue
        if info is not None and is_link:
            info = os.stat(local)
        if info is None:
            hint = _path_hint(value, root, first=number == numbers[0])
            problems.append(ListProblem(number, f"file {value!r} does not exist ({local}){hint}"))
        elif not stat.S_ISREG(info.st_mode):
            problems.append(ListProblem(number, f"{value!r} is a folder, not a file"))
        else:
            files.add(relative)
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


def _spaced_lines(rows: list[tuple[str, ...]], numbers: list[int], root: str) -> list[ListProblem]:
    """A problem for each row of a list taken for text whose first column starts with an existing file's path and
    white space and more."""
    problems = []
    for row, number in zip(rows, numbers, strict=True):
        found = _file_before_space(row[0], root)
        if found is not None:
            problems.append(
                ListProblem(
                    number,
                    f"{row[0]!r} starts with the path of the file {found!r}, then white space and more (columns "
                    "are separated by TABs)",
                )
            )
    return problems


def _file_before_space(value: str, root: str) -> str | None:
    """The start of ``value`` (stripped) up to the end of its first word, or of a later word that ends in a file's
    suffix, that names an existing file, when more words follow it."""
    value = value.strip()
    words = list(re.finditer(r"\S+", value))
    for index, word in enumerate(words[:-1]):
        suffixed = word.group().lower().endswith(tuple(FILE_SUFFIXES))
        if (index == 0 or suffixed) and _names_a_file(value[: word.end()], root):
            return value[: word.end()]
    return None


#: First-line paths that are column names: a header line, which a ``.list`` does not have.
_HEADER_WORDS = frozenset({"path", "paths", "file", "files", "filename", "file_name", "filepath", "image", "images"})


def _path_hint(value: str, root: str, *, first: bool) -> str:
    """What may be wrong with a path that names no file: a header line, white space around it, Windows' separators,
    or its letters in another Unicode form than the file's name (a name written on macOS, say)."""
    if first and value.strip().lower() in _HEADER_WORDS:
        return " (a header line? a .list has none: its first line is a row; remove that line)"
    spaced = _file_before_space(value, root)
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
