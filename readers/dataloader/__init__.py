"""``DataLoader``: Paddle's ``DataLoader.from_generator`` over numpy, prefetched by a thread or a worker process.

The loader and its arguments (``_loader``), one epoch and the thread or process that prefetches it (``_epochs``),
the worker process's side of the shared-memory hand-over (``_worker``, ``_shm``), and how samples become batches
(``_collate``).
"""

from datamount.readers.dataloader._loader import DataLoader

__all__ = ["DataLoader"]
