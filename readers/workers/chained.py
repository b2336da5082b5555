"""Iterators that hand out items with C code only, and can still be closed: a pass made of pieces, and a pass that
begins its first item at once, in a thread."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar, cast

from datamount.readers.workers.produce import close_iterator

T = TypeVar("T")


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


def head_start(iterator: Iterator[T]) -> ClosingChain[T]:
    """``iterator``, its first item fetched in a thread of its own from now on.

    A pass's first item costs most (its first row group is asked for, read and decoded): passes started with a head
    start wait for those at the same time rather than one after another. The thread is a new one (no pool that a
    forked child could inherit without its threads), and ``iterator`` is advanced by one thread at a time: the head
    start's, then the caller's. Closing waits for the first item (a generator cannot be closed while it runs) and
    closes ``iterator``, even if nothing was taken.
    """
    first: Future[Any] = Future()

    def fetch_first() -> None:
        try:
            first.set_result(next(iterator, _END))
        except BaseException as exc:
            first.set_exception(exc)

    def pieces() -> Iterator[Iterable[T]]:
        item = first.result()
        if item is not _END:
            yield (item,)
            yield iterator

    def close() -> None:
        first.exception()  # waits until the head start is over (with an item, the end, or an error)
        close_iterator(chained_pieces)
        close_iterator(iterator)

    chained_pieces = pieces()
    threading.Thread(target=fetch_first, name="datamount-head-start", daemon=True).start()
    return ClosingChain.of(chained_pieces, on_close=close)


_END = object()
