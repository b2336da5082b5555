"""The task master's queue, without Ray: leases, expiry, failures, passes, late reports, snapshots."""

from __future__ import annotations

import json

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from datamount.readers.errors import TaskQueueSnapshotError
from datamount.readers.master import Lease, PassFinished, TaskQueue, Wait

DATASET = "d@1"


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_queue(tasks: int = 4, clock: Clock | None = None, **options: object) -> TaskQueue:
    spans = [(10 * i, 10 * i + 10) for i in range(tasks)]
    return TaskQueue(DATASET, spans, clock=clock or Clock(), **options)  # type: ignore[arg-type]


def take(queue: TaskQueue, trainer: str = "t", pass_number: int | None = None) -> Lease:
    answer = queue.get_task(trainer, pass_number)
    assert isinstance(answer, Lease), answer
    return answer


def test_one_trainer_reads_a_pass_in_row_order_then_the_next_pass_starts() -> None:
    queue = make_queue(3)
    leases = [take(queue) for _ in range(3)]
    assert [(x.task.start, x.task.stop) for x in leases] == [(0, 10), (10, 20), (20, 30)]
    assert {x.pass_number for x in leases} == {1}
    assert isinstance(queue.get_task("t", 1), Wait)
    for lease in leases:
        assert queue.finish(lease)
    assert queue.pass_number == 2
    assert queue.get_task("t", 1) == PassFinished(1, final=False)
    assert take(queue, pass_number=2).task.id == 0


def test_a_trainer_starting_a_pass_joins_the_current_one() -> None:
    queue = make_queue(2)
    first = take(queue, "a")
    answer = queue.get_task("b")
    assert isinstance(answer, Lease) and answer.pass_number == first.pass_number == 1
    assert queue.get_task("c") == Wait(1, retry_after=60.0)


def test_wait_says_when_the_first_lease_expires() -> None:
    clock = Clock()
    queue = make_queue(2, clock, lease_timeout=30)
    take(queue)
    clock.now += 10
    take(queue)
    clock.now += 5
    assert queue.get_task("x", 1) == Wait(1, retry_after=15.0)


def test_an_expired_lease_goes_back_to_todo_and_counts_as_a_failure() -> None:
    clock = Clock()
    queue = make_queue(2, clock, lease_timeout=10)
    lost = take(queue, "dead")
    clock.now += 10
    assert [take(queue, "alive").task.id for _ in range(2)] == [1, lost.task.id]
    status = queue.status()
    [report] = [r for r in status.troubled if r.task == lost.task]
    assert (report.leases, report.expired, report.failed_reads) == (2, 1, 0)
    assert "dead" in report.reason


def test_past_max_failures_a_task_is_failed_and_the_pass_still_ends() -> None:
    queue = make_queue(2, max_failures=1)
    good = take(queue)
    for attempt in range(2):
        bad = take(queue)
        assert bad.task.id == 1
        assert queue.fail(bad, f"broken {attempt}")
    assert queue.state_of(1) == "failed"
    assert queue.finish(good)
    assert queue.pass_number == 2
    assert queue.state_of(1) == "todo"


def test_max_failures_zero_gives_up_at_the_first_failure() -> None:
    queue = make_queue(1, max_failures=0, passes=1)
    assert queue.fail(take(queue), "no such object")
    status = queue.status()
    assert (status.failed, status.finished) == (1, True)
    assert status.troubled[0].reason == "no such object"


def test_a_late_finish_is_accepted_while_the_task_is_not_done_and_the_new_holder_loses_it() -> None:
    clock = Clock()
    queue = make_queue(2, clock, lease_timeout=10)
    stale = take(queue, "slow")
    clock.now += 5
    take(queue, "other")
    clock.now += 5
    fresh = take(queue, "fast")
    assert fresh.task == stale.task
    assert queue.finish(stale)
    assert queue.state_of(stale.task.id) == "done"
    assert not queue.finish(fresh)
    assert queue.renew(fresh) is None
    assert not queue.fail(fresh, "too late")
    assert not queue.release(fresh)


def test_a_stale_lease_cannot_fail_renew_or_release_the_task() -> None:
    clock = Clock()
    queue = make_queue(1, clock, lease_timeout=10)
    stale = take(queue, "slow")
    clock.now += 10
    current = take(queue, "fast")
    assert not queue.fail(stale, "late failure")
    assert queue.renew(stale) is None
    assert not queue.release(stale)
    assert queue.state_of(current.task.id) == "pending"
    assert queue.status().troubled[0].failed_reads == 0


