"""The rows' numbers of a Ray write job: which write task holds which rows of the new version, and whether the job
still takes shards. A plain state machine; it runs as a Ray actor on the driver's node (``_write.py``), and is tested
without Ray.

Rules:

- A task asks for the numbers of its rows once it knows how many it has (:meth:`WriteTasks.claim`): the next free
  ones, in the order tasks ask. A task asked for again (Ray runs it once more after its worker or node was lost) gets
  the numbers it got the first time; with another count of rows it is refused (its input changed between attempts:
  the version's rows would no longer be numbered without a gap).
- A claim gives the task's columns and gets the job's: those of the first task that claimed, which every task casts
  its rows to where their values convert (blocks whose columns differ in type, as pandas makes them, give one).
- A task is *running* from its claim until it says it has ended (:meth:`WriteTasks.ended`), whatever its outcome.
- Once the job is closed (:meth:`WriteTasks.close`: it failed), a claim gets nothing: the task writes no shard.
  The driver removes the job's shards once no task is running (or after a bounded wait).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Claim:
    """The rows a write task holds: numbers ``first`` to ``first + rows - 1`` of the new version."""

    first: int
    rows: int


@dataclass
class WriteTasks:
    """What the write tasks of one job have claimed, and which are still running."""

    claims: dict[int, Claim] = field(default_factory=dict)
    running: set[int] = field(default_factory=set)
    open: bool = True
    #: The columns of the job's rows (a ``pyarrow.Schema``): the first claim's.
    schema: Any = None
    _next: int = 0

    def claim(self, task: int, rows: int, schema: Any = None) -> tuple[Claim, Any] | None:
        """The numbers of task ``task``'s ``rows`` rows (the same for every attempt of a task), and the job's columns
        (``schema``, the task's own, where it is the first to ask); ``None`` once the job is closed."""
        if not self.open:
            return None
        if self.schema is None:
            self.schema = schema
        held = self.claims.get(task)
        if held is not None and held.rows != rows:
            raise ValueError(
                f"write task {task} was run again with {rows:,} rows, not the {held.rows:,} of its first attempt: its "
                "input changed between attempts (a step before the write that is not deterministic); materialize the "
                "dataset (ds.materialize()) before writing it"
            )
        if held is None:
            held = self.claims[task] = Claim(self._next, rows)
            self._next += rows
        self.running.add(task)
        return held, self.schema

    def ended(self, task: int) -> None:
        """Task ``task`` wrote what it will write (or failed)."""
        self.running.discard(task)

    def close(self) -> None:
        """The job failed: no task may claim rows from now on."""
        self.open = False

    def still_running(self) -> list[int]:
        return sorted(self.running)

    def all_claims(self) -> dict[int, Claim]:
        return dict(self.claims)
