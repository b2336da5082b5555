"""A window of rows near the start of a list is read from the list's head alone: the first page of a version of a
million rows does not wait for the whole list to be decoded."""

from __future__ import annotations

from pathlib import Path

import pytest

from datamount.datasets import catalog, layout, open_rows, upload
from datamount.datasets.rows.listed import HEAD_BYTES
from datamount.storage import Store


@pytest.fixture
def long_text(local_store: Store, tmp_path: Path) -> tuple[Store, list[tuple[str, str]]]:
    """A text version whose list is twice :data:`HEAD_BYTES` long, of rows of varied lengths."""
    rows, size = [], 0
    while size < 2 * HEAD_BYTES:
        index = len(rows)
        rows.append((f"source {index} " + "x" * (index % 37), f"target {index % 5}"))
        size += len(rows[-1][0]) + len(rows[-1][1]) + 2
    (tmp_path / "long.list").write_text("".join(f"{a}\t{b}\n" for a, b in rows), encoding="utf-8")
    upload(tmp_path / "long.list", "long", store=local_store, kind="text")
    return local_store, rows


def break_the_tail(store: Store) -> None:
    """Make every byte of the stored list past its head invalid UTF-8: a read of the whole list fails."""
    path = store.local_path(layout.list_path(catalog.resolve(store, "long@1")))
    with open(path, "r+b") as stored:
        stored.seek(HEAD_BYTES + 10)
        stored.write(b"\xff" * 64)


def test_the_first_rows_come_from_the_head_of_the_list(long_text: tuple[Store, list[tuple[str, str]]]) -> None:
    store, rows = long_text
    break_the_tail(store)
    source = open_rows(store, catalog.resolve(store, "long@1"))
    assert list(source.rows(0, 50)) == rows[:50]
    assert source.row(1000) == rows[1000]
    last_whole = HEAD_BYTES // 80  # well inside the head: no row is longer than 64 bytes
    assert list(source.rows(last_whole - 5, last_whole)) == rows[last_whole - 5 : last_whole]


def test_rows_past_the_head_are_read_from_the_whole_list(long_text: tuple[Store, list[tuple[str, str]]]) -> None:
    store, rows = long_text
    source = open_rows(store, catalog.resolve(store, "long@1"))
    assert list(source.rows(0, 10)) == rows[:10]
    assert list(source.rows(len(rows) - 3, len(rows) + 5)) == rows[-3:]
    assert source.row(len(rows) - 1) == rows[-1]
    assert list(source.rows(0, len(rows))) == rows
