"""Exceptions raised by :mod:`datamount.datasets`."""

from __future__ import annotations

from dataclasses import dataclass

from datamount.storage.errors import DatamountError, ObjectNotFoundError

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
    """A ``.list`` file is wrong: :attr:`problems` holds the first problems found (every one, up to a thousand),
    each with its line number, in line order; :attr:`total` counts them all and, when the message cannot show them
    all, :attr:`report` is a file that lists every one."""

    def __init__(
        self,
        path: str,
        problems: list[ListProblem],
        *,
        hint: str = "",
        total: int | None = None,
        report: str | None = None,
    ) -> None:
        self.path = path
        self.problems = problems
        self.total = len(problems) if total is None else total
        self.report = report
        ending = f"\n{hint}" if hint else ""
        if self.total == 1:
            only = problems[0]
            where = f"{path}:{only.line}" if only.line else path
            super().__init__(f"{where}: {only.message}{ending}")
            return
        shown = [f"  {problem}" for problem in problems[:SHOWN_PROBLEMS]]
        more = self.total - len(shown)
        if more > 0:
            listed = f" (every problem is listed in {report})" if report else ""
            shown.append(f"  ... and {more} more{listed}")
        super().__init__(f"{path}: {self.total} problems:\n" + "\n".join(shown) + ending)


class InvalidDatasetNameError(DatamountError, ValueError):
    """A dataset name or reference (``name``, ``name@3``) is not valid."""


class DatasetNotFoundError(DatamountError, FileNotFoundError):
    """No committed dataset (or version) of that name is in the store."""


class ReaderNotCalledError(DatamountError, TypeError):
    """A reader was iterated where it is to be called for a pass (``for s in mnist.train():`` for
    ``mnist.train()()``): the message names the call (:mod:`datamount.datasets.reader_creator`)."""


class MissingPartError(ObjectNotFoundError):
    """A part of a committed version (an object, a shard, its list) is not in the store while the version is: the
    message names the version, the rows that need the part, its URL and how to put it back. :attr:`missing` is the
    store's own error for the part."""

    def __init__(self, message: str, missing: ObjectNotFoundError | None = None) -> None:
        super().__init__(message)
        self.missing = missing


class CommitConflictError(DatamountError, RuntimeError):
    """A new version could not be committed: other writers kept taking the next number first."""


class DatasetBusyError(DatamountError, TimeoutError):
    """A dataset is held by other processes for longer than one would wait: writers that a removal waits for, or a
    removal that a writer waits for; the message names the holders."""


class LockLostError(DatamountError, RuntimeError):
    """A writer's or remover's lock on a dataset was taken away as stale (its process paused for too long);
    nothing was committed, and running the command again resumes it."""


class ManifestError(DatamountError, ValueError):
    """A manifest cannot be read: damaged, or written by a newer datamount."""


class StreamFormatError(DatamountError, ValueError):
    """A stream cannot be read (empty, not Arrow, truncated, a newer format) or an entry does not fit its columns."""


class RayUnreachableError(DatamountError, ConnectionError):
    """No Ray cluster answers at the address given (or none is running where one was looked for)."""


class DownloadError(DatamountError, ConnectionError):
    """A public file could not be downloaded; the message names the URL and the last HTTP status or failure."""


class DownloadNotFoundError(DownloadError, FileNotFoundError):
    """The server answered that the file does not exist (HTTP 404 or 410)."""


class SourceFormatError(DatamountError, ValueError):
    """A source file or folder is not what the public dataset is built from; the message names it and what is
    wrong."""


class SourceNotFoundError(DatamountError, FileNotFoundError):
    """A ``--from`` path, or a file the dataset needs in it, does not exist."""


class InstallConflictError(DatamountError, RuntimeError):
    """Another process changed a public dataset while it was being installed; running the install again fixes it."""


class PublicConfigError(DatamountError, ValueError):
    """An option of a public-dataset install is wrong (e.g. a mirror that is not an http(s) URL)."""


class MissingDependencyError(DatamountError, ImportError):
    """Building a dataset needs an optional package that is not installed; the message names the extra."""


class MapFunctionError(DatamountError):
    """A map function (``pack --map``) failed on a row, or returned something that is not a row of the new
    dataset; the message names the row."""