def test_a_trainer_ahead_of_a_restored_queue_joins_its_current_pass() -> None:
    queue = make_queue(2)
    older = TaskQueue.from_json(queue.to_json(), "snapshot", clock=Clock())
    for lease in [take(queue), take(queue)]:
        queue.finish(lease)
    ahead = take(queue, pass_number=2)
    again = older.get_task("t", ahead.pass_number)
    assert isinstance(again, Lease) and again.pass_number == 1
    assert not older.finish(ahead)


def test_finish_of_an_earlier_pass_is_ignored() -> None:
    clock = Clock()
    queue = make_queue(1, clock, lease_timeout=10, max_failures=0)
    stale = take(queue)
    clock.now += 10
    assert queue.status().pass_number == 2
    assert not queue.finish(stale)
    assert queue.state_of(0) == "todo"


def test_renew_moves_the_deadline_and_keeps_the_lease() -> None:
    clock = Clock()
    queue = make_queue(1, clock, lease_timeout=10)
    lease = take(queue)
    clock.now += 8
    renewed = queue.renew(lease)
    assert renewed is not None and renewed.deadline == clock.now + 10 and renewed.token == lease.token
    clock.now += 8
    assert queue.state_of(0) == "pending"
    assert queue.finish(lease)


def test_release_puts_the_task_first_without_a_failure() -> None:
    queue = make_queue(3)
    first = take(queue)
    assert queue.release(first)
    again = take(queue)
    assert again.task == first.task
    assert queue.status().troubled[0].failed_reads == queue.status().troubled[0].expired == 0


def test_passes_are_limited_and_then_every_answer_is_final() -> None:
    queue = make_queue(1, passes=2)
    assert queue.finish(take(queue))
    assert queue.finish(take(queue))
    assert queue.finished
    assert queue.get_task("t") == PassFinished(2, final=True)
    assert queue.get_task("t", 1) == PassFinished(1, final=True)


@pytest.mark.parametrize("seed", [0, 7, 12345])
def test_a_seed_shuffles_each_pass_its_own_way_and_repeatably(seed: int) -> None:
    def orders(queue: TaskQueue, passes: int) -> list[list[int]]:
        found = []
        for _ in range(passes):
            leases = [take(queue) for _ in range(len(queue.tasks))]
            found.append([lease.task.id for lease in leases])
            for lease in leases:
                queue.finish(lease)
        return found

    first = orders(make_queue(20, shuffle_seed=seed), 3)
    assert first == orders(make_queue(20, shuffle_seed=seed), 3)
    assert all(sorted(order) == list(range(20)) for order in first)
    assert len({tuple(order) for order in first}) == 3
    assert orders(make_queue(20), 1) == [list(range(20))]


def test_a_snapshot_continues_where_the_queue_stood() -> None:
    clock = Clock()
    queue = make_queue(5, clock, lease_timeout=10, max_failures=2, shuffle_seed=3)
    done = take(queue, "a")
    queue.finish(done)
    held = take(queue, "b")
    failed = take(queue, "c")
    queue.fail(failed, "disk error")
    restored = TaskQueue.from_json(queue.to_json(), "snapshot.json", clock=clock)
    assert restored.status() == queue.status()
    assert restored.finish(held)
    clock.now += 10
    assert restored.status().pending == 0
    remaining = [take(restored) for _ in range(3)]
    assert sorted(lease.task.id for lease in remaining) == sorted(set(range(5)) - {done.task.id, held.task.id})


