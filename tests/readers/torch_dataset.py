"""A PyTorch ``IterableDataset`` over a reader, importable by DataLoader workers (imported only where torch is)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from torch.utils.data import IterableDataset


class ReaderDataset(IterableDataset):  # type: ignore[misc]
    """Each iteration is one pass of ``reader``; in a DataLoader worker the reader reads that worker's part."""

    def __init__(self, reader: Callable[[], Iterable[Any]]) -> None:
        self.reader = reader

    def __iter__(self) -> Iterator[Any]:
        return iter(self.reader())
