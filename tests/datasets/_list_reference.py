"""The checks of a ``.list`` as datamount made them before lists were streamed: every row in memory, then each check
over all of them. The streaming checks (``datasets/listfile.py``) must find exactly the same problems; this is what
their property test compares them with. Each value is checked by the same functions: what is compared is how the rows
are gathered, deduplicated, ordered and reported."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from datamount.datasets.errors import ListProblem
from datamount.datasets.listfile import (  # what each value is checked by: the same in both, not what is compared
    _escaping_link,
    _looks_like_path,
    _names_a_file,
    _path_hint,
    _relative_file,
)
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
