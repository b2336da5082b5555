"""Weighted mixtures: deterministic choices, the stop rules, parts in different stores, and elastic resume proven
by a ledger per part (killed at random points, resumed under random topologies)."""

from __future__ import annotations

import itertools
import json
import pickle
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamount.datasets.pack import pack
from datamount.datasets.upload import upload
from datamount.readers import Mixture, ReaderStateError, mix, reader
from datamount.readers.ledger import Ledger, check
from datamount.readers.mixture import EPOCH_STRIDE
from datamount.storage import Store, open_store
from tests.servers.fault_proxy import Fault, FaultProxyFactory
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server

SIZES = {"big": 97, "mid": 41, "tiny": 13}
BATCH = 4


def make(store: Store, folder: Path, name: str, rows: int, *, packed: bool) -> None:
    listing = folder / f"{name}.list"
    listing.write_text("".join(f"{name}{i}\tt{i}\n" for i in range(rows)), encoding="utf-8")
    upload(listing, name, store=store)
    if packed:
        pack(name, store=store, row_group_bytes=40, shard_bytes=400)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Store]:
    """``big`` and ``tiny`` packed in one store, ``mid`` unpacked in another: parts from different stores."""
    folder = tmp_path_factory.mktemp("mixture")
    first, second = open_store(str(folder / "first")), open_store(str(folder / "second"))
    make(first, folder, "big", SIZES["big"], packed=True)
    make(second, folder, "mid", SIZES["mid"], packed=False)
    make(first, folder, "tiny", SIZES["tiny"], packed=True)
    return {"big": first, "mid": second, "tiny": first}


def parts(stores: dict[str, Store], names: list[str], **options: Any) -> dict[str, Any]:
    options = {"shuffle": True, "seed": 4, "remainder": "uneven", "with_row": True, "rows_per_span": 5, **options}
    return {name: reader(name, stores[name], **options) for name in names}


def test_a_mixture_draws_by_weight_from_a_seed_and_says_where_each_sample_came_from(stores: dict[str, Store]) -> None:
    weights = {"big": 0.7, "mid": 0.2, "tiny": 0.1}
    mixture = mix(weights, readers=parts(stores, list(weights)), seed=9, samples=3000, with_part=True)
    drawn = list(mixture())
    again = mix(weights, readers=parts(stores, list(weights)), seed=9, samples=3000, with_part=True)
    assert list(again()) == drawn  # the same seed, the same samples
    assert len(drawn) == len(mixture) == 3000
    counts = Counter(name for name, *_ in drawn)
    for name, weight in weights.items():
        assert abs(counts[name] / 3000 - weight) < 0.03, counts
    for name, epoch, row, text, _ in drawn:
        assert text == f"{name}{row}" and epoch // EPOCH_STRIDE == 0
    # tiny (13 rows) ran out many times: each of its epochs is one pass of its rows, in its own order.
    tiny = [(epoch, row) for name, epoch, row, *_ in drawn if name == "tiny"]
    by_epoch = {epoch: [row for e, row in tiny if e == epoch] for epoch in {e for e, _ in tiny}}
    complete = [rows for epoch, rows in by_epoch.items() if epoch != max(by_epoch)]
    assert len(complete) >= 15 and all(sorted(rows) == list(range(13)) for rows in complete)
    assert list(mix(weights, readers=parts(stores, list(weights)), seed=10, samples=3000)()) != drawn


def test_the_stop_rules(stores: dict[str, Store]) -> None:
    names = ["big", "tiny"]
    first = list(mix({"big": 1, "tiny": 1}, readers=parts(stores, names), stop="first_exhausted", with_part=True)())
    counts = Counter(name for name, *_ in first)
    assert counts["tiny"] == 13 and counts["big"] < 97  # ended when tiny ran out
    every = list(mix({"big": 1, "tiny": 1}, readers=parts(stores, names), stop="all_exhausted", with_part=True)())
    big = sorted(row for name, _, row, *_ in every if name == "big")
    assert big == list(range(97))  # big read whole; tiny read again and again meanwhile
    assert Counter(name for name, *_ in every)["tiny"] > 13
    assert len({epoch for name, epoch, *_ in every if name == "tiny"}) > 1


