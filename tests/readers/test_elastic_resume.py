"""Elastic resume, proven by the ledger: a job killed at random points and resumed under random topologies (1-8
ranks, 0-4 workers each) consumes every row of the epoch exactly once (``uneven``), at least once with fewer than
the world size repeated per topology (``pad``), or at most once with fewer than the last world size left out
(``drop``). Ranks and workers are reader copies in this process, as a loader's workers are (pickled copies, each
assigned its part); the ledger records the row numbers the loop received, not what the reader planned."""

from __future__ import annotations

import itertools
import json
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from datamount.cli.main import cli
from datamount.datasets.pack import pack
from datamount.datasets.upload import upload
from datamount.readers import ReaderStateError
from datamount.readers.dataset import DatasetReader, reader
from datamount.readers.ledger import Ledger, check
from datamount.storage import Store, open_store

ROWS = 97  # prime: every world size leaves a remainder
BATCH = 4


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """One store with the same 97 rows as ``packed`` (row groups of a few rows) and ``lines`` (spans of 5 lines)."""
    folder = tmp_path_factory.mktemp("elastic")
    opened = open_store(str(folder / "store"))
    listing = folder / "rows.list"
    listing.write_text("".join(f"s{i}\tt{i}\n" for i in range(ROWS)), encoding="utf-8")
    upload(listing, "packed", store=opened)
    pack("packed", store=opened, row_group_bytes=40, shard_bytes=400)
    upload(listing, "lines", store=opened)
    return opened


@dataclass
class Topology:
    ranks: int
    workers: int  # 0: the rank's loop reads the reader itself
    batches: int  # batches each rank takes before the job is killed (the last topology reads to the end)


@dataclass
class Job:
    """What survives a kill: the states saved at the last checkpoint and every ledger written so far."""

    states: list[dict[str, Any]] = field(default_factory=list)
    ledgers: list[Ledger] = field(default_factory=list)


def run(
    store: Store,
    name: str,
    options: dict[str, Any],
    topology: Topology,
    job: Job,
    *,
    to_the_end: bool,
    per_worker: bool,
    all_ranks: bool,
) -> int:
    """Run one topology from ``job``'s states until each rank took ``topology.batches`` batches (or its share
    ended); save the states and ledgers in ``job``. Returns the epoch read."""
    saved: list[dict[str, Any]] = []
    epoch = 0
    for rank in range(topology.ranks):
        main = reader(name, store, rank=rank, world_size=topology.ranks, worker_chunk=BATCH, with_row=True, **options)
        if job.states:
            main.load_state_dict(job.states)
        epoch = main.epoch
        ledger = Ledger(len(main))
        if topology.workers == 0:
            samples = main()
            taken = _take(samples, ledger, epoch, None if to_the_end else topology.batches * BATCH)
            states = [main.state_dict()]
        else:
            copies = [_worker_copy(main, worker, topology.workers) for worker in range(topology.workers)]
            passes = [copy() for copy in copies]
            taken, turn, ended = 0, 0, set()
            while len(ended) < len(passes) and (to_the_end or taken < topology.batches * BATCH):
                worker = turn % len(passes)
                turn += 1
                if worker in ended:
                    continue
                got = _take(passes[worker], ledger, epoch, BATCH)
                taken += got
                if got < BATCH:
                    ended.add(worker)
            states = [copy.state_dict() for copy in copies] if per_worker else [main.state_dict(consumed=taken)]
        job.ledgers.append(Ledger.from_state_dict(json.loads(json.dumps(ledger.state_dict()))))
        if all_ranks or rank == 0:
            saved.extend(json.loads(json.dumps(state)) for state in states)
    job.states = saved
    return epoch


def _worker_copy(main: DatasetReader, worker: int, workers: int) -> DatasetReader:
    copy: DatasetReader = pickle.loads(pickle.dumps(main))
    copy._assign_worker(worker, workers)
    return copy


def _take(samples: Iterator[tuple[Any, ...]], ledger: Ledger, epoch: int, limit: int | None) -> int:
    taken = 0
    for sample in itertools.islice(samples, limit):
        ledger.record(epoch, sample[0])
        assert sample[1] == f"s{sample[0]}"  # the row number is the sample's own
        taken += 1
    return taken


