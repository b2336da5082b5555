"""``datamount diff``: the versions it picks from what the command line names, its summary line, label table and
sample rows, and its ``--json`` document (``docs/cli.md``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from datamount.cli.formatting import JSON_FORMAT
from datamount.cli.main import cli
from datamount.datasets import upload
from datamount.storage import open_store


def write_pairs(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text("".join(f"{source}\t{target}\n" for source, target in rows), encoding="utf-8")
    return path


@pytest.fixture
def store_dir(tmp_path: Path) -> str:
    """Three versions of a text dataset ``pairs`` and one of ``other``."""
    folder = str(tmp_path / "store")
    store = open_store(folder)
    versions = [
        [("a", "1"), ("b", "1"), ("c", "2")],
        [("a", "1"), ("b", "2"), ("d", "2"), ("e", "[bold]x[/bold]")],
        [("a", "1"), ("f", "3")],
    ]
    for number, rows in enumerate(versions):
        upload(write_pairs(tmp_path / f"v{number}.list", rows), "pairs", store=store, kind="text")
    upload(write_pairs(tmp_path / "other.list", [("a", "1")]), "other", store=store, kind="text")
    return folder


def run(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, result.output
    return result.output


def run_json(*args: str) -> dict[str, Any]:
    document = json.loads(run(*args, "--json"))
    assert (document["datamount"], document["format"]) == ("diff", JSON_FORMAT)
    return document


def test_the_text_shows_the_counts_the_labels_and_samples(store_dir: str) -> None:
    lines = run("diff", "pairs@1", "pairs@2", "--store", store_dir).splitlines()
    assert lines[0] == "pairs@1 -> pairs@2: 2 added, 1 removed, 1 changed, 1 unchanged (3 rows -> 4)"
    table = [line.split() for line in lines[1 : lines.index("added (2):")]]
    assert table == [
        ["label", "pairs@1", "pairs@2", "change"],
        ["1", "2", "1", "-1"],
        ["2", "1", "2", "+1"],
        ["[bold]x[/bold]", "0", "1", "+1"],  # user data, shown as it is
    ]
    rest = lines[lines.index("added (2):") :]
    assert [line.split() for line in rest] == [
        ["added", "(2):"],
        ["row", "source", "target"],
        ["2", "d", "2"],
        ["3", "e", "[bold]x[/bold]"],
        ["removed", "(1):"],
        ["row", "source", "target"],
        ["2", "c", "2"],
        ["changed", "(1):"],
        ["row", "a", "row", "b", "source", "target", "a", "target", "b"],
        ["1", "1", "b", "1", "2"],
    ]
    assert "the first 1" in run("diff", "pairs@1", "pairs@2", "-n", "1", "--store", store_dir)


@pytest.mark.parametrize(
    ("names", "refs"),
    [
        (["pairs@1", "pairs@3"], ("pairs@1", "pairs@3")),
        (["pairs@1", "pairs"], ("pairs@1", "pairs@3")),  # a plain name: the latest
        (["pairs@1"], ("pairs@1", "pairs@3")),  # against the latest
        (["pairs"], ("pairs@2", "pairs@3")),  # the latest against the version before it
        (["pairs@2", "other"], ("pairs@2", "other@1")),  # another dataset
    ],
    ids=["two-versions", "against-a-plain-name", "one-version", "one-name", "another-dataset"],
)
def test_the_versions_compared(store_dir: str, names: list[str], refs: tuple[str, str]) -> None:
    document = run_json("diff", *names, "--store", store_dir)
    assert (document["a"]["ref"], document["b"]["ref"]) == refs


def test_a_dataset_of_one_version_or_none_is_a_clear_error(store_dir: str) -> None:
    output = run("diff", "other", "--store", store_dir, code=2)
    assert "other has one version (@1): name two to compare" in output
    assert "no dataset named 'nope'" in run("diff", "nope", "pairs", "--store", store_dir, code=3)
    assert "dataset pairs has no version 9" in run("diff", "pairs@9", "--store", store_dir, code=3)


def test_the_json_document(store_dir: str) -> None:
    document = run_json("diff", "pairs@1", "pairs@2", "--samples", "1", "--store", store_dir)
    assert document["a"] == {
        "ref": "pairs@1",
        "dataset": "pairs",
        "version": 1,
        "kind": "text",
        "columns": ["source", "target"],
        "rows": 3,
        "files": 0,
        "shards": 0,
        "list": True,
        "splits": {},
    }
    assert document["compared"] == "rows"
    assert document["rows"] == {
        "added": 2,
        "removed": 1,
        "changed": 1,
        "unchanged": 1,
        "changed_bytes": 0,
        "changed_labels": 1,
    }
    assert document["label_counts"] == {"a": {"1": 2, "2": 1}, "b": {"1": 1, "2": 2, "[bold]x[/bold]": 1}}
    assert document["distinct_labels"] == {"a": 2, "b": 3}
    assert document["files"] == {"added": 0, "removed": 0, "changed": 0, "unchanged": 0}
    assert document["samples"] == {
        "added": [{"key": "d", "row_a": None, "row_b": 2, "label_a": None, "label_b": "2", "bytes_changed": False}],
        "removed": [{"key": "c", "row_a": 2, "row_b": None, "label_a": "2", "label_b": None, "bytes_changed": False}],
        "changed": [{"key": "b", "row_a": 1, "row_b": 1, "label_a": "1", "label_b": "2", "bytes_changed": False}],
    }
    assert (document["kind_changed"], document["columns_added"], document["columns_removed"]) == (False, [], [])
    assert document["notes"] == []


def test_many_labels_are_cut_to_those_that_changed_most(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    first = [(f"k{i}", f"l{i}") for i in range(40)]
    second = [(key, "l0") if i < 5 else (key, label) for i, (key, label) in enumerate(first)]
    for number, rows in enumerate((first, second)):
        upload(write_pairs(tmp_path / f"{number}.list", rows), "many", store=store, kind="text")
    lines = run("diff", "many", "--store", str(tmp_path / "store")).splitlines()
    table = [line.split() for line in lines[1 : lines.index("changed (4):")]]
    assert table[0] == ["label", "many@1", "many@2", "change"]
    shown = {row[0]: row[1:] for row in table[1:-1]}
    assert shown["l0"] == ["1", "5", "+4"] and all(shown[f"l{i}"] == ["1", "0", "-1"] for i in range(1, 5))
    assert list(shown)[:3] == ["l0", "l1", "l10"]  # in label order (text: as text)
    assert len(shown) == 30 and " ".join(table[-1]) == "... and 10 more labels whose counts changed less (--json)"


def test_targets_that_are_not_classes_get_no_table(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    rows = [(f"sentence {i}", f"phrase {i}") for i in range(10_001)]
    for number, found in enumerate((rows, rows[1:])):
        upload(write_pairs(tmp_path / f"{number}.list", found), "corpus", store=store, kind="text")
    lines = run("diff", "corpus", "--store", str(tmp_path / "store")).splitlines()
    assert lines[1] == (
        "labels: 10,001 distinct in corpus@1, 10,000 in corpus@2 (not classes: no table; --json has their counts up "
        "to 10,000)"
    )
    document = run_json("diff", "corpus", "--store", str(tmp_path / "store"))
    assert document["label_counts"] is None and document["distinct_labels"] == {"a": 10_001, "b": 10_000}
    assert document["rows"]["removed"] == 1 and document["rows"]["unchanged"] == 10_000
