"""Static sharding: disjoint shares that cover each epoch, per-epoch shuffles, worker parts, resumable positions."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datamount.datasets import catalog
from datamount.datasets.pack import pack
from datamount.datasets.upload import upload
from datamount.readers import DataLoader, map_readers, multiprocess_reader
from datamount.readers.dataset import DatasetReader, reader
from datamount.readers.errors import ReaderStateError
from datamount.readers.sharding import (
    REMAINDER_RULES,
    DistributedConfigError,
    EpochOrder,
    Group,
    resolve_rank,
    share_bounds,
    worker_runs,
)
from datamount.storage import Store, open_store
from tests.generated import MakeImageList, write_image_list
from tests.stores import store_backends

ROWS = 97  # prime: every world size leaves a remainder
#: Row groups of a few rows each, of different sizes (row lengths vary), in several shards.
SMALL_GROUPS = {"row_group_bytes": 40, "shard_bytes": 400}
FIXTURES = [HealthCheck.function_scoped_fixture]
#: Worker processes start fresh: a forked child inherits the session's HDFS clients and hangs when it drops them.
START = "spawn"
#: The hypothesis runs over stores read through moto take 4 to 12 s, against a second or less elsewhere.
MOTO_IS_SLOW = store_backends(slow={"s3-moto"})


def text_dataset(store: Store, folder: Path, name: str = "t", rows: int = ROWS) -> list[tuple[str, ...]]:
    """Upload (once per store) a text dataset of ``rows`` distinct rows, packed in small row groups; its rows."""
    if not catalog.versions(store, name):
        folder.mkdir(parents=True, exist_ok=True)
        listing = folder / f"{name}.list"
        listing.write_text("".join(f"s{i}{'x' * (i % 7)}\tt{i}\n" for i in range(rows)), encoding="utf-8")
        upload(listing, name, store=store)
        pack(name, store=store, **SMALL_GROUPS)
    return list(reader(name, store, rank=0, world_size=1)())


def consecutive_spans(sizes: Sequence[int]) -> list[range]:
    starts = list(itertools.accumulate(sizes, initial=0))
    return [range(start, stop) for start, stop in itertools.pairwise(starts)]


def rows_at(order: EpochOrder, first: int, stop: int) -> list[int]:
    return [row for piece in order.pieces(iter([(first, stop)])) for row in piece.rows] if stop > first else []


def cycled(sequence: Sequence[Any], length: int) -> list[Any]:
    """The first ``length`` items of ``sequence`` repeated: ranks' shares, in rank order, under any rule."""
    return list(itertools.islice(itertools.cycle(sequence), length))


def stretches(labels: Sequence[Any]) -> list[Any]:
    """``labels`` with each run of equal neighbours folded into one."""
    return [label for label, _ in itertools.groupby(labels)]