def test_a_damaged_or_newer_snapshot_is_refused_with_its_name() -> None:
    body = make_queue(2).snapshot()
    with pytest.raises(TaskQueueSnapshotError, match=r"masters/x\.json is damaged"):
        TaskQueue.from_json(b'{"format": "datamount.task-queue", "spans": ', "masters/x.json")
    with pytest.raises(TaskQueueSnapshotError, match="newer datamount"):
        TaskQueue.from_snapshot({**body, "format_version": 99})
    with pytest.raises(TaskQueueSnapshotError, match="exactly once"):
        TaskQueue.from_snapshot({**body, "done": [0]})
    with pytest.raises(TaskQueueSnapshotError, match="not a task queue snapshot"):
        TaskQueue.from_json(json.dumps({"format": "other"}).encode(), "x")


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"lease_timeout": 0}, ValueError, "lease_timeout"),
        ({"max_failures": -1}, ValueError, "max_failures"),
        ({"max_failures": True}, TypeError, "max_failures"),
        ({"passes": 0}, ValueError, "passes"),
        ({"shuffle_seed": "x"}, TypeError, "shuffle_seed"),
    ],
    ids=["lease", "failures", "failures-bool", "passes", "seed"],
)
def test_bad_options_are_refused_naming_the_option(
    options: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        make_queue(2, **options)


def test_a_dataset_without_rows_or_with_an_empty_span_is_refused() -> None:
    with pytest.raises(ValueError, match="no rows"):
        TaskQueue(DATASET, [])
    with pytest.raises(ValueError, match="span 1"):
        TaskQueue(DATASET, [(0, 5), (5, 5)])
    with pytest.raises(ValueError, match="not a task of this queue"):
        make_queue(2).finish(take(TaskQueue("other@1", [(0, 10)])))


class QueueMachine(RuleBasedStateMachine):
    """Trainers take, finish, fail, renew and give back tasks while time passes and the queue is snapshotted and
    restored; the states stay a partition and every report follows the documented rules."""

    leases = Bundle("leases")

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.queue = make_queue(3, self.clock, lease_timeout=10, max_failures=1, passes=2, shuffle_seed=1)
        self.finished_by_us: set[int] = set()
        self.last_pass = 1

    def _note_pass(self) -> None:
        if self.queue.pass_number != self.last_pass:
            self.finished_by_us.clear()
            self.last_pass = self.queue.pass_number

    @rule(target=leases, trainer=st.sampled_from(["a", "b", "c"]), current=st.booleans())
    def get_task(self, trainer: str, current: bool) -> Lease | None:
        answer = self.queue.get_task(trainer, self.queue.pass_number if current else None)
        self._note_pass()
        if isinstance(answer, Lease):
            assert answer.pass_number == self.queue.pass_number
            assert self.queue.state_of(answer.task.id) == "pending"
            return answer
        if isinstance(answer, Wait):
            assert self.queue.status().todo == 0 and self.queue.status().pending > 0
        else:
            assert answer.final == self.queue.finished
        return None

    @rule(lease=consumes(leases))
    def finish(self, lease: Lease | None) -> None:
        if lease is None:
            return
        was = self.queue.pass_number, self.queue.state_of(lease.task.id), self.queue.finished
        accepted = self.queue.finish(lease)
        assert accepted == (was[0] == lease.pass_number and was[1] != "done" and not was[2])
        if accepted and self.queue.pass_number == lease.pass_number:
            self.finished_by_us.add(lease.task.id)
        self._note_pass()

    @rule(lease=consumes(leases), reason=st.text(max_size=5))
    def fail(self, lease: Lease | None, reason: str) -> None:
        if lease is None:
            return
        current = [x.token for x in self.queue.status().leases if x.task.id == lease.task.id]
        assert self.queue.fail(lease, reason) == (current == [lease.token] and lease.pass_number == self.last_pass)
        self._note_pass()

    @rule(lease=consumes(leases))
    def release(self, lease: Lease | None) -> None:
        if lease is not None:
            self.queue.release(lease)
            self._note_pass()

    @rule(target=leases, lease=consumes(leases))
    def renew(self, lease: Lease | None) -> Lease | None:
        if lease is None:
            return None
        renewed = self.queue.renew(lease)
        self._note_pass()
        return renewed if renewed is not None else lease

    @rule(seconds=st.sampled_from([1.0, 5.0, 10.0, 30.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.now += seconds

    @rule()
    def restart_from_snapshot(self) -> None:
        before = self.queue.status()
        self.queue = TaskQueue.from_json(self.queue.to_json(), "snapshot", clock=self.clock)
        assert self.queue.status() == before

    @invariant()
    def states_partition_the_tasks(self) -> None:
        status = self.queue.status()
        self._note_pass()
        states = [self.queue.state_of(task.id) for task in self.queue.tasks]
        counts = {state: states.count(state) for state in ("todo", "pending", "done", "failed")}
        assert counts == {"todo": status.todo, "pending": status.pending, "done": status.done, "failed": status.failed}
        assert all(lease.deadline > self.clock.now for lease in status.leases)
        assert all(self.queue.state_of(task_id) == "done" for task_id in self.finished_by_us)
        if status.finished:
            assert status.pass_number == 2 and status.todo == status.pending == 0
        for report in status.troubled:
            if report.state == "failed":
                assert report.expired + report.failed_reads > self.queue.max_failures


TestQueueMachine = pytest.mark.slow(QueueMachine.TestCase)
TestQueueMachine.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)
