"""Reader statistics under PyTorch: each DataLoader worker measures and reports its own passes, the process that
iterates the loader adds them up (``ReaderDataset.stats()``), and :func:`gather_stats` adds up every rank's."""

from __future__ import annotations

import json
import multiprocessing
import socket
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

from datamount.datasets.upload import upload  # noqa: E402
from datamount.readers import reader  # noqa: E402
from datamount.storage import Store, open_store  # noqa: E402
from datamount.torch import ReaderDataset, StatefulDataLoader, gather_stats  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:'set_vital' is deprecated", "ignore:This DataLoader will create 3 worker processes"
)
ROWS = 101
BATCH = 4


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    folder = tmp_path_factory.mktemp("torch-stats")
    opened = open_store(str(folder / "store"))
    listing = folder / "rows.list"
    listing.write_text("".join(f"s{i}\tt{i}\n" for i in range(ROWS)), encoding="utf-8")
    upload(listing, "rows", store=opened, kind="text", packed=True)
    return opened


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def rows_read(loader: Any) -> int:
    return sum(len(sources) for sources, _targets in loader)


@pytest.mark.parametrize("persistent", [False, True], ids=["new-workers-each-epoch", "persistent-workers"])
def test_workers_write_their_lines_and_the_loader_process_adds_them_up(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, persistent: bool
) -> None:
    path = tmp_path / "stats.jsonl"
    monkeypatch.setenv("DATAMOUNT_STATS_FILE", str(path))
    dataset = ReaderDataset(reader("rows", store))
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, num_workers=2, persistent_workers=persistent)
    for epoch in range(2):
        dataset.set_epoch(epoch)
        assert rows_read(loader) == ROWS
    lines = lines_of(path)
    finals = sorted((line["pass"], line["worker"]) for line in lines if line["final"])
    assert finals == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert sum(line["samples"] for line in lines) == 2 * ROWS
    stats = dataset.stats()
    assert (stats["passes"], stats["samples"]) == (2, 2 * ROWS)
    assert stats["pass"]["samples"] == ROWS  # the last epoch's, both workers
    assert stats["waited_s"] + stats["compute_s"] > 0
    assert stats["bytes_verified"] == sum(line["bytes_verified"] for line in lines) > 0


def test_a_stateful_loader_over_workers_adds_them_up_each_epoch(store: Store) -> None:
    dataset = ReaderDataset(reader("rows", store))
    loader = StatefulDataLoader(dataset, batch_size=BATCH, num_workers=3)
    assert rows_read(loader) == ROWS
    assert dataset.stats()["samples"] == ROWS
    assert rows_read(loader) == ROWS
    stats = dataset.stats()
    assert (stats["passes"], stats["samples"], stats["pass"]["samples"]) == (2, 2 * ROWS, ROWS)


def test_without_workers_the_dataset_reports_its_own_reader(store: Store) -> None:
    dataset = ReaderDataset(reader("rows", store))
    assert rows_read(torch.utils.data.DataLoader(dataset, batch_size=BATCH)) == ROWS
    assert dataset.stats() == dataset.samples.stats()
    assert dataset.stats()["samples"] == ROWS


@pytest.mark.slow
def test_spawned_workers_add_up_too(store: Store) -> None:
    dataset = ReaderDataset(reader("rows", store))
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, num_workers=2, multiprocessing_context="spawn")
    assert rows_read(loader) == ROWS
    assert dataset.stats()["samples"] == ROWS


def _rank(rank: int, port: int, url: str, results: Any) -> None:
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        samples = reader("rows", url, rank=rank, world_size=2, remainder="uneven")
        read = sum(1 for _ in samples())
        results.put((rank, read, gather_stats(samples.stats())))
    finally:
        torch.distributed.destroy_process_group()


def test_gather_stats_adds_up_every_rank(store: Store) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    ranks = [context.Process(target=_rank, args=(rank, port, store.url, results)) for rank in range(2)]
    for process in ranks:
        process.start()
    found = sorted(results.get(timeout=120) for _ in ranks)
    for process in ranks:
        process.join(timeout=30)
        assert process.exitcode == 0
    (_, first, gathered), (_, second, same) = found
    assert first + second == ROWS
    assert gathered == same
    assert (gathered["samples"], gathered["passes"]) == (ROWS, 1)


def test_gather_stats_without_a_process_group_is_the_rank_itself(store: Store) -> None:
    samples = reader("rows", store)
    list(samples())
    assert gather_stats(samples.stats()) == samples.stats()
