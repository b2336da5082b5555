"""What the mount remembers about files it may never hear of again (a read-ahead window's files, pushes waiting for
the kernel to know a file), kept for the last so many only: its memory does not grow with the files a long walk
meets."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

Key = TypeVar("Key")
Value = TypeVar("Value")


class Recent(Generic[Key, Value]):
    """A mapping of at most ``limit`` keys: adding one more drops the one added (or replaced) longest ago."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a limit of {limit} keeps nothing")
        self.limit = limit
        self._items: OrderedDict[Key, Value] = OrderedDict()

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __setitem__(self, key: Key, value: Value) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.limit:
            self._items.popitem(last=False)

    def get(self, key: Key) -> Value | None:
        return self._items.get(key)

    def pop(self, key: Key) -> Value | None:
        return self._items.pop(key, None)
