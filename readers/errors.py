"""Exceptions raised by :mod:`datamount.readers`."""

from __future__ import annotations

from datamount.datasets.errors import StreamFormatError
from datamount.storage.errors import DatamountError

__all__ = [
    "ComposeNotAligned",
    "DistributedConfigError",
    "MasterExistsError",
    "MasterFinishedError",
    "MasterNotFoundError",
    "MasterUnavailableError",
    "NotPicklableError",
    "ReaderStateError",
    "SharedMemoryError",
    "StatsConfigError",
    "StreamFormatError",
    "TaskQueueSnapshotError",
    "WorkerDiedError",
]


class ComposeNotAligned(DatamountError, ValueError):
    """``compose`` readers yielded different numbers of samples (Paddle's name, kept for ported code)."""


class WorkerDiedError(DatamountError, RuntimeError):
    """A background worker (a thread, or a process: killed, crashed, out of memory) ended without finishing its
    work."""


class NotPicklableError(DatamountError, TypeError):
    """A reader or function must be sent to a worker process but cannot be pickled."""


class SharedMemoryError(DatamountError, OSError):
    """Shared memory is too small or unavailable for the requested prefetch."""


class DistributedConfigError(DatamountError, ValueError):
    """The rank, world size or worker settings (arguments or environment variables) are missing, malformed or
    inconsistent; the message names the variable or argument."""


class StatsConfigError(DatamountError, ValueError):
    """``DATAMOUNT_STATS`` or ``DATAMOUNT_STATS_FILE`` cannot be used as set; the message names the variable, its
    value and the fix."""


class ReaderStateError(DatamountError, ValueError):
    """A reader state (``state_dict()``) is malformed or does not belong to the reader it is loaded into."""


class MasterFinishedError(DatamountError, RuntimeError):
    """A pass was asked of a master that has run all its passes."""


class MasterNotFoundError(DatamountError, LookupError):
    """No task master of that name runs in the Ray cluster (never started, stopped, or its actor is gone)."""


class MasterExistsError(DatamountError, FileExistsError):
    """A task master of that name already runs in the Ray namespace."""


class MasterUnavailableError(DatamountError, ConnectionError):
    """The task master did not answer in time (its actor keeps failing, or the cluster is unreachable)."""


class TaskQueueSnapshotError(DatamountError, ValueError):
    """A task queue snapshot cannot be read: damaged, or written by a newer datamount."""
