"""How samples reach training: ``reader(name)``, Paddle-compatible reader decorators and the DataLoader."""

from datamount.readers.dataloader import DataLoader
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
    NotPicklableError,
    ReaderStateError,
    SharedMemoryError,
    WorkerDiedError,
)
from datamount.readers.master import dist_reader

__all__ = [
    "ComposeNotAligned",
    "DataLoader",
    "DatasetReader",
    "DistributedConfigError",
    "NotPicklableError",
    "ReaderStateError",
    "SharedMemoryError",
    "WorkerDiedError",
    "batch",
    "buffered",
    "cache",
    "chain",
    "compose",
    "dist_reader",
    "firstn",
    "map_readers",
    "multiprocess_reader",
    "reader",
    "shuffle",
    "xmap_readers",
]
