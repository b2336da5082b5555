"""A pass that begins its first item at once, in a thread."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

from datamount.datasets.rows.chain import ClosingChain, close_iterator

T = TypeVar("T")


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
