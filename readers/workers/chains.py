"""What the workers need to know of the reader chains they run: what a reader is, the readers a chain holds, the
per-epoch state a worker's copy leaves behind, and how dataset readers shared by several workers are split."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

Reader = Callable[[], Iterable[T]]
"""A zero-argument callable returning a fresh iterable of samples (one epoch) on each call."""


class EpochLock:
    """For readers whose per-epoch state a lock guards (``self._lock``): the lock stays out of their pickle, so that
    worker processes can take them, and each copy makes its own."""

    _lock: threading.Lock

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def check_reader(value: object, what: str) -> None:
    """Raise ``TypeError`` unless ``value`` is a reader (a zero-argument callable), naming the usual mistake."""
    if not callable(value):
        raise TypeError(
            f"{what} must be a reader (a zero-argument callable returning a fresh iterable each epoch), got "
            f"{type(value).__name__} {value!r}; pass the reader itself (`reader`), not its result (`reader()`)"
        )


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
