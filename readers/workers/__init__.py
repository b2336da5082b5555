"""The worker toolkit of the reader decorators and the DataLoader: threads and processes that run readers for a
consumer.

One end marker (:data:`END_OF_STREAM`) and one carried exception (:class:`CarriedException`) for every worker; one
producer loop (:func:`produce`); one wait that never hangs on a dead worker (:class:`Inbox`, raising
:class:`~datamount.readers.errors.WorkerDiedError`); one shutdown sequence (:meth:`Crew.shutdown`); and the checks a
reader passes before it goes to a worker process.
"""

from datamount.datasets.rows.chain import ClosingChain, close_iterator
from datamount.readers.workers.carried import END_OF_STREAM, CarriedException, EndOfStream, RemoteTraceback
from datamount.readers.workers.chains import (
    EpochLock,
    Reader,
    WorkerPart,
    advance_epochs,
    check_reader,
    split_among_workers,
    walk_readers,
)
from datamount.readers.workers.channels import (
    POLL_SECONDS,
    Inbox,
    PipeInbox,
    PipeSender,
    ProcessQueueInbox,
    ProcessQueueSender,
    QueueInbox,
    QueueSender,
    Sender,
    StopFlag,
    StopSignal,
    acquire_until_stopped,
    get_until_stopped,
    put_until_stopped,
)
from datamount.readers.workers.crew import THREAD_JOIN_SECONDS, Crew, serve
from datamount.readers.workers.handles import (
    GRACE_SECONDS,
    ProcessHandle,
    ThreadHandle,
    WorkerHandle,
    exit_description,
    worker_died,
)
from datamount.readers.workers.head_start import head_start
from datamount.readers.workers.produce import Emit, produce
from datamount.readers.workers.start import effective_start_method, require_picklable, start_method_of

__all__ = [
    "END_OF_STREAM",
    "GRACE_SECONDS",
    "POLL_SECONDS",
    "THREAD_JOIN_SECONDS",
    "CarriedException",
    "ClosingChain",
    "Crew",
    "Emit",
    "EndOfStream",
    "EpochLock",
    "Inbox",
    "PipeInbox",
    "PipeSender",
    "ProcessHandle",
    "ProcessQueueInbox",
    "ProcessQueueSender",
    "QueueInbox",
    "QueueSender",
    "Reader",
    "RemoteTraceback",
    "Sender",
    "StopFlag",
    "StopSignal",
    "ThreadHandle",
    "WorkerHandle",
    "WorkerPart",
    "acquire_until_stopped",
    "advance_epochs",
    "check_reader",
    "close_iterator",
    "effective_start_method",
    "exit_description",
    "get_until_stopped",
    "head_start",
    "produce",
    "put_until_stopped",
    "require_picklable",
    "serve",
    "split_among_workers",
    "start_method_of",
    "walk_readers",
    "worker_died",
]
