"""How worker processes are started: the start method asked for, the one really used, and what must pickle."""

from __future__ import annotations

import multiprocessing
import pickle
from multiprocessing.context import BaseContext
from multiprocessing.reduction import ForkingPickler

from datamount.readers.errors import NotPicklableError


def start_method_of(mp_context: str | BaseContext | None) -> str | None:
    """The start method ``mp_context`` asks for; ``None`` means the interpreter's default, resolved when used."""
    if mp_context is None:
        return None
    if isinstance(mp_context, BaseContext):
        return mp_context.get_start_method()
    if isinstance(mp_context, str) and mp_context in multiprocessing.get_all_start_methods():
        return mp_context
    raise ValueError(
        f"mp_context must be None, a multiprocessing context or one of "
        f"{multiprocessing.get_all_start_methods()}, got {mp_context!r}"
    )


def effective_start_method(start_method: str | None) -> str:
    """The start method that will really be used, without fixing the global default as a side effect."""
    if start_method is not None:
        return start_method
    return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]


def require_picklable(value: object, what: str, method: str) -> None:
    """Under ``fork`` a worker inherits ``value``; other start methods pickle it, so check that it pickles now."""
    if method == "fork":
        return
    try:
        ForkingPickler.dumps(value)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise NotPicklableError(
            f"{what} must be pickled to start a worker with the {method!r} method, and it cannot be ({exc}). "
            "Make the reader a module-level function, a module-level class with __call__, a decorated reader or "
            "a functools.partial of one (lambdas, closures and generator objects do not pickle), or choose "
            "mp_context='fork' where it is available"
        ) from exc
