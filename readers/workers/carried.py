"""What a worker sends besides its items: the end marker, or the exception that stopped it with its traceback text."""

from __future__ import annotations

import pickle
import traceback
from dataclasses import dataclass


@dataclass(frozen=True)
class EndOfStream:
    """Marks the end of what one worker sends; compared with ``is``, never ``==`` (an item may be a numpy array)."""

    def __reduce__(self) -> str:
        # Pickled by reference, so the one instance is still the one instance in another process.
        return "END_OF_STREAM"


END_OF_STREAM = EndOfStream()


class RemoteTraceback(Exception):
    """Holds the formatted traceback of an exception raised in a worker; set as the re-raised error's cause."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n\n" + self.text


@dataclass(frozen=True)
class CarriedException:
    """An exception caught in a worker, ready to cross a queue or a pipe and be raised again in the consumer.

    Between threads the exception object itself travels. Across processes it travels when it pickles; otherwise a
    ``RuntimeError`` naming its type and message stands in for it. Either way the worker's traceback text is
    attached as ``__cause__`` (a :class:`RemoteTraceback`), as :mod:`concurrent.futures` does for process pools.
    """

    exception: BaseException
    traceback_text: str
    where: str

    @classmethod
    def capture(cls, exc: BaseException, where: str) -> CarriedException:
        """Wrap ``exc`` (call from inside the ``except`` block of the worker)."""
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        # The text keeps the worker's frames; the exception must not keep them (and their samples) alive.
        exc.__traceback__ = None
        return cls(exc, text, where)

    def __reduce__(self) -> tuple[type[CarriedException], tuple[BaseException, str, str]]:
        return (CarriedException, (_picklable(self.exception), self.traceback_text, self.where))

    def reraise(self) -> None:
        """Raise the carried exception in the current thread, its worker traceback chained as the cause."""
        raise self.exception from RemoteTraceback(f"in {self.where}:\n{self.traceback_text}")


def _picklable(exc: BaseException) -> BaseException:
    """``exc`` if it survives a pickle round trip, else a ``RuntimeError`` that names it."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")
    return exc
