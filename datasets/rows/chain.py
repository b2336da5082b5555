"""Iterators that hand out rows with C code only and can still be closed: a pass made of blocks."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar, cast

T = TypeVar("T")


def close_iterator(iterator: object) -> None:
    """Close ``iterator`` if it can be closed (a generator), so that the reader's ``finally`` blocks run now."""
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


class ClosingChain(itertools.chain[T]):
    """The items of each iterable of ``pieces``, handed out by ``itertools.chain``'s C code (no Python frame per
    item), and a :meth:`close` that ends them (a generator's ``close`` runs its ``finally`` blocks)."""

    _on_close: Callable[[], None]

    @classmethod
    def of(cls, pieces: Iterator[Iterable[T]], *, on_close: Callable[[], None] | None = None) -> ClosingChain[T]:
        """Chain ``pieces``; :meth:`close` calls ``on_close`` (by default, closes ``pieces``)."""
        chain = cast("ClosingChain[T]", cls.from_iterable(pieces))
        chain._on_close = on_close or (lambda: close_iterator(pieces))
        return chain

    def close(self) -> None:
        self._on_close()