topologies = st.builds(Topology, ranks=st.integers(1, 8), workers=st.integers(0, 4), batches=st.integers(0, 6))


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["packed", "lines"]),
    shuffle=st.booleans(),
    shuffle_block=st.sampled_from([1, 3, 0]),
    remainder=st.sampled_from(["uneven", "pad", "drop"]),
    plan=st.lists(topologies, min_size=1, max_size=4),
    per_worker=st.booleans(),
    all_ranks=st.booleans(),
)
def test_a_killed_job_resumed_under_any_topology_consumes_each_row_as_its_remainder_rule_says(
    store: Store,
    name: str,
    shuffle: bool,
    shuffle_block: int,
    remainder: str,
    plan: list[Topology],
    per_worker: bool,
    all_ranks: bool,
) -> None:
    options = {"shuffle": shuffle, "shuffle_block": shuffle_block, "seed": 11, "remainder": remainder}
    options["rows_per_span"] = 5
    job = Job()
    epochs = [
        run(store, name, options, topology, job, to_the_end=last, per_worker=per_worker, all_ranks=all_ranks)
        for last, topology in ((index == len(plan) - 1, topology) for index, topology in enumerate(plan))
    ]
    # An epoch may end before the last topology (every rank read its share): the next ones read the next epoch.
    reports = check(job.ledgers)
    assert [report.epoch for report in reports] == sorted(set(epochs))
    for report in reports:
        readers_of_it = [topology for topology, epoch in zip(plan, epochs, strict=True) if epoch == report.epoch]
        assert report.rows == ROWS
        if remainder == "uneven":
            assert report.exact, report
        elif remainder == "pad":
            assert report.gaps == 0, report
            assert report.duplicates <= sum(topology.ranks - 1 for topology in readers_of_it), report
        else:
            assert report.duplicates == 0, report
            assert report.gaps <= readers_of_it[-1].ranks - 1, report
    # Once the epoch is read, the states say the next one begins.
    resumed = reader(name, store, rank=0, world_size=3, **options)
    resumed.load_state_dict(job.states)
    assert resumed.epoch == epochs[-1] + 1


def test_a_resume_under_the_same_topology_goes_on_exactly_as_the_uninterrupted_epoch(store: Store) -> None:
    options = {"shuffle": True, "seed": 5, "remainder": "pad"}
    whole = [list(reader("packed", store, rank=rank, world_size=3, **options)()) for rank in range(3)]
    state = reader("packed", store, rank=0, world_size=3, **options).state_dict(consumed=10)
    for rank in range(3):
        assert list(DatasetReader.from_state_dict(state, store, rank=rank, world_size=3)()) == whole[rank][10:]


def test_one_ranks_state_resumes_a_larger_job_with_the_rest_of_the_epoch(store: Store) -> None:
    """Two ranks in step took 10 samples each; five ranks read the other 77, each about a fifth."""
    options = {"shuffle": True, "seed": 5, "remainder": "uneven", "with_row": True}
    before = [list(reader("packed", store, rank=rank, world_size=2, **options)())[:10] for rank in range(2)]
    state = reader("packed", store, rank=0, world_size=2, **options).state_dict(consumed=10)
    after = [list(DatasetReader.from_state_dict(state, store, rank=r, world_size=5, with_row=True)()) for r in range(5)]
    assert sorted(len(share) for share in after) == [15, 15, 15, 16, 16]
    rows = [sample[0] for share in before + after for sample in share]
    assert sorted(rows) == list(range(ROWS))


def test_states_from_a_format_1_checkpoint_still_resume(store: Store) -> None:
    samples = reader("packed", store, rank=1, world_size=2)
    state = samples.state_dict(consumed=7)
    old = {key: value for key, value in state.items() if key not in ("done", "workers")} | {"format": 1}
    assert list(DatasetReader.from_state_dict(old, store, rank=1, world_size=2)()) == list(samples())[7:]


def test_the_states_of_some_ranks_only_are_refused(store: Store) -> None:
    states = [reader("packed", store, rank=rank, world_size=4).state_dict(consumed=3) for rank in (0, 2)]
    with pytest.raises(ReaderStateError, match="the states of ranks 1, 3 of 4 are missing"):
        reader("packed", store, rank=0, world_size=2).load_state_dict(states)
    apart = [{**states[0], "world_size": 2}, {**states[0], "rank": 1, "world_size": 2, "epoch": 20_000}]
    with pytest.raises(ReaderStateError, match=r"epochs 0 to 20000: .* at most 10000 epochs apart"):
        reader("packed", store, rank=0, world_size=3).load_state_dict(apart)


