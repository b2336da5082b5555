"""The task master: a dataset's row groups (or runs of list lines) handed out to trainers as leased tasks.

:mod:`.tasks` is the queue, a plain state machine without Ray; :mod:`.actor` the master that serves it as a detached
Ray actor, snapshotted to the store, and its client; :mod:`.dist` the trainers' side, :func:`dist_reader`, which
reads the tasks it leases (one ahead, :mod:`.ahead`). See ``docs/task-master.md``.
"""

from datamount.readers.master.actor import (
    DEFAULT_LEASE_TIMEOUT,
    DEFAULT_MASTER_TIMEOUT,
    DEFAULT_MAX_FAILURES,
    DEFAULT_NAMESPACE,
    MasterClient,
    MasterInfo,
    connect,
    snapshot_path,
    start_master,
    stop_master,
)
from datamount.readers.master.dist import LOCAL_ENV, DistReader, dist_reader, use_master
from datamount.readers.master.tasks import Lease, PassFinished, QueueStatus, Task, TaskQueue, TaskReport, Wait

__all__ = [
    "DEFAULT_LEASE_TIMEOUT",
    "DEFAULT_MASTER_TIMEOUT",
    "DEFAULT_MAX_FAILURES",
    "DEFAULT_NAMESPACE",
    "LOCAL_ENV",
    "DistReader",
    "Lease",
    "MasterClient",
    "MasterInfo",
    "PassFinished",
    "QueueStatus",
    "Task",
    "TaskQueue",
    "TaskReport",
    "Wait",
    "connect",
    "dist_reader",
    "snapshot_path",
    "start_master",
    "stop_master",
    "use_master",
]
