"""A trainer's next task, leased and read in a background thread while the current one is consumed."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from datamount.readers.errors import MasterNotFoundError, MasterUnavailableError
from datamount.readers.master.actor import MasterClient
from datamount.readers.master.tasks import Lease, PassFinished, Wait

log = logging.getLogger(__name__)

#: First sleep while every remaining task of the pass is leased to others; each next one is twice as long.
FIRST_POLL = 0.005
#: Seconds a trainer that stops early waits for the master to take a task back (it expires otherwise).
RELEASE_TIMEOUT = 5.0

RowsOf = Callable[[int, int], Iterator[tuple[Any, ...]]]


@dataclass
class Fetched:
    """A leased task and its rows, read whole. ``lease`` is replaced when it is renewed."""

    lease: Lease
    rows: list[tuple[Any, ...]]


class PassOver(Exception):
    """The pass the trainer reads is over (raised by :meth:`TasksAhead.next`). ``joined`` is false when the trainer
    never got into a pass: the master had run them all."""

    def __init__(self, answer: PassFinished, joined: bool) -> None:
        super().__init__(f"pass {answer.pass_number} is over")
        self.answer = answer
        self.joined = joined


class TasksAhead:
    """One pass's tasks for one trainer: :meth:`next` hands over a leased task with its rows and at once starts
    leasing and reading the one after, so that the master's answer and the read overlap the consumption.

    A task whose read raises is reported failed and skipped. :meth:`close` stops the thread and gives back a task
    fetched but not handed over.
    """

    def __init__(self, client: MasterClient, rows_of: RowsOf, trainer: str, *, poll_interval: float) -> None:
        self.client = client
        self.rows_of = rows_of
        self.trainer = trainer
        self.poll_interval = poll_interval
        self.pass_number: int | None = None
        self._stop = threading.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="datamount-next-task")
        self._upcoming: Future[Fetched] | None = None

    def next(self) -> Fetched:
        """The next task of the pass, with its rows; raises :class:`PassOver` once the pass is over."""
        upcoming = self._upcoming or self._executor.submit(self._fetch)
        self._upcoming = None
        fetched = upcoming.result()
        self._upcoming = self._executor.submit(self._fetch)
        return fetched

    def renew_upcoming(self) -> None:
        """Renew the lease of a task already fetched but not handed over yet, so that it does not expire while the
        current task is consumed."""
        upcoming = self._upcoming
        if upcoming is not None and upcoming.done() and upcoming.exception() is None:
            fetched = upcoming.result()
            fetched.lease = self.client.renew(fetched.lease) or fetched.lease

    def close(self) -> None:
        """Stop fetching; give back the task fetched ahead, if any. Waits for a call in flight to the master."""
        self._stop.set()
        upcoming, self._upcoming = self._upcoming, None
        self._executor.shutdown(wait=True, cancel_futures=True)
        if upcoming is not None and not upcoming.cancelled() and upcoming.exception() is None:
            give_back(self.client, upcoming.result().lease)

    def _fetch(self) -> Fetched:
        pause = FIRST_POLL
        while not self._stop.is_set():
            answer = self.client.get_task(self.trainer, self.pass_number)
            if isinstance(answer, PassFinished):
                raise PassOver(answer, joined=self.pass_number is not None)
            self.pass_number = answer.pass_number
            if isinstance(answer, Wait):
                # The pass ends when the others finish their tasks: ask soon, then less and less often.
                self._stop.wait(max(min(answer.retry_after, pause), FIRST_POLL))
                pause = min(pause * 2, self.poll_interval)
                continue
            pause = FIRST_POLL
            rows = self._read(answer)
            if rows is not None:
                return Fetched(answer, rows)
        raise PassOver(PassFinished(self.pass_number or 0, final=False), joined=True)

    def _read(self, lease: Lease) -> list[tuple[Any, ...]] | None:
        task = lease.task
        try:
            return list(self.rows_of(task.start, task.stop))
        except Exception as exc:  # any read error: the master decides whether the task is tried again
            reason = f"{type(exc).__name__}: {exc}"
            log.warning("rows %d-%d of %s could not be read: %s", task.start, task.stop - 1, task.dataset, reason)
            self.client.fail(lease, reason)
            return None


def give_back(client: MasterClient, lease: Lease) -> None:
    """Return an unfinished task to the master; if it cannot be reached soon, the lease expires instead."""
    try:
        client.release(lease, timeout=RELEASE_TIMEOUT)
    except (MasterUnavailableError, MasterNotFoundError) as exc:
        log.warning(
            "task %d of %s was not given back (%s); its lease will expire", lease.task.id, lease.task.dataset, exc
        )