def check_rule(shares: list[list[Any]], everything: list[Any], rule: str) -> None:
    """The shares of one epoch are what ``rule`` promises, whatever the rows are."""
    total, world = len(everything), len(shares)
    counts = Counter(row for share in shares for row in share)
    if rule == "uneven":
        assert counts == Counter(everything)
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
    elif rule == "drop":
        assert {len(share) for share in shares} == {total // world}
        assert set(counts.values()) <= {1} and len(counts) == world * (total // world)
    else:
        assert {len(share) for share in shares} == {-(-total // world)}
        assert set(counts) == set(everything)
        assert sum(counts.values()) - total == world * -(-total // world) - total < world


# ------------------------------------------------------------------------------------------ the plan, in memory


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 9), max_size=12).filter(lambda sizes: sum(sizes) > 0),
    world=st.integers(1, 7),
    rule=st.sampled_from(REMAINDER_RULES),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**64),
    epoch=st.integers(0, 1000),
)
def test_an_epoch_is_a_permutation_read_span_by_span_and_the_shares_follow_the_rule(
    sizes: list[int], world: int, rule: str, shuffle: bool, seed: int, epoch: int
) -> None:
    spans = consecutive_spans(sizes)
    total = sum(sizes)
    order = EpochOrder(spans, shuffle=shuffle, seed=seed, epoch=epoch)
    sequence = rows_at(order, 0, total)
    assert sorted(sequence) == list(range(total))
    span_of = {row: index for index, span in enumerate(spans) for row in span}
    assert len(stretches([span_of[row] for row in sequence])) == sum(1 for size in sizes if size)
    if not shuffle:
        assert sequence == list(range(total))
    assert rows_at(EpochOrder(spans, shuffle=shuffle, seed=seed, epoch=epoch), 0, total) == sequence
    shares = [rows_at(order, *share_bounds(total, rank, world, rule)) for rank in range(world)]
    check_rule(shares, list(range(total)), rule)
    assert [row for share in shares for row in share] == cycled(sequence, sum(map(len, shares)))


@settings(max_examples=300, deadline=None)
@given(share=st.integers(0, 80), start=st.integers(0, 80), workers=st.integers(1, 6), chunk=st.integers(1, 9))
def test_workers_dealt_chunks_in_turn_hand_out_the_share_in_its_order(
    share: int, start: int, workers: int, chunk: int
) -> None:
    parts = [
        [p for a, b in worker_runs(start, share, worker, workers, chunk) for p in range(a, b)]
        for worker in range(workers)
    ]
    assert sorted(p for part in parts for p in part) == list(range(start, share))
    # A loader that takes one chunk from each worker in turn (as PyTorch's DataLoader takes one batch from each
    # worker when the batch size is the chunk) gets the share in order.
    chunked = [[part[i : i + chunk] for i in range(0, len(part), chunk)] for part in parts]
    merged = [p for turn in itertools.zip_longest(*chunked, fillvalue=[]) for group in turn for p in group]
    assert merged == list(range(start, share))


def group_rows(group: Group) -> list[int]:
    """The rows of a group in the wanted order, as a reader puts them."""
    read = [row for piece in group.pieces for row in piece.rows]
    return read if group.order is None else [read[position] for position in group.order]


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 9), max_size=12).filter(lambda sizes: sum(sizes) > 0),
    block=st.integers(0, 5),
    cuts=st.lists(st.integers(0, 60), max_size=6),
    seed=st.integers(0, 2**64),
)
def test_a_block_shuffle_mixes_the_rows_of_block_spans_and_reads_each_span_once_per_stretch(
    sizes: list[int], block: int, cuts: list[int], seed: int
) -> None:
    spans = consecutive_spans(sizes)
    total = sum(sizes)
    order = EpochOrder(spans, shuffle=True, seed=seed, epoch=3, block=block)
    whole = [row for group in order.groups(iter([(0, total)])) for row in group_rows(group)]
    assert sorted(whole) == list(range(total))
    # Each block is the rows of at most ``block`` spans, and each span lies in one block.
    span_of = {row: index for index, span in enumerate(spans) for row in span}
    blocks = [{span_of[row] for row in group_rows(g)} for g in order.groups(iter([(0, total)]))]
    assert all(len(spans_here) <= (block or len(spans)) for spans_here in blocks)
    assert sum(map(len, blocks)) == len({span_of[row] for row in range(total)})
    # Any cut of the sequence into runs finds the same rows; a stretch within a block reads each span once.
    bounds = sorted({0, total, *(cut % (total + 1) for cut in cuts)})
    runs = list(itertools.pairwise(bounds))
    groups = list(order.groups(iter(runs)))
    assert [row for group in groups for row in group_rows(group)] == whole
    for group in groups:
        assert len({piece.span for piece in group.pieces}) == len(group.pieces)
    if block == 1:
        assert whole == rows_at(EpochOrder(spans, shuffle=True, seed=seed, epoch=3), 0, total)


def test_a_shuffled_order_changes_with_the_epoch_and_the_seed() -> None:
    spans = consecutive_spans([10] * 10)
    orders = {
        (seed, epoch): tuple(rows_at(EpochOrder(spans, shuffle=True, seed=seed, epoch=epoch), 0, 100))
        for seed in range(3)
        for epoch in range(3)
    }
    assert len(set(orders.values())) == len(orders)


