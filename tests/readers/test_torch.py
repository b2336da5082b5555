"""``datamount.torch``: a reader in PyTorch's DataLoader workers, and a StatefulDataLoader whose state resumes under
another number of workers and ranks, proven by the ledger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

from datamount.datasets.pack import pack  # noqa: E402
from datamount.datasets.upload import upload  # noqa: E402
from datamount.readers import ReaderStateError, reader  # noqa: E402
from datamount.readers.ledger import Ledger, check  # noqa: E402
from datamount.storage import Store, open_store  # noqa: E402
from datamount.torch import ReaderDataset, RowDataset, StatefulDataLoader, reader_states  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:'set_vital' is deprecated", "ignore:This DataLoader will create 3 worker processes"
)
ROWS = 101
BATCH = 4


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    folder = tmp_path_factory.mktemp("torch")
    opened = open_store(str(folder / "store"))
    listing = folder / "rows.list"
    listing.write_text("".join(f"s{i}\tt{i}\n" for i in range(ROWS)), encoding="utf-8")
    upload(listing, "rows", store=opened)
    pack("rows", store=opened, row_group_bytes=60, shard_bytes=600)
    return opened


def samples(store: Store, **options: Any) -> ReaderDataset:
    options = {"shuffle": True, "seed": 7, "remainder": "uneven", "with_row": True, **options}
    return ReaderDataset(reader("rows", store, **options))


def take(loader: Any, ledger: Ledger, epoch: int, batches: int | None = None) -> int:
    """Record the rows of ``batches`` batches (all, if None) of ``loader`` in ``ledger``; their number."""
    taken = 0
    for taken, (rows, sources, _targets) in enumerate(loader, start=1):
        assert list(sources) == [f"s{row}" for row in rows.tolist()]
        ledger.record(epoch, rows.numpy())
        if taken == batches:
            break
    return taken


def test_a_stateful_loader_saved_with_2_workers_resumes_with_3_and_reads_the_rest_exactly(
    store: Store, tmp_path: Path
) -> None:
    first = StatefulDataLoader(samples(store), batch_size=BATCH, num_workers=2)
    ledger = Ledger(ROWS)
    assert take(first, ledger, 0, batches=7) == 7
    state = json.loads(json.dumps(first.state_dict()))  # through a checkpoint file
    ledger.save(tmp_path / "before.json")
    del first  # the job is killed: its workers and what they read ahead are gone

    resumed = StatefulDataLoader(samples(store), batch_size=BATCH, num_workers=3)
    resumed.load_state_dict(state)
    after = Ledger(ROWS)
    take(resumed, after, 0)
    (report,) = check([Ledger.load(tmp_path / "before.json"), after])
    assert report.exact, report
    assert report.consumed == ROWS


def test_torchdatas_own_loader_resumes_exactly_with_the_same_number_of_workers(store: Store) -> None:
    """torchdata's loader gives each worker its own state back: each worker goes on with its own part."""
    first = stateful.StatefulDataLoader(samples(store), batch_size=BATCH, num_workers=2)
    ledger = Ledger(ROWS)
    take(first, ledger, 0, batches=5)
    state = json.loads(json.dumps(first.state_dict()))
    del first
    resumed = stateful.StatefulDataLoader(samples(store), batch_size=BATCH, num_workers=2)
    resumed.load_state_dict(state)
    take(resumed, ledger, 0)
    (report,) = check([ledger])
    assert report.exact, report


def test_each_pass_of_the_loader_is_the_next_epoch_in_its_own_order(store: Store) -> None:
    loader = StatefulDataLoader(samples(store), batch_size=BATCH, num_workers=2)
    ledger = Ledger(ROWS)
    orders = []
    for epoch in range(2):
        before = ledger.counts(epoch).sum() if epoch in ledger.epochs else 0
        take(loader, ledger, epoch)
        orders.append(int(ledger.counts(epoch).sum() - before))
    assert orders == [ROWS, ROWS]
    assert all(report.exact for report in check([ledger]))
    assert loader.dataset.epoch == 2


def test_two_ranks_with_workers_resume_as_three_ranks_without_workers(store: Store) -> None:
    """Each rank saves its loader's state; a job of another size loads them all (or one, the ranks being in step)."""
    ledgers, states = [], []
    for rank in range(2):
        loader = StatefulDataLoader(samples(store, rank=rank, world_size=2), batch_size=BATCH, num_workers=2)
        ledgers.append(Ledger(ROWS))
        take(loader, ledgers[-1], 0, batches=5)
        states.append(json.loads(json.dumps(loader.state_dict())))
    for rank in range(3):
        loader = StatefulDataLoader(samples(store, rank=rank, world_size=3), batch_size=BATCH, num_workers=0)
        loader.load_state_dict({"ranks": states})
        ledgers.append(Ledger(ROWS))
        take(loader, ledgers[-1], 0)
    (report,) = check(ledgers)
    assert report.exact, report


