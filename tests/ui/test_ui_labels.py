"""The label histogram: numbers in numeric order, any other text as text (digits of other scripts included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from datamount.datasets import upload
from datamount.storage import open_store
from datamount.ui.browse import Browser
from datamount.ui.stores import StoreShelf


@pytest.mark.parametrize(
    ("labels", "order"),
    [
        (["10", "-3", "2", "2"], ["-3", "2", "10"]),
        (["²", "1", "--5", "١"], ["--5", "1", "²", "١"]),
    ],
    ids=["numbers", "not-numbers"],
)
def test_labels_are_counted_in_their_order(tmp_path: Path, labels: list[str], order: list[str]) -> None:
    listed = tmp_path / "pairs.list"
    listed.write_text("".join(f"text {index}\t{label}\n" for index, label in enumerate(labels)), encoding="utf-8")
    store = open_store(tmp_path / "store")
    manifest = upload(listed, "d", store=store, kind="text").manifest
    histogram = Browser(StoreShelf({"k": store})).histogram("k", manifest, 1)
    assert [label for label, _ in histogram.bars] == order
    assert sum(rows for _, rows in histogram.bars) == len(labels)
