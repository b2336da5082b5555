"""Dataset names: one name, one folder, and no folder inside another dataset's."""

from __future__ import annotations

from pathlib import Path

import pytest

from datamount.datasets import catalog, layout, upload
from datamount.datasets.errors import InvalidDatasetNameError
from datamount.datasets.names import validate_name
from datamount.readers import reader
from datamount.storage import Store


def write_list(folder: Path, name: str, words: list[str]) -> Path:
    path = folder / f"{name}.list"
    path.write_text("".join(f"{word}\t{word.upper()}\n" for word in words), encoding="utf-8")
    return path


def test_names_collide_no_more_a_dataset_and_its_namespace_live_side_by_side(store: Store, tmp_path: Path) -> None:
    upload(write_list(tmp_path, "team", ["a", "b"]), "team", store=store)
    upload(write_list(tmp_path, "x", ["c"]), "team/x", store=store)
    assert sorted(catalog.dataset_names(store)) == ["team", "team/x"]
    assert [summary.name for summary in catalog.summaries(store)] == ["team", "team/x"]
    catalog.remove(store, "team")
    assert [summary.name for summary in catalog.summaries(store)] == ["team/x"]  # team's folder keeps its numbers
    assert list(reader("team/x", store)()) == [("c", "C")]
    upload(write_list(tmp_path, "again", ["d"]), "team", store=store)
    catalog.remove(store, "team/x")
    assert [summary.name for summary in catalog.summaries(store)] == ["team"]
    assert list(reader("team", store)()) == [("d", "D")]
    assert catalog.versions(store, "team") == [2]


@pytest.mark.parametrize("word", layout.OWN_FOLDERS)
def test_names_collide_no_more_the_layouts_own_words_are_reserved(word: str) -> None:
    with pytest.raises(InvalidDatasetNameError, match="reserved"):
        validate_name(f"team/{word}")
    with pytest.raises(InvalidDatasetNameError, match="reserved"):
        validate_name(word)


@pytest.mark.parametrize("text", ["cats\n", "cats\r\n", "team/cats\n", "\ncats"])
def test_names_collide_no_more_a_name_matches_as_a_whole(text: str) -> None:
    with pytest.raises(InvalidDatasetNameError):
        validate_name(text)