def test_parts_keep_their_own_pins_and_stores(stores: dict[str, Store], tmp_path: Path) -> None:
    other = open_store(str(tmp_path / "other"))
    make(other, tmp_path, "mid", 41, packed=False)
    make(other, tmp_path, "mid", 5, packed=False)  # mid@2: "mid" now means 5 rows
    pinned = {"big": reader("big", stores["big"]), "mid": reader("mid@1", other)}
    mixture = mix({"big": 1, "mid": 1}, readers=pinned, stop="all_exhausted")
    assert sum(1 for sample in mixture() if sample[0].startswith("mid")) >= 41
    assert "mid@1" in repr(pinned["mid"])


def test_mistakes_are_named(stores: dict[str, Store]) -> None:
    with pytest.raises(ValueError, match="the weight of part 'big' must be a number > 0"):
        mix({"big": 0}, stores["big"])
    with pytest.raises(ValueError, match="stop must be one of"):
        mix({"big": 1}, stores["big"], stop="never")
    with pytest.raises(ValueError, match="readers mid have no weight"):
        mix({"big": 1}, stores["big"], readers=parts(stores, ["mid"]))
    mixture = mix({"big": 1}, stores["big"])
    with pytest.raises(ReaderStateError, match="the parts must be the same datasets"):
        mixture.load_state_dict(mix({"tiny": 1}, stores["tiny"]).state_dict())
    with pytest.raises(ReaderStateError, match="not a mixture state"):
        mixture.load_state_dict(reader("big", stores["big"]).state_dict())
    going = mix({"big": 1}, stores["big"])
    next(iter(going()))
    mid_pass = going.state_dict()
    with pytest.raises(ReaderStateError, match="passes 0 and 1 of the mixture, and pass 0 was not over"):
        mixture.load_state_dict([mid_pass, {**mid_pass, "epoch": 1}])


# ------------------------------------------------------------------------------------- killed and resumed, any size


@dataclass
class Topology:
    ranks: int
    workers: int
    batches: int


def run(
    make_mixture: Any,
    topology: Topology,
    states: list[dict[str, Any]],
    ledgers: dict[str, list[Ledger]],
    *,
    to_the_end: bool,
) -> list[dict[str, Any]]:
    saved: list[dict[str, Any]] = []
    for rank in range(topology.ranks):
        main: Mixture = make_mixture(rank, topology.ranks)
        if states:
            main.load_state_dict(states)
        here = {name: Ledger(SIZES[name]) for name in main.parts}
        limit = None if to_the_end else topology.batches * BATCH
        if topology.workers == 0:
            _take(main(), here, limit)
            saved.append(main.state_dict())
        else:
            copies = []
            for worker in range(topology.workers):
                copy: Mixture = pickle.loads(pickle.dumps(main))
                copy._assign_worker(worker, topology.workers)
                copies.append(copy)
            passes = [copy() for copy in copies]
            taken, ended = 0, set()
            for worker in itertools.cycle(range(len(passes))):
                if len(ended) == len(passes) or (limit is not None and taken >= limit):
                    break
                if worker in ended:
                    continue
                got = _take(passes[worker], here, BATCH)
                taken += got
                if got < BATCH:
                    ended.add(worker)
            saved.extend(copy.state_dict() for copy in copies)
        for name, ledger in here.items():
            ledgers[name].append(Ledger.from_state_dict(json.loads(json.dumps(ledger.state_dict()))))
    return json.loads(json.dumps(saved))


def _take(samples: Iterator[tuple[Any, ...]], ledgers: dict[str, Ledger], limit: int | None) -> int:
    taken = 0
    for name, epoch, row, text, _ in itertools.islice(samples, limit):
        assert text == f"{name}{row}"
        ledgers[name].record(epoch, row)
        taken += 1
    return taken


