"""WMT14: stored sentence pairs, dictionaries and Paddle's samples, checked against Paddle's algorithm applied here to
the generated archive."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from datamount.datasets import catalog, public, wmt14
from datamount.datasets.errors import SourceFormatError
from datamount.datasets.rows import ShardRows
from datamount.storage import Store
from tests.datasets.public_files import WmtSource, make_wmt14, md5, registered, tar_bytes


def paddle_dict(words: list[str], size: int) -> dict[str, int]:
    return {word: index for index, word in enumerate(words[:size])}


def paddle_samples(lines: list[str], source: dict[str, int], target: dict[str, int]) -> list[tuple]:
    """What paddle.dataset.wmt14's reader yields for one split file's lines."""
    samples = []
    for line in lines:
        parts = line.strip().split("\t")
        if len(parts) != 2:
            continue
        source_ids = [source.get(word, 2) for word in ["<s>", *parts[0].split(), "<e>"]]
        target_ids = [target.get(word, 2) for word in parts[1].split()]
        if len(source_ids) > 80 or len(target_ids) > 80:
            continue
        samples.append((source_ids, [target["<s>"], *target_ids], [*target_ids, target["<e>"]]))
    return samples


@pytest.fixture
def source(tmp_path: Path) -> Iterator[WmtSource]:
    made = make_wmt14(tmp_path / "files", pairs=15, seed=2)
    with registered(public.get("wmt14").with_checksums({"wmt14.tgz": md5(made.path)})):
        yield made


@pytest.fixture
def installed(source: WmtSource, local_store: Store) -> Store:
    public.install("wmt14", store=local_store, source=source.path.parent)
    return local_store


@pytest.mark.parametrize("split", ["train", "test", "gen"])
@pytest.mark.parametrize("dict_size", [3, 6, 1000])
def test_samples_are_paddles(installed: Store, source: WmtSource, split: str, dict_size: int) -> None:
    creator = {"train": wmt14.train, "test": wmt14.test, "gen": wmt14.gen}[split](dict_size, store=installed)
    expected = paddle_samples(
        source.lines[split], paddle_dict(source.source_dict, dict_size), paddle_dict(source.target_dict, dict_size)
    )
    assert list(creator()) == expected
    assert len(expected) == 16  # 15 pairs and the 80-id pair; malformed lines and longer pairs are left out


def test_the_dictionaries_are_exposed(installed: Store, source: WmtSource) -> None:
    by_id = wmt14.get_dict(5, store=installed)
    assert by_id == (dict(enumerate(source.source_dict[:5])), dict(enumerate(source.target_dict[:5])))
    by_word = wmt14.get_dict(1000, reverse=False, store=installed)
    assert by_word == (paddle_dict(source.source_dict, 1000), paddle_dict(source.target_dict, 1000))


def test_the_stored_rows_are_the_well_formed_pairs(installed: Store, source: WmtSource) -> None:
    manifest = catalog.resolve(installed, "wmt14")
    assert manifest.columns == ["source", "target"]
    expected = [
        tuple(line.split("\t"))
        for split in ("train", "test", "gen")
        for line in source.lines[split]
        if len(line.split("\t")) == 2
    ]
    assert list(ShardRows(installed, manifest).rows(0, manifest.rows)) == expected
    assert sorted(entry.path for entry in manifest.files) == ["src.dict", "trg.dict"]


def test_dict_size_must_hold_the_markers(installed: Store) -> None:
    with pytest.raises(ValueError, match="dict_size must be at least 3"):
        wmt14.train(2, store=installed)


def test_an_archive_without_dictionaries_is_named(tmp_path: Path, local_store: Store) -> None:
    archive = tmp_path / "wmt14.tgz"
    archive.write_bytes(tar_bytes([("wmt14/train/train", b"le chat\tthe cat\n")], "w:gz"))
    with (
        registered(public.get("wmt14").with_checksums({"wmt14.tgz": md5(archive)})),
        pytest.raises(SourceFormatError, match=r"wmt14\.tgz holds 0 files named \*src\.dict; it should hold one"),
    ):
        public.install("wmt14", store=local_store, source=archive)
    assert catalog.dataset_names(local_store) == []
