"""The task queue of the dynamic task master: one dataset version cut into tasks, handed out on leases, pass after pass.

Plain Python, no Ray: :mod:`.actor` keeps one inside a Ray actor, and the tests drive it directly.

Within a pass every task is in exactly one of four states:

- **todo**: waiting to be handed out;
- **pending**: leased to one trainer until a deadline;
- **done**: a trainer reported it finished;
- **failed**: it failed (a reported read error, or a lease that expired) more than ``max_failures`` times.

An expired lease and a reported failure both send the task back to the end of todo and count as one failure. When
every task is done or failed, the next pass starts with every task in todo again (in a new order when a shuffle seed
is set), until ``passes`` passes have run.

Delivery is at-least-once. A trainer whose lease expired may still be reading the rows while another trainer reads
them again, and a master restored from a snapshot hands out again what it had not yet recorded. The rules for a late
report are fixed: :meth:`TaskQueue.finish` is accepted from any lease of the current pass while the task is not
done (its rows were delivered; the task becomes done even if it was since leased to another trainer, whose own
finish is then ignored); :meth:`TaskQueue.fail`, :meth:`TaskQueue.renew` and :meth:`TaskQueue.release` count only
from the task's current lease, so a trainer that lost its lease cannot fail or hold a task someone else now has.
"""

from __future__ import annotations

import json
import random
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from datamount.readers.errors import TaskQueueSnapshotError
from datamount.storage import arguments

SNAPSHOT_FORMAT = "datamount.task-queue"
SNAPSHOT_VERSION = 1

Clock = Callable[[], float]


@dataclass(frozen=True)
class Task:
    """Rows ``start`` to ``stop - 1`` of dataset version ``dataset`` (``name@N``); ``id`` is its place in the
    version's span list."""

    id: int
    dataset: str
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Lease:
    """A task handed to ``owner`` for pass ``pass_number`` until ``deadline`` (the master's clock, seconds since the
    epoch); ``timeout`` is the lease's length, ``token`` tells this lease from earlier ones of the same task."""

    task: Task
    pass_number: int
    owner: str
    deadline: float
    timeout: float
    token: str


@dataclass(frozen=True)
class Wait:
    """No task is free now but pass ``pass_number`` is not over: ask again within ``retry_after`` seconds (when the
    first pending lease expires)."""

    pass_number: int
    retry_after: float


@dataclass(frozen=True)
class PassFinished:
    """Pass ``pass_number`` is over. ``final``: no pass follows (the master has run all its passes)."""

    pass_number: int
    final: bool


#: What :meth:`TaskQueue.get_task` answers.
Answer = Lease | Wait | PassFinished


@dataclass
class TaskRecord:
    """What happened to one task in the current pass."""

    leases: int = 0
    expired: int = 0
    failed_reads: int = 0
    reason: str = ""

    @property
    def failures(self) -> int:
        return self.expired + self.failed_reads


@dataclass(frozen=True)
class TaskReport:
    """A task with a history in the current pass: leased more than once, failed, or expired."""

    task: Task
    state: str
    leases: int
    expired: int
    failed_reads: int
    reason: str