@settings(max_examples=40, deadline=None)
@given(
    names=st.lists(st.sampled_from(sorted(SIZES)), min_size=1, max_size=3, unique=True),
    weights=st.lists(st.integers(1, 5), min_size=3, max_size=3),
    stop=st.sampled_from(["first_exhausted", "all_exhausted", "samples"]),
    shuffle=st.booleans(),
    plan=st.lists(st.builds(Topology, st.integers(1, 8), st.integers(0, 4), st.integers(0, 5)), min_size=1, max_size=3),
)
def test_a_killed_mixture_resumed_under_any_topology_reads_no_part_row_twice_in_a_part_epoch(
    stores: dict[str, Store], names: list[str], weights: list[int], stop: str, shuffle: bool, plan: list[Topology]
) -> None:
    rule = {"samples": 60} if stop == "samples" else {"stop": stop}

    def make_mixture(rank: int, world_size: int) -> Mixture:
        readers = parts(stores, names, shuffle=shuffle, rank=rank, world_size=world_size)
        return mix(dict(zip(names, weights, strict=False)), readers=readers, seed=5, with_part=True, **rule)

    ledgers: dict[str, list[Ledger]] = {name: [] for name in names}
    states: list[dict[str, Any]] = []
    for index, topology in enumerate(plan):
        states = run(make_mixture, topology, states, ledgers, to_the_end=index == len(plan) - 1)
    for name in names:
        reports = check(ledgers[name])
        assert all(report.duplicates == 0 for report in reports), (name, reports)
        if stop == "all_exhausted":  # every part ran out in every process: its first epoch is read whole
            (first,) = [report for report in reports if report.epoch == 0]
            assert first.exact, (name, first)


def _through_dataloader_spawn(mixture: Mixture) -> list[tuple[Any, ...]]:
    from datamount.readers import DataLoader

    loader = DataLoader.from_generator(capacity=4, use_multiprocess=True, mp_context="spawn")
    loader.set_sample_generator(mixture, batch_size=5, drop_last=False)
    return [sample for columns in loader() for sample in zip(*columns, strict=True)]


def _through_torch_workers(mixture: Mixture) -> list[tuple[Any, ...]]:
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader as TorchLoader

    from datamount.torch import ReaderDataset

    loader = TorchLoader(ReaderDataset(mixture), batch_size=None, num_workers=2, multiprocessing_context="spawn")
    return [tuple(sample) for sample in loader]


@pytest.mark.slow
@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
@pytest.mark.parametrize("through", [_through_dataloader_spawn, _through_torch_workers], ids=["dataloader", "torch"])
def test_a_mixture_on_a_remote_store_in_spawned_workers_reads_every_part_row_once(
    store: Store, tmp_path: Path, through: Any
) -> None:
    for name in ("big", "tiny"):
        make(store, tmp_path, name, SIZES[name], packed=name == "big")
    mixture = mix(
        {"big": 3, "tiny": 1},
        readers=parts({"big": store, "tiny": store}, ["big", "tiny"]),
        stop="all_exhausted",
        seed=2,
        with_part=True,
    )
    ledgers = {"big": Ledger(SIZES["big"]), "tiny": Ledger(SIZES["tiny"])}
    for name, epoch, row, text, _ in through(mixture):
        assert text == f"{name}{row}"
        ledgers[str(name)].record(int(epoch), int(row))
    for name, ledger in ledgers.items():
        first = next(report for report in check([ledger]) if report.epoch == 0)
        assert first.exact, (name, first)  # every worker ran out of each part: its first epoch was read whole, once


@pytest.mark.s3
def test_a_mixture_pass_asks_for_every_part_at_once(
    s3_server: S3Server, s3_bucket: str, fault_proxy: FaultProxyFactory, tmp_path: Path
) -> None:
    keys = {"key": S3_TEST_KEY, "secret": S3_TEST_SECRET}
    direct = open_store(f"s3://{s3_bucket}/mixed", endpoint_url=s3_server.endpoint_url, **keys)
    for name, rows in SIZES.items():
        make(direct, tmp_path, name, rows, packed=True)
    proxy = fault_proxy(s3_server.endpoint_url)
    far = open_store(f"s3://{s3_bucket}/mixed", endpoint_url=proxy.endpoint_url, **keys)
    mixture = mix(dict.fromkeys(SIZES, 1), far, samples=10)
    delay = 0.5
    proxy.inject(Fault.delay(delay), methods=["GET"], containing="/packs/")  # a store far away
    samples = mixture()
    next(samples)
    samples.close()  # waits for every part's first read
    first_asked = {}
    for request in proxy.requests:
        name = next((name for name in SIZES if f"/mixed/datasets/{name}/packs/" in unquote(request.target)), None)
        if name is not None and request.method == "GET":
            first_asked.setdefault(name, request.received)
    # Each part's shard was asked for at the start, not when the part was first drawn (after another's answer).
    assert set(first_asked) == set(SIZES)
    assert max(first_asked.values()) - min(first_asked.values()) < delay, first_asked
