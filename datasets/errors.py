"""Exceptions raised by :mod:`datamount.datasets`."""

from __future__ import annotations

from dataclasses import dataclass

from datamount.storage.errors import DatamountError

#: How many problems of a ``.list`` file are spelled out in a message; the rest are counted.
SHOWN_PROBLEMS = 20


@dataclass(frozen=True)
class ListProblem:
    """One problem of a ``.list`` file, at a line (``0`` for the file as a whole)."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


class ListFormatError(DatamountError, ValueError):
    """A ``.list`` file is wrong; :attr:`problems` holds every problem found, each with its line number."""

    def __init__(self, path: str, problems: list[ListProblem]) -> None:
        self.path = path
        self.problems = problems
        if len(problems) == 1:
            only = problems[0]
            super().__init__(f"{path}:{only.line}: {only.message}" if only.line else f"{path}: {only.message}")
            return
        shown = [f"  {problem}" for problem in problems[:SHOWN_PROBLEMS]]
        more = len(problems) - SHOWN_PROBLEMS
        if more > 0:
            shown.append(f"  ... and {more} more")
        super().__init__(f"{path}: {len(problems)} problems:\n" + "\n".join(shown))


class InvalidDatasetNameError(DatamountError, ValueError):
    """A dataset name or reference (``name``, ``name@3``) is not valid."""


class DatasetNotFoundError(DatamountError, FileNotFoundError):
    """No committed dataset (or version) of that name is in the store."""


class ManifestError(DatamountError, ValueError):
    """A manifest cannot be read: damaged, or written by a newer datamount."""