def test_ledger_check_reports_duplicates_and_gaps_and_exits_1(tmp_path: Path) -> None:
    first, second = Ledger(10), Ledger(10)
    first.record(0, range(6))
    second.record(0, [5, 6, 7, 8, 9])
    second.record(1, [3])
    first.save(tmp_path / "run" / "rank-0.json")
    second.save(tmp_path / "run" / "rank-1.json")
    runner = CliRunner()
    result = runner.invoke(cli, ["ledger", "check", str(tmp_path / "run"), "--epoch", "0"])
    assert result.exit_code == 1, result.output
    assert "epoch 0: consumed more than once: rows 5" in result.output
    assert "2 ledgers, 1 epoch: NOT exact" in result.output
    result = runner.invoke(cli, ["ledger", "check", str(tmp_path / "run"), "--json"])
    document = json.loads(result.output)
    assert result.exit_code == 1 and document["exact"] is False
    assert [(e["epoch"], e["duplicates"], e["gaps"]) for e in document["epochs"]] == [(0, 1, 0), (1, 0, 9)]
    assert document["epochs"][1]["gap_examples"] == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    exact = Ledger(10)
    exact.record(0, range(10))
    exact.save(tmp_path / "exact.json")
    result = runner.invoke(cli, ["ledger", "check", str(tmp_path / "exact.json")])
    assert result.exit_code == 0 and "every row exactly once" in result.output, result.output


def test_a_ledger_is_compact_and_survives_its_file(tmp_path: Path) -> None:
    ledger = Ledger(1_000_000)
    ledger.record(0, range(0, 1_000_000))
    ledger.record(0, [17, 17])
    ledger.save(tmp_path / "big.json")
    assert (tmp_path / "big.json").stat().st_size < 2_000
    again = Ledger.load(tmp_path / "big.json")
    assert int(again.counts(0)[17]) == 3 and int(again.counts(0).sum()) == 1_000_002
    with pytest.raises(ValueError, match="row 1000000 is not one of the ledger's 1000000 rows"):
        ledger.record(0, [1_000_000])
    (tmp_path / "bad.json").write_text('{"format": 1, "rows": 5, "epochs": {"0": {"seen": "!!"}}}')
    with pytest.raises(ReaderStateError, match=r"bad\.json: damaged ledger: epoch 0: seen is not base64"):
        Ledger.load(tmp_path / "bad.json")


@pytest.mark.parametrize("shuffle", [False, True])
def test_workers_in_different_epochs_resume_both_epochs_exactly(store: Store, shuffle: bool) -> None:
    """Worker 0 finished its part of epoch 0 and began epoch 1 while worker 1 was still in epoch 0 (a worker that
    restarts a part of a mixture does this): the states of both epochs resume under 2 ranks of 3 workers."""
    options = {"shuffle": shuffle, "seed": 3, "remainder": "uneven", "with_row": True}
    main = reader("packed", store, **options)
    copies = [_worker_copy(main, worker, 2) for worker in range(2)]
    ledger = Ledger(ROWS)
    _take(copies[0](), ledger, 0, None)  # all of worker 0's chunks of epoch 0
    _take(copies[0](), ledger, 1, 7)  # and 7 samples of its chunks of epoch 1
    _take(copies[1](), ledger, 0, 20)
    states = [json.loads(json.dumps(copy.state_dict())) for copy in copies]
    assert [state["epoch"] for state in states] == [1, 0]
    ledgers = [ledger]
    for rank in range(2):
        resumed = reader("packed", store, rank=rank, world_size=2, **options)
        resumed.load_state_dict(states)
        assert resumed.epoch == 0
        workers = [_worker_copy(resumed, worker, 3) for worker in range(3)]
        for epoch in (0, 1):
            ledgers.append(Ledger(ROWS))
            for copy in workers:
                _take(copy(), ledgers[-1], epoch, None)
    reports = check(ledgers)
    assert [(report.epoch, report.exact) for report in reports] == [(0, True), (1, True)], reports
