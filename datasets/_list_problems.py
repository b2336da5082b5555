"""The problems of a ``.list`` file, however many: sorted by line on disk, the first kept for the error, every one
written to a report file when the message cannot show them all."""

from __future__ import annotations

import itertools
import os
import tempfile

from datamount.datasets.errors import SHOWN_PROBLEMS, ListFormatError, ListProblem
from datamount.datasets.spool import ExternalSort

#: Problems an error carries (:attr:`ListFormatError.problems`); the rest are counted and written to its report.
KEPT_PROBLEMS = 1000


class ProblemLog:
    """Collects problems in any order; :meth:`raise_if_any` reports them in line order.

    A problem's ``order`` breaks ties on one line: what is wrong with the row (its width) before what is wrong with
    its file.
    """

    def __init__(self, path: str, folder: str) -> None:
        self._path = path
        self._sorted = ExternalSort(folder)

    def __len__(self) -> int:
        return len(self._sorted)

    def add(self, line: int, message: str, *, order: int = 0) -> None:
        self._sorted.add((line, order, message))

    def raise_if_any(self, *, hint: str = "") -> None:
        """Raise a :class:`ListFormatError` of the problems, if there are any."""
        total = len(self._sorted)
        if not total:
            return
        problems = (ListProblem(line, message) for line, _, message in self._sorted.sorted())
        kept = list(itertools.islice(problems, KEPT_PROBLEMS))
        report = None
        if total > SHOWN_PROBLEMS:
            report = self._write_report(itertools.chain(kept, problems))
        raise ListFormatError(self._path, kept, hint=hint, total=total, report=report)

    def _write_report(self, problems: itertools.chain[ListProblem]) -> str:
        """Every problem in a file of the system's temporary folder, ``LIST:LINE: MESSAGE`` a line (the way
        compilers write theirs, which editors open at the line); its path."""
        handle, report = tempfile.mkstemp(prefix="datamount-list-problems-", suffix=".txt")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            for problem in problems:
                where = f"{self._path}:{problem.line}" if problem.line else self._path
                out.write(f"{where}: {problem.message}\n")
        return report
