"""Bounded, ordered concurrency: keep up to N requests (and B bytes) in flight, yield results in input order."""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def ordered_window(
    submit: Callable[[T], Future[R]],
    items: Iterable[T],
    *,
    max_in_flight: int,
    weight: Callable[[T], int] | None = None,
    max_weight: int | None = None,
) -> Iterator[tuple[T, R]]:
    """Yield ``(item, result)`` in the order of ``items`` while later items are already being fetched.

    At most ``max_in_flight`` futures are pending at once and, when ``weight`` is given, their summed weight stays
    under ``max_weight`` (one item alone may exceed it, so that a large object never deadlocks the window). The first
    failure is raised in order, as the consumer reaches it. When the consumer stops early, or a failure is raised,
    every pending future is cancelled and waited for, so nothing keeps running behind the caller's back.
    """
    if max_in_flight < 1:
        raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
    pending: collections.deque[tuple[T, Future[R], int]] = collections.deque()
    in_flight_weight = 0
    source = iter(items)
    held: object = _END  # an item taken from the source but not yet submitted (it did not fit)
    exhausted = False
    try:
        while True:
            while not exhausted and len(pending) < max_in_flight:
                item = held if held is not _END else next(source, _END)
                held = _END
                if item is _END:
                    exhausted = True
                    break
                w = weight(item) if weight is not None else 0  # type: ignore[arg-type]
                if pending and max_weight is not None and in_flight_weight + w > max_weight:
                    held = item
                    break
                pending.append((item, submit(item), w))  # type: ignore[arg-type]
                in_flight_weight += w
            if not pending:
                return
            item, future, w = pending.popleft()
            result = future.result()
            in_flight_weight -= w
            yield item, result
    finally:
        for _, future, _ in pending:
            future.cancel()
        for _, future, _ in pending:
            if not future.cancelled():
                with contextlib.suppress(BaseException):
                    future.exception()


_END = object()