# --------------------------------------------------------------------------------------- rank and world size


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, (0, 1)),
        ({"RANK": "2", "WORLD_SIZE": "4"}, (2, 4)),
        ({"PADDLE_TRAINER_ID": "1", "PADDLE_TRAINERS_NUM": "3"}, (1, 3)),
        ({"RANK": "1", "WORLD_SIZE": "2", "PADDLE_TRAINER_ID": "1", "PADDLE_TRAINERS_NUM": "2"}, (1, 2)),
        ({"RANK": " 0 ", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}, (0, 1)),
        ({"RANK": "", "WORLD_SIZE": ""}, (0, 1)),
    ],
    ids=["nothing", "torchrun", "paddle", "both-agree", "spaces", "empty"],
)
def test_rank_and_world_size_come_from_the_launcher(environ: dict[str, str], expected: tuple[int, int]) -> None:
    assert resolve_rank(environ=environ) == expected


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"RANK": "1"}, "RANK is set .* but WORLD_SIZE is not"),
        ({"PADDLE_TRAINERS_NUM": "4"}, "PADDLE_TRAINERS_NUM is set .* but PADDLE_TRAINER_ID is not"),
        ({"RANK": "one", "WORLD_SIZE": "2"}, "RANK='one' is not a whole number"),
        ({"RANK": "0", "WORLD_SIZE": "2.0"}, r"WORLD_SIZE='2.0' is not a whole number"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 must be between 0 and WORLD_SIZE - 1 = 1"),
        ({"RANK": "-1", "WORLD_SIZE": "2"}, "RANK=-1 must be between"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0 must be at least 1"),
        ({"PADDLE_TRAINER_ID": "5", "PADDLE_TRAINERS_NUM": "3"}, "PADDLE_TRAINER_ID=5 must be between"),
        (
            {"RANK": "1", "WORLD_SIZE": "2", "PADDLE_TRAINER_ID": "0", "PADDLE_TRAINERS_NUM": "2"},
            "RANK/WORLD_SIZE say rank 1 of 2 but PADDLE_TRAINER_ID/PADDLE_TRAINERS_NUM say rank 0 of 2",
        ),
    ],
    ids=["no-world", "no-paddle-id", "word", "float", "rank-too-big", "negative", "zero-world", "paddle", "disagree"],
)
def test_a_wrong_environment_is_one_clear_error_naming_the_variable(environ: dict[str, str], message: str) -> None:
    with pytest.raises(DistributedConfigError, match=message):
        resolve_rank(environ=environ)


@pytest.mark.parametrize(
    ("rank", "world_size", "message"),
    [
        (1, None, "give both rank and world_size or neither"),
        (None, 2, "give both rank and world_size or neither"),
        (3, 3, "rank=3 must be between 0 and world_size - 1 = 2"),
        (0, True, "world_size must be a whole number, got True"),
        ("0", 2, "rank must be a whole number, got '0'"),
    ],
)
def test_explicit_rank_arguments_are_checked(rank: Any, world_size: Any, message: str) -> None:
    wrong_type = "whole number" in message  # a wrong type is a TypeError, a wrong value the domain's ValueError
    with pytest.raises(TypeError if wrong_type else DistributedConfigError, match=message) as caught:
        resolve_rank(rank, world_size, environ={})
    assert caught.type is (TypeError if wrong_type else DistributedConfigError)


