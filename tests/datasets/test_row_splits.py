"""Splits of a user's own dataset: ``upload --split train=0.9,val=0.1 --seed S``, decided row by row by a seeded
hash, recorded in the manifest and read with ``reader(name, split=...)`` whatever the layout."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from datamount.cli.main import cli
from datamount.datasets import DatasetNotFoundError, catalog
from datamount.datasets.pack import pack
from datamount.datasets.rows.split import parse_fractions, row_splits, split_keys
from datamount.datasets.upload import upload
from datamount.readers import DatasetReader, reader
from datamount.storage import Store
from tests.generated import MakeImageList

MASK = 2**64 - 1


def splitmix64_key(seed: int, row: int) -> float:
    """The documented key of a row, computed the slow way (SplitMix64's ``row + 1``-th output, top 53 bits)."""
    z = (seed + (row + 1) * 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    z ^= z >> 31
    return (z >> 11) / 2**53


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**64 - 1),
    rows=st.integers(0, 3000),
    weights=st.lists(st.integers(1, 20), min_size=1, max_size=4),
)
def test_row_splits_partition_the_rows_by_the_documented_hash(seed: int, rows: int, weights: list[int]) -> None:
    fractions = {f"s{index}": weight / sum(weights) for index, weight in enumerate(weights)}
    recorded = row_splits(fractions, seed, rows)
    keys = split_keys(seed, rows)
    assert [float(key) for key in keys[:20]] == [splitmix64_key(seed, row) for row in range(min(rows, 20))]
    members = [np.flatnonzero((keys >= info["share"][0]) & (keys < info["share"][1])) for info in recorded.values()]
    assert sum(len(m) for m in members) == rows and len(np.unique(np.concatenate([*members, []]))) == rows
    assert [info["rows"] for info in recorded.values()] == [len(m) for m in members]
    assert row_splits(fractions, seed, rows) == recorded  # a function of the seed, the fractions and the row count
    if rows >= 2000:
        for info, fraction in zip(recorded.values(), fractions.values(), strict=True):
            assert abs(info["rows"] / rows - fraction) < 0.05


@pytest.mark.parametrize("layout", ["text", "text-packed", "image", "image-packed-at-upload"])
def test_each_split_reads_its_rows_in_list_order_in_every_layout(
    local_store: Store, tmp_path: Path, make_image_list: MakeImageList, layout: str
) -> None:
    if layout.startswith("text"):
        listing = tmp_path / "t.list"
        listing.write_text("".join(f"s{i}\tt{i}\n" for i in range(300)))
    else:
        listing = make_image_list(300, size=40)
    fractions = {"train": 0.8, "val": 0.15, "test": 0.05}
    upload(listing, "d", store=local_store, split=fractions, split_seed=11, packed=layout.endswith("at-upload"))
    if layout == "text-packed":
        pack("d", store=local_store, row_group_bytes=200)
    whole = list(reader("d", local_store, use_shards=layout != "image")())
    manifest = catalog.resolve(local_store, "d")
    assert manifest.splits == {name: info["rows"] for name, info in row_splits(fractions, 11, 300).items()}
    keys = split_keys(11, 300)
    for name, info in row_splits(fractions, 11, 300).items():
        members = np.flatnonzero((keys >= info["share"][0]) & (keys < info["share"][1])).tolist()
        samples = reader("d", local_store, split=name)
        assert len(samples) == len(members) and list(samples()) == [whole[row] for row in members]
        assert samples[3] == whole[members[3]]
        shares = [
            reader("d", local_store, split=name, shuffle=True, rank=rank, world_size=4, remainder="uneven")()
            for rank in range(4)
        ]
        assert sorted(map(repr, itertools.chain(*shares))) == sorted(map(repr, (whole[row] for row in members)))
    with pytest.raises(DatasetNotFoundError, match="has no 'nope' split \\(it holds: train, val, test\\)"):
        reader("d", local_store, split="nope")


def test_a_split_reader_resumes_on_another_world_size(local_store: Store, tmp_path: Path) -> None:
    listing = tmp_path / "t.list"
    listing.write_text("".join(f"s{i}\tt{i}\n" for i in range(200)))
    upload(listing, "d", store=local_store, split={"train": 0.7, "val": 0.3}, split_seed=2)
    options = {"split": "train", "shuffle": True, "seed": 5, "remainder": "uneven"}
    before = [list(reader("d", local_store, rank=r, world_size=2, **options)())[:9] for r in range(2)]
    state = reader("d", local_store, rank=0, world_size=2, **options).state_dict(consumed=9)
    after = [list(DatasetReader.from_state_dict(state, local_store, rank=r, world_size=3)()) for r in range(3)]
    read = [sample for share in before + after for sample in share]
    assert sorted(read) == sorted(reader("d", local_store, split="train")())


def test_the_split_is_part_of_the_version(local_store: Store, tmp_path: Path) -> None:
    listing = tmp_path / "t.list"
    listing.write_text("".join(f"s{i}\tt{i}\n" for i in range(50)))
    runner = CliRunner()
    store = ["--store", str(local_store.local_path())]
    first = runner.invoke(cli, ["upload", str(listing), "d", *store, "--split", "train=0.9,val=0.1", "--seed", "4"])
    assert first.exit_code == 0, first.output
    assert "splits: train" in first.output
    again = runner.invoke(cli, ["upload", str(listing), "d", *store, "--split", "train=0.9,val=0.1", "--seed", "4"])
    assert "up to date" in again.output
    other = runner.invoke(cli, ["upload", str(listing), "d", *store, "--split", "train=0.9,val=0.1", "--seed", "5"])
    assert other.exit_code == 0 and "uploaded d@2" in other.output, other.output
    assert "splits: train" in runner.invoke(cli, ["info", "d", *store]).output
    for arguments, message in [
        (["--split", "train=0.9,val=0.2"], "add up to 1.1, not 1"),
        (["--split", "train:0.9"], "write NAME=FRACTION pairs"),
        (["--split", "Train=1"], "split name 'Train'"),
        (["--split", "a=0.5,a=0.5"], "given twice"),
        (["--seed", "3"], "--seed goes with --split"),
    ]:
        result = runner.invoke(cli, ["upload", str(listing), "e", *store, *arguments])
        assert result.exit_code == 2 and message in result.output, (arguments, result.output)
        assert not catalog.versions(local_store, "e")
    assert parse_fractions("train=0.5, val=0.5") == {"train": 0.5, "val": 0.5}
