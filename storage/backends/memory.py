"""fsspec's in-process memory filesystem: for tests and throwaway pipelines."""

from __future__ import annotations

from datamount.storage.store import Store


class MemoryStore(Store):
    """A store in this process's memory (``memory://name``); gone when the process ends.

    fsspec keeps one memory filesystem per process, so two stores with the same URL see the same objects.
    """

    protocol = "memory"
    shareable = False
    atomic_put = True  # an object is replaced in one assignment
    needs_dirs = False
    default_max_requests = 4

    def check(self) -> None:
        """Nothing to reach: a memory store is always there."""
