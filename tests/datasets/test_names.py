"""Dataset names: one name, one folder, and no folder inside another dataset's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from datamount.datasets import catalog, layout, upload
from datamount.datasets.errors import InvalidDatasetNameError
from datamount.datasets.names import RESERVED, DatasetRef, parse_ref, validate_name
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


@pytest.mark.parametrize("word", sorted(RESERVED))
@pytest.mark.parametrize("spelling", [str.upper, str.title], ids=["upper", "title"])
def test_names_collide_no_more_on_a_store_that_folds_case(word: str, spelling: Callable[[str], str]) -> None:
    """``team/Locks`` would be ``team``'s ``locks`` folder on a case-insensitive store (macOS, Windows)."""
    with pytest.raises(InvalidDatasetNameError, match=f"dataset name 'team/{spelling(word)}' is reserved"):
        validate_name(f"team/{spelling(word)}")
    with pytest.raises(InvalidDatasetNameError, match="reserved"):
        validate_name(spelling(word))


def canonical(text: str) -> bool:
    """Whether ``text`` writes a version number: ASCII digits, not starting with 0, at most 18 of them."""
    return 1 <= len(text) <= 18 and all(character in "0123456789" for character in text) and text[0] != "0"


#: Texts near the rule: digits of other scripts and superscripts (which str.isdigit takes), signs, spaces.
NEAR_DIGITS = st.text(
    st.characters(categories=["Nd", "No", "Zs"]) | st.sampled_from("0123456789+-_ \t\n.eE"), min_size=1, max_size=20
)


@given(st.text(max_size=25) | NEAR_DIGITS)
@example("²")
@example("١")
@example("+1")
@example(" 1")
@example("01")
@example("9" * 19)
def test_a_version_is_written_in_ascii_digits_only(text: str) -> None:
    if canonical(text):
        assert parse_ref(f"k@{text}") == DatasetRef("k", int(text))
        assert str(parse_ref(f"k@{text}")) == f"k@{text}"
        assert layout.version_entry(f"datasets/k/versions/{text}.json") == (int(text), ".json")
        return
    with pytest.raises(InvalidDatasetNameError, match="write NAME@N with N a whole number from 1 in the digits 0-9"):
        parse_ref(f"k@{text}")
    assert layout.version_entry(f"datasets/k/versions/{text}.json") is None


def test_a_versions_folder_counts_only_the_numbers_a_commit_writes(store: Store, tmp_path: Path) -> None:
    upload(write_list(tmp_path, "k", ["a"]), "k", store=store)
    folder = f"{layout.dataset_folder('k')}/{layout.VERSIONS}"
    for stray in ("².json", "١.json", "01.json", "0.json", "1².removed"):
        store.write(f"{folder}/{stray}", store.read(layout.manifest_path("k", 1)))
    assert catalog.versions(store, "k") == [1]
    assert catalog.resolve(store, "k").version == 1
    assert upload(write_list(tmp_path, "k2", ["b"]), "k", store=store).manifest.version == 2
