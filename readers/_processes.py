"""What the background machinery of decorators and the DataLoader shares: checks on readers, start methods,
closing iterators early, and describing how a worker process ended."""

from __future__ import annotations

import functools
import multiprocessing
import pickle
import queue
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from multiprocessing.reduction import ForkingPickler
from typing import Any

from datamount.readers.errors import NotPicklableError

#: How often a blocked put or get wakes up to check whether it should stop.
POLL_SECONDS = 0.1

#: Signals that usually have one cause, told to the user with the worker's death.
_SIGNAL_HINTS = {
    "SIGKILL": " (often the kernel's out-of-memory killer)",
    "SIGBUS": " (often /dev/shm running out of space)",
}


def check_reader(value: object, what: str) -> None:
    """Raise ``TypeError`` unless ``value`` is a reader (a zero-argument callable), naming the usual mistake."""
    if not callable(value):
        raise TypeError(
            f"{what} must be a reader (a zero-argument callable returning a fresh iterable each epoch), got "
            f"{type(value).__name__} {value!r}; pass the reader itself (`reader`), not its result (`reader()`)"
        )


def close_iterator(iterator: object) -> None:
    """Close ``iterator`` if it can be closed (a generator), so that the reader's ``finally`` blocks run now."""
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def put_until_stopped(channel: queue.Queue[Any], item: object, stop: threading.Event) -> bool:
    """Put ``item``, waiting while ``channel`` is full; False once ``stop`` is set (the consumer is gone)."""
    while not stop.is_set():
        try:
            channel.put(item, timeout=POLL_SECONDS)
            return True
        except queue.Full:
            pass
    return False


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


def walk_readers(reader: object) -> Iterator[object]:
    """``reader`` and every reader it decorates, each once: decorators are followed through their ``reader`` /
    ``readers`` attributes and the arguments of ``functools.partial``."""
    seen: set[int] = set()
    pending = [reader]
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, (list, tuple)):
            pending.extend(node)
            continue
        yield node
        if isinstance(node, functools.partial):
            pending.extend((node.func, *node.args, *node.keywords.values()))
        for name in ("reader", "readers"):
            child = getattr(node, name, None)
            if isinstance(child, (list, tuple)):
                pending.extend(child)
            elif child is not None:
                pending.append(child)


def advance_epochs(reader: object, by: int = 1) -> None:
    """Advance the per-epoch state of ``reader`` and of every reader it decorates, as ``by`` calls of it would.

    A worker process runs an epoch on its own copy of the reader, so state the epoch changes (the epoch number of
    ``shuffle`` and of a dataset reader, where a resumed dataset reader starts) would stay behind in this process
    and every epoch would repeat the first. The parent calls this once the worker has its copy, so the next worker
    starts where this one ends. Readers take part by having an ``_advance_epoch(by)`` method.
    """
    for node in walk_readers(reader):
        advance = getattr(node, "_advance_epoch", None)
        if callable(advance):
            advance(by)


def split_among_workers(readers: Sequence[Callable[[], Any]]) -> tuple[Callable[[], Any], ...]:
    """The readers of worker processes, each dataset reader that several of them contain split among those.

    A dataset reader (anything with a ``_worker_token`` and ``_assign_worker(index, count)``) found in the chains
    of ``k`` > 1 of ``readers`` is read in ``k`` parts, one per worker that holds it; copies of one reader keep its
    token, so they count as the same reader. A reader found in one worker only is read whole.
    """
    holders: dict[str, list[int]] = {}
    for index, reader in enumerate(readers):
        tokens = {getattr(node, "_worker_token", None) for node in walk_readers(reader)}
        for token in tokens:
            if isinstance(token, str):
                holders.setdefault(token, []).append(index)
    parts: list[dict[str, tuple[int, int]]] = [{} for _ in readers]
    for token, indices in holders.items():
        if len(indices) > 1:
            for part, index in enumerate(indices):
                parts[index][token] = (part, len(indices))
    return tuple(
        WorkerPart(reader, tuple(sorted(assigned.items()))) if assigned else reader
        for reader, assigned in zip(readers, parts, strict=True)
    )


@dataclass(frozen=True, eq=False)
class WorkerPart:
    """A worker's reader that tells the dataset readers in it which part of their share to read."""

    reader: Callable[[], Any]
    parts: tuple[tuple[str, tuple[int, int]], ...]

    def __call__(self) -> Any:
        # Runs in the worker, on its own copy of the chain: the assignment never reaches the parent's readers.
        wanted = dict(self.parts)
        for node in walk_readers(self.reader):
            token = getattr(node, "_worker_token", None)
            if isinstance(token, str) and token in wanted:
                node._assign_worker(*wanted[token])  # type: ignore[attr-defined]
        return self.reader()

    def __repr__(self) -> str:
        return repr(self.reader)


def exit_description(process: BaseProcess) -> str:
    """How ``process`` ended, for an error message: its exit code, or the signal that killed it and why."""
    code = process.exitcode
    if code is None:
        return "closed its pipe but is still running"
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = str(-code)
    return f"was killed by signal {name}{_SIGNAL_HINTS.get(name, '')}"