def test_reader_takes_its_share_from_the_environment_unless_told(
    local_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    everything = text_dataset(local_store, tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "2")
    samples = reader("t", local_store)
    assert (samples.rank, samples.world_size, samples.share_size) == (2, 3, 33)
    assert list(samples()) == everything[66:] + everything[:2]  # "pad": the last share wraps around
    assert list(reader("t", local_store, rank=0, world_size=1)()) == everything
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(DistributedConfigError, match="RANK=3 must be between 0 and WORLD_SIZE - 1 = 2"):
        reader("t", local_store)


@pytest.mark.parametrize(
    ("option", "error", "message"),
    [
        (
            {"remainder": "round"},
            DistributedConfigError,
            "remainder must be one of 'pad', 'drop', 'uneven', got 'round'",
        ),
        ({"shuffle": 1}, TypeError, "shuffle must be True or False"),
        ({"seed": 1.5}, TypeError, "seed must be a whole number"),
        ({"seed": "1"}, TypeError, "seed must be a whole number, got '1'"),
        ({"worker_chunk": 0}, DistributedConfigError, "worker_chunk must be at least 1"),
        ({"rows_per_span": 0}, ValueError, "rows_per_span must be at least 1"),
        ({"verify": "yes"}, TypeError, "verify must be True or False"),
        ({"max_requests": 0}, ValueError, "max_requests must be at least 1, got 0"),
        ({"max_requests": 2.5}, TypeError, "max_requests must be a whole number, got 2.5"),
        ({"max_bytes": 0}, ValueError, "max_bytes must be at least 1, got 0"),
    ],
)
def test_sharding_options_are_checked_when_the_reader_is_made(
    local_store: Store, tmp_path: Path, option: dict[str, Any], error: type[Exception], message: str
) -> None:
    text_dataset(local_store, tmp_path)
    with pytest.raises(error, match=message) as caught:
        reader("t", local_store, **option)
    assert caught.type is error


# ------------------------------------------------------------------------------------------ shares on stores


@pytest.mark.parametrize("store", MOTO_IS_SLOW, indirect=True)
@settings(max_examples=12, deadline=None, suppress_health_check=FIXTURES)
@given(
    world=st.integers(1, 6),
    rule=st.sampled_from(REMAINDER_RULES),
    shuffle=st.booleans(),
    seed=st.integers(0, 10**6),
    epoch=st.integers(0, 20),
    packed=st.booleans(),
)
def test_ranks_read_disjoint_shares_that_cover_each_epoch(
    store: Store, tmp_path: Path, world: int, rule: str, shuffle: bool, seed: int, epoch: int, packed: bool
) -> None:
    everything = text_dataset(store, tmp_path)
    shares = []
    for rank in range(world):
        samples = reader(
            "t", store, rank=rank, world_size=world, remainder=rule, shuffle=shuffle, seed=seed, use_shards=packed
        )
        samples.set_epoch(epoch)
        shares.append(list(samples()))
        assert len(shares[-1]) == samples.share_size
    check_rule(shares, everything, rule)
    if not shuffle:
        assert [row for share in shares for row in share] == cycled(everything, sum(map(len, shares)))


def test_a_shuffled_pass_reads_each_row_group_as_one_stretch(local_store: Store, tmp_path: Path) -> None:
    everything = text_dataset(local_store, tmp_path)
    samples = reader("t", local_store, shuffle=True, seed=11, rank=0, world_size=1)
    group_of = {everything[row]: index for index, span in enumerate(samples.spans()) for row in span}
    assert len(samples.spans()) > 5
    first, second = list(samples()), list(samples())
    assert first != second and sorted(first) == sorted(second) == sorted(everything)
    for sequence in (first, second):
        assert len(stretches([group_of[row] for row in sequence])) == len(samples.spans())
    again = reader("t", local_store, shuffle=True, seed=11, rank=0, world_size=1)
    again.set_epoch(1)
    assert list(again()) == second


def test_image_datasets_are_sharded_too(store: Store, make_image_list: MakeImageList) -> None:
    upload(make_image_list(23), "images", store=store)
    everything = list(reader("images", store, rank=0, world_size=1)())
    shares = [
        list(reader("images", store, rank=rank, world_size=4, shuffle=True, rows_per_span=5, remainder="uneven")())
        for rank in range(4)
    ]
    check_rule(shares, everything, "uneven")


# ------------------------------------------------------------------------------------------------------ resume


def check_resume(samples: DatasetReader, epoch: int, taken: int, **options: Any) -> None:
    """Stop epoch ``epoch`` of ``samples`` after ``taken`` samples, save the state (through JSON) and finish in a
    new reader built from it: the two parts are the uninterrupted pass; a finished pass goes on with the next."""
    samples.set_epoch(epoch)
    uninterrupted, following = list(samples()), list(samples())
    samples.set_epoch(epoch)
    iterator = samples()
    before = list(itertools.islice(iterator, taken))
    state = json.loads(json.dumps(samples.state_dict()))
    iterator.close()
    after = list(DatasetReader.from_state_dict(state, samples.store, **options)())
    assert before == uninterrupted[:taken]
    if taken < len(uninterrupted):
        assert (state["epoch"], state["position"]) == (epoch, taken)
        assert before + after == uninterrupted
    else:
        assert (state["epoch"], state["position"]) == (epoch + 1, 0)
        assert after == following


@pytest.mark.parametrize("store", MOTO_IS_SLOW, indirect=True)
@settings(max_examples=15, deadline=None, suppress_health_check=FIXTURES)
@given(
    world=st.integers(1, 5),
    data=st.data(),
    rule=st.sampled_from(REMAINDER_RULES),
    shuffle=st.booleans(),
    seed=st.integers(0, 10**6),
    epoch=st.integers(0, 10),
    packed=st.booleans(),
)
def test_a_reader_built_from_a_state_continues_exactly_where_the_last_one_stopped(
    store: Store,
    tmp_path: Path,
    world: int,
    data: st.DataObject,
    rule: str,
    shuffle: bool,
    seed: int,
    epoch: int,
    packed: bool,
) -> None:
    text_dataset(store, tmp_path)
    rank = data.draw(st.integers(0, world - 1), label="rank")
    options = {"rank": rank, "world_size": world}
    samples = reader("t", store, remainder=rule, shuffle=shuffle, seed=seed, use_shards=packed, **options)
    taken = data.draw(st.integers(0, samples.share_size), label="position")
    check_resume(samples, epoch, taken, **options)


@settings(max_examples=25, deadline=None, suppress_health_check=FIXTURES)
@given(rows=st.integers(1, 40), world=st.integers(1, 5), rule=st.sampled_from(REMAINDER_RULES), data=st.data())
def test_resume_holds_for_any_number_of_rows(
    local_store: Store, tmp_path: Path, rows: int, world: int, rule: str, data: st.DataObject
) -> None:
    everything = text_dataset(local_store, tmp_path / str(rows), f"rows{rows}", rows)
    rank = data.draw(st.integers(0, world - 1), label="rank")
    options = {"rank": rank, "world_size": world, "remainder": rule, "shuffle": True, "seed": rows}
    samples = reader(f"rows{rows}", local_store, **options)
    whole = list(samples())
    check_rule(
        [list(reader(f"rows{rows}", local_store, **{**options, "rank": r})()) for r in range(world)], everything, rule
    )
    taken = data.draw(st.integers(0, len(whole)), label="position")
    check_resume(samples, 0, taken, rank=rank, world_size=world)


def test_the_resumed_position_applies_to_its_epoch_only(local_store: Store, tmp_path: Path) -> None:
    text_dataset(local_store, tmp_path)
    samples = reader("t", local_store, shuffle=True, seed=5, rank=1, world_size=2)
    epochs = [list(samples()) for _ in range(3)]
    samples.set_epoch(1)
    resumed = DatasetReader.from_state_dict(samples.state_dict(consumed=20), local_store, rank=1, world_size=2)
    assert resumed.epoch == 1
    assert list(resumed()) == epochs[1][20:]
    assert list(resumed()) == epochs[2]
    resumed.load_state_dict(samples.state_dict(consumed=7))
    resumed.set_epoch(2)  # another epoch than the state's: from its start
    assert list(resumed()) == epochs[2]


def test_the_state_of_one_rank_resumes_every_rank_in_step(local_store: Store, tmp_path: Path) -> None:
    text_dataset(local_store, tmp_path)
    ranks = [reader("t", local_store, shuffle=True, rank=rank, world_size=3, remainder="uneven") for rank in range(3)]
    passes = [list(samples()) for samples in ranks]
    ranks[0].set_epoch(0)
    state = ranks[0].state_dict(consumed=32)
    for rank, whole in enumerate(passes):
        assert list(DatasetReader.from_state_dict(state, local_store, rank=rank, world_size=3)()) == whole[32:]


@pytest.mark.parametrize(
    "options",
    [{"with_row": True}, {"zero_copy": True}, {"with_row": True, "zero_copy": True, "shuffle": True}],
    ids=["with_row", "zero_copy", "both-shuffled"],
)
def test_a_reader_built_from_a_state_yields_the_samples_the_saved_one_did(
    local_store: Store, tmp_path: Path, options: dict[str, Any]
) -> None:
    """Options that change what a pass yields (row numbers first, memoryviews) travel in the state: the resumed
    reader yields the rest of the pass exactly as the saved one would have, values of the same types."""
    upload(write_image_list(tmp_path / "images", 20), "i", store=local_store)
    pack("i", store=local_store, shard_bytes=4_000, row_group_bytes=1_000)
    samples = reader("i", local_store, **options)
    uninterrupted = list(samples())
    samples.set_epoch(0)
    iterator = samples()
    taken = list(itertools.islice(iterator, 7))
    state = json.loads(json.dumps(samples.state_dict()))
    iterator.close()
    rest = list(DatasetReader.from_state_dict(state, local_store)())
    assert taken + rest == uninterrupted
    assert [type(value) for value in rest[0]] == [type(value) for value in uninterrupted[0]]
    assert isinstance(rest[0][0], int) == options.get("with_row", False)
    assert any(isinstance(value, memoryview) for value in rest[0]) == options.get("zero_copy", False)


def test_a_state_saved_before_it_held_what_the_reader_yields_still_loads(local_store: Store, tmp_path: Path) -> None:
    """A state without ``with_row`` and ``zero_copy`` (saved by an earlier datamount) resumes a reader without them."""
    rows = text_dataset(local_store, tmp_path)
    state = reader("t", local_store).state_dict(consumed=10)
    older = {key: value for key, value in state.items() if key not in ("with_row", "zero_copy")}
    resumed = DatasetReader.from_state_dict(older, local_store)
    assert (resumed.with_row, resumed.source.zero_copy) == (False, False)
    assert list(resumed()) == rows[10:]
    numbered = DatasetReader.from_state_dict(older, local_store, with_row=True)
    assert list(numbered()) == [(number, *row) for number, row in enumerate(rows)][10:]


def test_consumed_counts_what_the_loop_took(local_store: Store, tmp_path: Path) -> None:
    text_dataset(local_store, tmp_path)
    samples = reader("t", local_store, rank=0, world_size=2)
    assert samples.state_dict()["position"] == 0
    iterator = samples()
    next(iterator), next(iterator)
    assert (samples.state_dict()["epoch"], samples.state_dict()["position"]) == (0, 2)
    assert samples.state_dict(consumed=40)["position"] == 40
    with pytest.raises(ReaderStateError, match="consumed=50 is more than the 49 samples of epoch 0's share"):
        samples.state_dict(consumed=50)
    with pytest.raises(ValueError, match="consumed must be at least 0") as caught:
        samples.state_dict(consumed=-1)
    assert caught.type is ValueError


def test_states_that_do_not_fit_are_refused(local_store: Store, tmp_path: Path, text_list: Path) -> None:
    text_dataset(local_store, tmp_path)
    samples = reader("t", local_store, shuffle=True, seed=3, rank=0, world_size=2)
    state = samples.state_dict(consumed=5)
    fresh = {"rank": 0, "world_size": 2, "shuffle": True, "seed": 3}
    with pytest.raises(ReaderStateError, match="seed is 3 there and 4 here"):
        reader("t", local_store, **{**fresh, "seed": 4}).load_state_dict(state)
    with pytest.raises(ReaderStateError, match="layout is 'row-groups' there and 'lines:1024' here"):
        reader("t", local_store, **fresh, use_shards=False).load_state_dict(state)
    with pytest.raises(ReaderStateError, match="remainder is 'pad' there and 'drop' here"):
        DatasetReader.from_state_dict(state, local_store, rank=0, world_size=2, remainder="drop")
    upload(text_list, "t", store=local_store)  # a second version: "t" now means t@2
    with pytest.raises(ReaderStateError, match=r"the state is for t@1 but this reader reads t@2"):
        reader("t", local_store, **fresh).load_state_dict(state)
    assert list(DatasetReader.from_state_dict(state, local_store, rank=0, world_size=2)()) == list(samples())[5:]
    for broken, message in [
        ({**state, "format": 9}, "format 9 is not supported"),
        ({key: value for key, value in state.items() if key != "epoch"}, "has no 'epoch'"),
        ({**state, "position": "5"}, "'position' must be a int, got '5'"),
        ({**state, "position": -5}, "negative"),
        ([1, 2], "a reader state is a dict"),
        ([], "or a list of every rank's"),
        ({**state, "done": [[5, 2, 1]]}, "list of \\[start, stop\\] pairs"),
        ({**state, "done": [[0, 10**6]]}, "runs past the epoch's"),
        ({**state, "workers": {"count": 2, "chunk": 1, "taken": {"3": 1}}}, "'workers' is inconsistent"),
        ({**state, "workers": {"count": 2, "chunk": 1, "taken": {"0": 1}}}, "workers 1 of rank 0 are missing"),
        ([state, {**state, "epoch": 4}], "rank 0 has several states of different epochs"),
        ([state, {**state, "rank": 1, "world_size": 3}], "not of one moment of one job"),
        ([state, {**state, "position": 4}], "rank 0 has states at different positions"),
        ([{**state, "world_size": 3}, {**state, "rank": 2, "world_size": 3}], "states of ranks 1 of 3 are missing"),
    ]:
        with pytest.raises(ReaderStateError, match=message):
            samples.load_state_dict(broken)


def _row_group_byte_ranges(path: Path) -> list[tuple[int, int]]:
    footer = pq.ParquetFile(path).metadata
    ranges = []
    for group in range(footer.num_row_groups):
        meta = footer.row_group(group)
        chunks = [meta.column(column) for column in range(meta.num_columns)]
        starts = [c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset for c in chunks]
        ends = [start + c.total_compressed_size for start, c in zip(starts, chunks, strict=True)]
        ranges.append((min(starts), max(ends)))
    return ranges


@pytest.mark.parametrize("shuffle", [False, True], ids=["in-order", "shuffled"])
def test_resuming_does_not_read_the_row_groups_before_the_position(
    local_store: Store, tmp_path: Path, shuffle: bool
) -> None:
    text_dataset(local_store, tmp_path)
    samples = reader("t", local_store, shuffle=shuffle, seed=2, rank=0, world_size=1)
    whole = list(samples())
    samples.set_epoch(0)
    order = EpochOrder(samples.spans(), shuffle=shuffle, seed=2, epoch=0)
    slot = len(order.order) // 2
    position = order.starts[slot] + 1  # inside the middle span of the epoch's order
    state = samples.state_dict(consumed=position)
    # Zero the bytes of every row group read wholly before the position: reading any of them now fails.
    damaged = set(order.order[:slot])
    manifest = catalog.resolve(local_store, "t")
    group = 0
    for shard in manifest.shards:
        path = Path(local_store.full_path(f"datasets/t/{shard.path}"))
        content = bytearray(path.read_bytes())
        for start, end in _row_group_byte_ranges(path):
            if group in damaged:
                content[start:end] = bytes(end - start)
            group += 1
        path.write_bytes(bytes(content))
    with pytest.raises((OSError, pa.ArrowException)):
        list(reader("t", local_store, shuffle=shuffle, seed=2, rank=0, world_size=1)())
    assert list(DatasetReader.from_state_dict(state, local_store, rank=0, world_size=1)()) == whole[position:]


# ----------------------------------------------------------------------------------- workers and the DataLoader


@pytest.mark.slow
def test_multiprocess_reader_splits_a_shared_reader_among_its_workers(local_store: Store, tmp_path: Path) -> None:
    text_dataset(local_store, tmp_path)
    samples = reader("t", local_store, shuffle=True, seed=1, rank=1, world_size=2)
    epochs = [list(samples()) for _ in range(2)]
    samples.set_epoch(0)
    workers = multiprocess_reader([samples, map_readers(tuple, samples), samples], mp_context=START)
    assert Counter(workers()) == Counter(epochs[0])
    assert Counter(workers()) == Counter(epochs[1])  # the parent's reader moves on with each pass its copies run
    other = text_dataset(local_store, tmp_path, "u", 10)
    samples.set_epoch(0)
    both = multiprocess_reader([samples, reader("u", local_store, rank=0, world_size=1)], mp_context=START)
    assert Counter(both()) == Counter(epochs[0] + other)  # each reader in one worker only: read whole


@pytest.mark.slow
@pytest.mark.parametrize(("before", "after"), [(1, 3), (3, 2)])
def test_a_resumed_share_is_split_among_another_number_of_workers(
    local_store: Store, tmp_path: Path, before: int, after: int
) -> None:
    text_dataset(local_store, tmp_path)
    options = {"rank": 0, "world_size": 2, "shuffle": True, "seed": 8}
    samples = reader("t", local_store, **options)
    whole = list(samples())
    samples.set_epoch(0)
    first = multiprocess_reader([samples] * before, mp_context=START) if before > 1 else samples
    assert Counter(first()) == Counter(whole)
    state = samples.state_dict(consumed=17)  # e.g. a checkpoint taken after 17 samples, read in share order
    resumed = DatasetReader.from_state_dict(state, local_store, rank=0, world_size=2)
    assert Counter(multiprocess_reader([resumed] * after, mp_context=START)()) == Counter(whole[17:])
    assert resumed.epoch == 1


def loader_rows(samples: DatasetReader, epochs: int, *, use_multiprocess: bool) -> list[list[tuple[str, ...]]]:
    loader = DataLoader.from_generator(
        capacity=2, use_multiprocess=use_multiprocess, mp_context=START if use_multiprocess else None
    )
    loader.set_sample_generator(samples, batch_size=8, drop_last=False)
    with loader:
        return [[row for batch in loader() for row in zip(*batch, strict=True)] for _ in range(epochs)]


@pytest.mark.slow
def test_the_dataloader_reads_the_same_orders_in_a_thread_and_in_a_process(local_store: Store, tmp_path: Path) -> None:
    text_dataset(local_store, tmp_path)
    options = {"rank": 0, "world_size": 2, "shuffle": True, "seed": 4}
    direct = reader("t", local_store, **options)
    expected = [list(direct()) for _ in range(3)]
    assert len({tuple(rows) for rows in expected}) == 3
    for use_multiprocess in (False, True):
        assert loader_rows(reader("t", local_store, **options), 3, use_multiprocess=use_multiprocess) == expected
        direct.set_epoch(1)
        resumed = DatasetReader.from_state_dict(direct.state_dict(consumed=13), local_store, rank=0, world_size=2)
        assert loader_rows(resumed, 2, use_multiprocess=use_multiprocess) == [expected[1][13:], expected[2]]


@pytest.mark.slow
@pytest.mark.parametrize("rule", REMAINDER_RULES)
def test_processes_launched_with_rank_and_world_size_read_disjoint_shares(tmp_path: Path, rule: str) -> None:
    folder = tmp_path / "cluster-store"
    everything = text_dataset(open_store(folder), tmp_path)
    script = textwrap.dedent(
        """
        import json, sys
        from datamount.readers import reader
        samples = reader("t", shuffle=True, seed=9, remainder=sys.argv[1])
        json.dump({"rank": samples.rank, "world_size": samples.world_size, "rows": list(samples())}, sys.stdout)
        """
    )
    world = 3
    launched = [
        subprocess.Popen(
            [sys.executable, "-c", script, rule],
            env={**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "DATAMOUNT_STORE": str(folder)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    reports = []
    for process in launched:
        out, err = process.communicate(timeout=90)
        assert process.returncode == 0, err
        reports.append(json.loads(out))
    assert [(report["rank"], report["world_size"]) for report in reports] == [(rank, world) for rank in range(world)]
    check_rule([[tuple(row) for row in report["rows"]] for report in reports], everything, rule)


TORCH_SCRIPT = """
import json, sys
import torch.utils.data
from datamount.readers.dataset import DatasetReader, reader
from datamount.readers.errors import ReaderStateError

class Samples(torch.utils.data.IterableDataset):
    def __init__(self, samples):
        self.samples = samples

    def __iter__(self):
        worker = torch.utils.data.get_worker_info().id
        return ((worker, sample) for sample in self.samples())

def read(samples, workers, batch_size, batches=None):
    loader = torch.utils.data.DataLoader(
        Samples(samples), batch_size=batch_size, num_workers=workers, collate_fn=list, multiprocessing_context="fork"
    )
    taken = []
    for number, batch in enumerate(loader):
        if number == batches:
            break
        taken.extend(batch)
    return taken

store, before, after, batch_size, batches = sys.argv[1], *map(int, sys.argv[2:])
options = dict(rank=1, world_size=2, shuffle=True, seed=6, worker_chunk=batch_size)
samples = reader("t", store, **options)
whole = [list(sample) for sample in samples()]
samples.set_epoch(0)
first = read(samples, before, batch_size, batches)
state = samples.state_dict(consumed=len(first))
resumed = DatasetReader.from_state_dict(state, store, rank=1, world_size=2, worker_chunk=batch_size)
resumed.set_epoch(state["epoch"])
rest = read(resumed, after, batch_size)
resumed.set_epoch(state["epoch"] + 1)
following = read(resumed, after, batch_size)
samples.set_epoch(1)
json.dump({"whole": whole, "first": first, "rest": rest, "following": following, "next": list(samples())}, sys.stdout)
"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is not installed")
@pytest.mark.parametrize(("before", "after", "batches"), [(2, 3, 3), (3, 1, 5), (1, 2, 0)])
def test_pytorch_dataloader_workers_hand_out_the_share_in_order_and_resume_with_another_worker_count(
    local_store: Store, tmp_path: Path, before: int, after: int, batches: int
) -> None:
    text_dataset(local_store, tmp_path)
    batch_size = 4
    # torch is imported in a child process only: this one, which forks other workers, stays free of its threads.
    arguments = [local_store.url, *(str(number) for number in (before, after, batch_size, batches))]
    done = subprocess.run(
        [sys.executable, "-c", TORCH_SCRIPT, *arguments], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    whole = report["whole"]
    first, rest = report["first"], report["rest"]
    assert len(first) == batches * batch_size
    assert [sample for _, sample in first + rest] == whole
    for part in (first, rest):
        assert {worker for worker, _ in part} == set(range(before if part is first else after)) or not part
    assert [sample for _, sample in report["following"]] == [list(row) for row in report["next"]]
