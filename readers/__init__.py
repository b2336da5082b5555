"""How samples reach training: ``reader(name)``, Paddle-compatible reader decorators, the DataLoader, streams for
pipes and the task master.

``reader`` and :class:`DatasetReader` are in ``dataset.py`` (their plans in ``sharding.py``); the decorators in
``decorators/``; :class:`DataLoader` in ``dataloader/``; the threads and processes behind both in ``workers/``;
states and elastic resume in ``resume.py``; the visitation ledger in ``ledger.py``; weighted mixtures in
``mixture.py``; statistics (``samples.stats()``, ``DATAMOUNT_STATS``) in ``stats.py``; the stream format in
``stream.py``; the task master and :func:`dist_reader` in ``master/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from datamount.datasets.lazy_exports import lazy_exports
from datamount.readers.dataset import DatasetReader, reader
from datamount.readers.decorators import (
    batch,
    buffered,
    cache,
    chain,
    compose,
    firstn,
    map_readers,
    multiprocess_reader,
    shuffle,
    xmap_readers,
)
from datamount.readers.errors import (
    ComposeNotAligned,
    DistributedConfigError,
    MasterExistsError,
    MasterFinishedError,
    MasterNotFoundError,
    MasterUnavailableError,
    NotPicklableError,
    ReaderStateError,
    SharedMemoryError,
    StatsConfigError,
    StreamFormatError,
    TaskQueueSnapshotError,
    WorkerDiedError,
)
from datamount.readers.mixture import Mixture, mix

if TYPE_CHECKING:
    from datamount.readers.dataloader import DataLoader
    from datamount.readers.ledger import Ledger
    from datamount.readers.master import DistReader, connect, dist_reader, start_master, stop_master
    from datamount.readers.stream import import_stream, read_from, stream_reader, write_to

#: Names whose modules are imported when first used: ``reader(name)`` alone needs neither numpy and multiprocessing
#: (the DataLoader's) nor Ray's client (the task master's).
_LAZY = {
    "DataLoader": "datamount.readers.dataloader",
    "Ledger": "datamount.readers.ledger",
    **dict.fromkeys(
        ["DistReader", "connect", "dist_reader", "start_master", "stop_master"], "datamount.readers.master"
    ),
    **dict.fromkeys(["import_stream", "read_from", "stream_reader", "write_to"], "datamount.readers.stream"),
}

__all__ = [
    "ComposeNotAligned",
    "DataLoader",
    "DatasetReader",
    "DistReader",
    "DistributedConfigError",
    "Ledger",
    "MasterExistsError",
    "MasterFinishedError",
    "MasterNotFoundError",
    "MasterUnavailableError",
    "Mixture",
    "NotPicklableError",
    "ReaderStateError",
    "SharedMemoryError",
    "StatsConfigError",
    "StreamFormatError",
    "TaskQueueSnapshotError",
    "WorkerDiedError",
    "batch",
    "buffered",
    "cache",
    "chain",
    "compose",
    "connect",
    "dist_reader",
    "firstn",
    "import_stream",
    "map_readers",
    "mix",
    "multiprocess_reader",
    "read_from",
    "reader",
    "shuffle",
    "start_master",
    "stop_master",
    "stream_reader",
    "write_to",
    "xmap_readers",
]

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