def test_a_state_without_workers_resumes_with_workers(store: Store) -> None:
    first = StatefulDataLoader(samples(store), batch_size=BATCH, num_workers=0)
    ledger = Ledger(ROWS)
    take(first, ledger, 0, batches=3)
    state = first.state_dict()
    resumed = StatefulDataLoader(samples(store), batch_size=BATCH, num_workers=2)
    resumed.load_state_dict(state)
    take(resumed, ledger, 0)
    (report,) = check([ledger])
    assert report.exact, report


def test_torchs_own_loader_reads_each_epoch_set_with_set_epoch(store: Store) -> None:
    dataset = samples(store, remainder="pad", rank=1, world_size=2)
    assert len(dataset) == 51
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, num_workers=2)
    rows = {}
    for epoch in (0, 1):
        dataset.set_epoch(epoch)
        rows[epoch] = [row for batch in loader for row in batch[0].tolist()]
    expected = {
        epoch: sorted(
            row
            for row, *_ in reader(
                "rows", store, rank=1, world_size=2, shuffle=True, seed=7, with_row=True, remainder="pad"
            )()
        )
        for epoch in (0,)
    }
    assert sorted(rows[0]) == expected[0]
    assert rows[0] != rows[1] and len(rows[1]) == 51


def test_a_row_dataset_gives_random_access_for_samplers(store: Store) -> None:
    dataset = RowDataset(reader("rows", store))
    assert len(dataset) == ROWS and dataset[5] == ("s5", "t5") and dataset[-1] == ("s100", "t100")
    with pytest.raises(IndexError, match="row 101 of 101"):
        dataset[101]
    sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=2, rank=0, shuffle=True, seed=3)
    loader = torch.utils.data.DataLoader(dataset, batch_size=8, sampler=sampler, num_workers=2)
    got = [source for sources, _ in loader for source in sources]
    assert len(got) == 51 and set(got) <= {f"s{i}" for i in range(ROWS)}


def test_states_from_elsewhere_are_refused_clearly(store: Store) -> None:
    with pytest.raises(ReaderStateError, match="no datamount reader state"):
        reader_states({"_snapshot": {"something": 1}})
    with pytest.raises(TypeError, match=r"ReaderDataset takes a reader\(\.\.\.\) or a mix"):
        ReaderDataset([1, 2, 3])  # type: ignore[arg-type]


def test_a_mixture_in_a_stateful_loader_resumes_with_other_workers(store: Store, tmp_path: Path) -> None:
    """A mixture of two parts (packed and shuffled; unpacked, drawn a quarter of the time) in 2 workers, saved
    mid-pass, resumed in 3: no part row twice in a part epoch, and with all_exhausted each part's first epoch read
    whole."""
    from datamount.readers import mix

    def mixture() -> ReaderDataset:
        parts = {
            "rows": reader("rows", store, shuffle=True, seed=1, remainder="uneven", with_row=True),
            "few": reader("rows", store, split=None, rows_per_span=4, use_shards=False, with_row=True),
        }
        return ReaderDataset(mix({"rows": 3, "few": 1}, readers=parts, stop="all_exhausted", with_part=True))

    ledgers = {"rows": Ledger(ROWS), "few": Ledger(ROWS)}

    def take_mixed(loader: Any, batches: int | None) -> None:
        for taken, (names, epochs, rows, sources, _) in enumerate(loader, start=1):
            for name, epoch, row, source in zip(names, epochs.tolist(), rows.tolist(), sources, strict=True):
                assert source == f"s{row}"
                ledgers[name].record(epoch, row)
            if taken == batches:
                return

    first = StatefulDataLoader(mixture(), batch_size=BATCH, num_workers=2)
    take_mixed(first, 20)
    state = json.loads(json.dumps(first.state_dict()))
    del first
    resumed = StatefulDataLoader(mixture(), batch_size=BATCH, num_workers=3)
    resumed.load_state_dict(state)
    take_mixed(resumed, None)
    for name, ledger in ledgers.items():
        reports = check([ledger])
        assert all(report.duplicates == 0 for report in reports), (name, reports)
        assert reports[0].exact, (name, reports[0])
