"""A pass with a head start: its first item is read in a thread from the start; nothing is counted, lost or left
open because of it."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from datamount.datasets.upload import upload
from datamount.readers import reader
from datamount.readers.workers import ClosingChain, head_start
from datamount.storage import open_store


def _recorded(events: list[str], started: threading.Event) -> Iterator[int]:
    events.append(threading.current_thread().name)
    started.set()
    try:
        yield from range(3)
    finally:
        events.append("closed")


def test_the_first_item_is_read_in_its_own_thread_before_it_is_asked_for() -> None:
    events: list[str] = []
    started = threading.Event()
    items = head_start(_recorded(events, started))
    assert started.wait(5)  # before any next()
    assert events == ["datamount-head-start"]
    assert list(items) == [0, 1, 2]
    assert events[-1] == "closed"


def test_closing_before_the_first_item_is_taken_closes_the_source() -> None:
    events: list[str] = []
    items = head_start(_recorded(events, threading.Event()))
    items.close()  # waits for the head start, then closes the generator it began
    assert events == ["datamount-head-start", "closed"]
    assert list(items) == []


def test_an_error_of_the_first_item_reaches_the_caller() -> None:
    def failing() -> Iterator[int]:
        raise FileNotFoundError("gone")
        yield 0

    with pytest.raises(FileNotFoundError, match="gone"):
        next(head_start(failing()))
    assert list(head_start(iter([]))) == []


def test_a_pass_with_a_head_start_counts_only_the_samples_taken(tmp_path: Path) -> None:
    listing = tmp_path / "rows.list"
    listing.write_text("".join(f"s{i}\tt{i}\n" for i in range(20)), encoding="utf-8")
    store = open_store(str(tmp_path / "store"))
    upload(listing, "rows", store=store)
    part = reader("rows", store)
    samples = part._read_pass(started=True)
    assert part.state_dict()["position"] == 0  # the sample read ahead is not counted before it is taken
    taken = [next(samples) for _ in range(5)]
    assert part.state_dict()["position"] == 5
    samples.close()
    resumed = reader("rows", store)
    resumed.load_state_dict(part.state_dict())
    assert taken + list(resumed()) == list(reader("rows", store)())


def test_a_closing_chain_hands_out_its_pieces_items_and_closes_them() -> None:
    events: list[str] = []

    def pieces() -> Iterator[list[int]]:
        try:
            yield [1, 2]
            yield [3]
        finally:
            events.append("closed")

    chained = ClosingChain.of(pieces())
    assert type(chained).__next__ is itertools.chain.__next__  # C code per item
    assert [next(chained), next(chained), next(chained)] == [1, 2, 3]
    chained.close()
    assert events == ["closed"]
