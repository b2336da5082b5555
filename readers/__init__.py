"""How samples reach training: ``reader(name)``, Paddle-compatible reader decorators and the DataLoader."""

from datamount.readers.errors import ComposeNotAligned, NotPicklableError, SharedMemoryError, WorkerDiedError

__all__ = [
    "ComposeNotAligned",
    "NotPicklableError",
    "SharedMemoryError",
    "WorkerDiedError",
]