@dataclass(frozen=True)
class QueueStatus:
    """The state of a queue: counts per state, the pending leases, and every task that needed more than one try."""

    dataset: str
    tasks: int
    pass_number: int
    passes: int | None
    finished: bool
    todo: int
    pending: int
    done: int
    failed: int
    leases: tuple[Lease, ...]
    troubled: tuple[TaskReport, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (``datamount tasks --json``)."""
        return {
            "dataset": self.dataset,
            "tasks": self.tasks,
            "pass": self.pass_number,
            "passes": self.passes,
            "finished": self.finished,
            "todo": self.todo,
            "pending": self.pending,
            "done": self.done,
            "failed": self.failed,
            "leases": [
                {
                    "task": x.task.id,
                    "start": x.task.start,
                    "stop": x.task.stop,
                    "owner": x.owner,
                    "deadline": x.deadline,
                }
                for x in self.leases
            ],
            "troubled": [
                {
                    "task": r.task.id,
                    "start": r.task.start,
                    "stop": r.task.stop,
                    "state": r.state,
                    "leases": r.leases,
                    "expired": r.expired,
                    "failed_reads": r.failed_reads,
                    "reason": r.reason,
                }
                for r in self.troubled
            ],
        }


class TaskQueue:
    """Tasks of one dataset version in todo / pending / done / failed, per pass.

    Parameters
    ----------
    dataset
        The version the tasks read, pinned: ``name@N``.
    spans
        Each task's rows as ``(start, stop)`` (or ``range``), in the version's order; at least one.
    lease_timeout
        Seconds a lease lasts unless renewed.
    max_failures
        Failures (expired leases and reported read errors) a task may have in a pass and still be handed out again;
        one more and it is failed for that pass. ``0``: the first failure is final.
    passes
        Passes to run; ``None`` for no limit.
    shuffle_seed
        ``None``: tasks are handed out in row order. An integer: each pass in its own order, drawn from
        ``random.Random(f"{seed}:{pass}")``, so a restarted job repeats it.
    clock
        Wall-clock time in seconds (``time.time``); leases outlive a master process, so a monotonic clock would not do.
    """

    def __init__(
        self,
        dataset: str,
        spans: Sequence[tuple[int, int]] | Sequence[range],
        *,
        lease_timeout: float = 60.0,
        max_failures: int = 3,
        passes: int | None = None,
        shuffle_seed: int | None = None,
        clock: Clock = time.time,
    ) -> None:
        _check_options(lease_timeout, max_failures, passes, shuffle_seed)
        self.tasks = _tasks(dataset, spans)
        self._spans = [[task.start, task.stop] for task in self.tasks]
        self.dataset = dataset
        self.lease_timeout = float(lease_timeout)
        self.max_failures = max_failures
        self.passes = passes
        self.shuffle_seed = shuffle_seed
        self._clock = clock
        #: Bumped by every change of state, so that an owner knows when to snapshot.
        self.changes = 0
        self.pass_number = 0
        self.finished = False
        self._todo: deque[int] = deque()
        self._pending: dict[int, Lease] = {}
        self._done: set[int] = set()
        self._failed: set[int] = set()
        self._records: dict[int, TaskRecord] = {}
        self._start_pass(1)

    # -- the trainer's calls ---------------------------------------------------------------------------------------

    def get_task(self, trainer: str, pass_number: int | None = None) -> Answer:
        """A lease on the next task of the current pass for ``trainer``, else :class:`Wait` or :class:`PassFinished`.

        ``pass_number`` is the pass the trainer is reading (``None``: it is starting one, so it joins the current
        pass). Once that pass is over the answer is :class:`PassFinished`, even if the next pass has tasks. A
        trainer ahead of the queue (a master restored from a snapshot older than the trainer's last answer) joins
        the queue's current pass: what it reads again is the at-least-once part.
        """
        self._expire_leases()
        if pass_number is not None and pass_number > self.pass_number:
            pass_number = None
        if self.finished or (pass_number is not None and pass_number < self.pass_number):
            return PassFinished(self.pass_number if pass_number is None else pass_number, final=self.finished)
        if self._todo:
            return self._lease(self._todo.popleft(), trainer)
        earliest = min(lease.deadline for lease in self._pending.values())
        return Wait(self.pass_number, retry_after=max(0.0, earliest - self._clock()))

    def finish(self, lease: Lease) -> bool:
        """Record ``lease``'s task as done; ``False`` when nothing changed (another pass, or the task already done)."""
        self._check_lease(lease)
        self._expire_leases()
        task_id = lease.task.id
        if lease.pass_number != self.pass_number or self.finished or task_id in self._done:
            return False
        if self._pending.pop(task_id, None) is None and task_id not in self._failed:
            # A late finish of an expired lease whose task waits in todo again: rare, so a linear removal is fine.
            self._todo.remove(task_id)
        self._failed.discard(task_id)
        self._done.add(task_id)
        self._changed()
        self._next_pass_if_over()
        return True

    def fail(self, lease: Lease, reason: str) -> bool:
        """Record that reading ``lease``'s task failed: back to todo, or to failed past ``max_failures``.

        ``False`` when ``lease`` is no longer the task's current lease (it expired, so its failure is counted).
        """
        if not self._is_current(lease):
            return False
        del self._pending[lease.task.id]
        record = self._records[lease.task.id]
        record.failed_reads += 1
        record.reason = reason
        self._retry_or_give_up(lease.task.id)
        self._changed()
        self._next_pass_if_over()
        return True

    def renew(self, lease: Lease) -> Lease | None:
        """``lease`` with a new deadline ``lease_timeout`` from now; ``None`` when it is no longer current."""
        if not self._is_current(lease):
            return None
        renewed = Lease(
            lease.task,
            lease.pass_number,
            lease.owner,
            self._clock() + self.lease_timeout,
            self.lease_timeout,
            lease.token,
        )
        self._pending[lease.task.id] = renewed
        self._changed()
        return renewed

    def release(self, lease: Lease) -> bool:
        """Give ``lease``'s task back unread (the trainer stopped early): first in todo, no failure counted."""
        if not self._is_current(lease):
            return False
        del self._pending[lease.task.id]
        self._todo.appendleft(lease.task.id)
        self._changed()
        return True

    # -- state -----------------------------------------------------------------------------------------------------

    def status(self) -> QueueStatus:
        """Counts, pending leases (soonest deadline first) and the current pass's troubled tasks."""
        self._expire_leases()
        troubled = []
        for task_id, record in sorted(self._records.items()):
            if record.leases > 1 or record.failures or task_id in self._failed:
                troubled.append(
                    TaskReport(
                        self.tasks[task_id],
                        self._state_of(task_id),
                        record.leases,
                        record.expired,
                        record.failed_reads,
                        record.reason,
                    )
                )
        return QueueStatus(
            dataset=self.dataset,
            tasks=len(self.tasks),
            pass_number=self.pass_number,
            passes=self.passes,
            finished=self.finished,
            todo=len(self._todo),
            pending=len(self._pending),
            done=len(self._done),
            failed=len(self._failed),
            leases=tuple(sorted(self._pending.values(), key=lambda lease: (lease.deadline, lease.task.id))),
            troubled=tuple(troubled),
        )

    def state_of(self, task_id: int) -> str:
        """``"todo"``, ``"pending"``, ``"done"`` or ``"failed"``: where task ``task_id`` is in the current pass."""
        self._expire_leases()
        return self._state_of(task_id)

    def _state_of(self, task_id: int) -> str:
        if task_id in self._done:
            return "done"
        if task_id in self._failed:
            return "failed"
        return "pending" if task_id in self._pending else "todo"

    # -- snapshots -------------------------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to continue this queue elsewhere, as JSON-ready values."""
        return {
            "format": SNAPSHOT_FORMAT,
            "format_version": SNAPSHOT_VERSION,
            "dataset": self.dataset,
            "spans": self._spans,
            "lease_timeout": self.lease_timeout,
            "max_failures": self.max_failures,
            "passes": self.passes,
            "shuffle_seed": self.shuffle_seed,
            "pass_number": self.pass_number,
            "finished": self.finished,
            "todo": list(self._todo),
            "pending": [[x.task.id, x.owner, x.deadline, x.token] for x in self._pending.values()],
            "done": sorted(self._done),
            "failed": sorted(self._failed),
            # Only the tasks with a history worth keeping: leased more than once, or failed.
            "records": sorted(
                [i, r.leases, r.expired, r.failed_reads, r.reason]
                for i, r in self._records.items()
                if r.leases > 1 or r.failures or r.reason
            ),
        }

    def to_json(self) -> bytes:
        return json.dumps(self.snapshot(), separators=(",", ":")).encode()

    @classmethod
    def from_snapshot(cls, body: dict[str, Any], *, where: str = "the snapshot", clock: Clock = time.time) -> TaskQueue:
        """The queue a :meth:`snapshot` describes, its leases with their deadlines; ``where`` names it in errors."""
        if not isinstance(body, dict) or body.get("format") != SNAPSHOT_FORMAT:
            raise TaskQueueSnapshotError(f"{where} is not a task queue snapshot")
        if body.get("format_version", 0) > SNAPSHOT_VERSION:
            raise TaskQueueSnapshotError(
                f"{where} was written by a newer datamount (format {body['format_version']}); upgrade datamount"
            )
        try:
            queue = cls(
                body["dataset"],
                [(int(start), int(stop)) for start, stop in body["spans"]],
                lease_timeout=body["lease_timeout"],
                max_failures=body["max_failures"],
                passes=body["passes"],
                shuffle_seed=body["shuffle_seed"],
                clock=clock,
            )
            queue._restore(body)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise TaskQueueSnapshotError(f"{where} is damaged: {exc}") from exc
        return queue

    @classmethod
    def from_json(cls, data: bytes, where: str, *, clock: Clock = time.time) -> TaskQueue:
        """The queue saved by :meth:`to_json`; ``where`` names the snapshot in errors."""
        try:
            body = json.loads(data)
        except ValueError as exc:
            raise TaskQueueSnapshotError(f"{where} is damaged: {exc}") from exc
        return cls.from_snapshot(body, where=where, clock=clock)

    def _restore(self, body: dict[str, Any]) -> None:
        self.pass_number = int(body["pass_number"])
        self.finished = bool(body["finished"])
        self._todo = deque(int(task_id) for task_id in body["todo"])
        self._pending = {}
        for task_id, owner, deadline, token in body["pending"]:
            task = self.tasks[int(task_id)]
            self._pending[task.id] = Lease(task, self.pass_number, owner, float(deadline), self.lease_timeout, token)
        self._done = {int(task_id) for task_id in body["done"]}
        self._failed = {int(task_id) for task_id in body["failed"]}
        placed = [*self._todo, *self._pending, *self._done, *self._failed]
        if sorted(placed) != list(range(len(self.tasks))):
            raise ValueError("its todo, pending, done and failed tasks do not hold every task exactly once")
        self._records = {task_id: TaskRecord() for task_id in range(len(self.tasks))}
        for task_id in (*self._pending, *self._done, *self._failed):
            self._records[task_id].leases = 1
        for task_id, leases, expired, failed, reason in body["records"]:
            self._records[int(task_id)] = TaskRecord(int(leases), int(expired), int(failed), str(reason))

    # -- inner workings --------------------------------------------------------------------------------------------

    def _start_pass(self, number: int) -> None:
        order = list(range(len(self.tasks)))
        if self.shuffle_seed is not None:
            random.Random(f"{self.shuffle_seed}:{number}").shuffle(order)
        self.pass_number = number
        self._todo = deque(order)
        self._pending = {}
        self._done = set()
        self._failed = set()
        self._records = {task_id: TaskRecord() for task_id in order}
        self._changed()

    def _next_pass_if_over(self) -> None:
        if len(self._done) + len(self._failed) < len(self.tasks):
            return
        if self.passes is not None and self.pass_number >= self.passes:
            self.finished = True
            self._changed()
            return
        self._start_pass(self.pass_number + 1)

    def _lease(self, task_id: int, trainer: str) -> Lease:
        lease = Lease(
            self.tasks[task_id],
            self.pass_number,
            trainer,
            self._clock() + self.lease_timeout,
            self.lease_timeout,
            secrets.token_hex(8),
        )
        self._pending[task_id] = lease
        self._records[task_id].leases += 1
        self._changed()
        return lease

    def _expire_leases(self) -> None:
        now = self._clock()
        expired = sorted((lease for lease in self._pending.values() if lease.deadline <= now), key=_by_deadline)
        for lease in expired:
            del self._pending[lease.task.id]
            record = self._records[lease.task.id]
            record.expired += 1
            record.reason = f"the lease of {lease.owner} expired"
            self._retry_or_give_up(lease.task.id)
        if expired:
            self._changed()
            self._next_pass_if_over()

    def _retry_or_give_up(self, task_id: int) -> None:
        if self._records[task_id].failures > self.max_failures:
            self._failed.add(task_id)
        else:
            self._todo.append(task_id)

    def _is_current(self, lease: Lease) -> bool:
        self._check_lease(lease)
        self._expire_leases()
        current = self._pending.get(lease.task.id)
        return current is not None and current.token == lease.token and lease.pass_number == self.pass_number

    def _check_lease(self, lease: Lease) -> None:
        task = lease.task
        if task.dataset != self.dataset or not 0 <= task.id < len(self.tasks) or self.tasks[task.id] != task:
            raise ValueError(f"{task} is not a task of this queue ({self.dataset}, {len(self.tasks)} tasks)")

    def _changed(self) -> None:
        self.changes += 1


def _by_deadline(lease: Lease) -> tuple[float, int]:
    return (lease.deadline, lease.task.id)


def _tasks(dataset: str, spans: Iterable[tuple[int, int]] | Iterable[range]) -> list[Task]:
    tasks = []
    for number, span in enumerate(spans):
        start, stop = (span.start, span.stop) if isinstance(span, range) else span
        if not 0 <= start < stop:
            raise ValueError(f"span {number} of {dataset} is empty or negative: rows {start} to {stop}")
        tasks.append(Task(number, dataset, int(start), int(stop)))
    if not tasks:
        raise ValueError(f"{dataset} has no rows: there is nothing to hand out")
    return tasks


def _check_options(lease_timeout: float, max_failures: int, passes: int | None, seed: int | None) -> None:
    arguments.positive_number(lease_timeout, "lease_timeout (seconds)")
    arguments.whole_number(max_failures, "max_failures", minimum=0)
    if passes is not None:
        arguments.whole_number(passes, "passes (or None: no limit)", minimum=1)
    if seed is not None:
        arguments.whole_number(seed, "shuffle_seed (or None)")
