"""fsspec's in-process memory filesystem: for tests and throwaway pipelines."""

from __future__ import annotations

import threading
from typing import Any

from datamount.storage.backends._options import refuse_unknown
from datamount.storage.store import Store

#: One process's memory filesystem is shared by all its memory stores: one lock makes their creates exclusive.
_CREATE_LOCK = threading.Lock()


class MemoryStore(Store):
    """A store in this process's memory (``memory://name``); gone when the process ends.

    fsspec keeps one memory filesystem per process, so two stores with the same URL see the same objects.
    """

    protocol = "memory"
    shareable = False
    atomic_put = True  # an object is replaced in one assignment
    exclusive_create = True
    needs_dirs = False
    default_max_requests = 4

    @classmethod
    def from_url(cls, url: str, *, name: str | None = None, **options: Any) -> Store:
        refuse_unknown(options, (), store="memory")
        return super().from_url(url, name=name)

    def check(self) -> None:
        """Nothing to reach: a memory store is always there."""

    def _create(self, full: str, data: bytes) -> None:
        with _CREATE_LOCK:
            if self.fs.exists(full):
                raise FileExistsError(full)
            self.fs.pipe_file(full, data)
