"""The one producer loop every worker runs: read a source, emit each item, then the end marker or the error."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from datamount.datasets.rows.chain import close_iterator
from datamount.readers.workers.carried import END_OF_STREAM, CarriedException

Emit = Callable[[object], bool]
"""Sends one item to the consumer; returns False once the consumer has asked the worker to stop or is gone."""


def produce(
    source: Callable[[], Iterable[Any]],
    emit: Emit,
    where: str,
    *,
    carry: type[BaseException] = BaseException,
) -> None:
    """Emit every item of one pass of ``source``, then :data:`END_OF_STREAM`, or the error as a
    :class:`CarriedException` naming ``where``.

    Stops as soon as ``emit`` returns False. The iterator is closed before the end marker or the error is sent, and
    when the loop stops early, so the source's ``finally`` blocks have run by then. A thread carries every exception
    to its consumer; a worker process passes ``carry=Exception``, so that ``SystemExit`` ends it with its exit code,
    which the consumer reports.
    """
    try:
        iterator = iter(source())
        try:
            for item in iterator:
                if not emit(item):
                    return
        finally:
            close_iterator(iterator)
    except carry as exc:
        emit(CarriedException.capture(exc, where))
        return
    emit(END_OF_STREAM)
