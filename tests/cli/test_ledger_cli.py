"""``datamount ledger check``: damaged ledgers are one error line with exit status 2, never a traceback or a count
taken on trust; skipped epochs, ledgers of other datasets and folders of any file names are reported."""

from __future__ import annotations

import copy
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datamount.cli.main import cli
from datamount.datasets import upload
from datamount.readers import Ledger, ReaderStateError, reader
from datamount.readers.ledger import MOST_COUNTS, check
from datamount.readers.mixture import EPOCH_STRIDE
from datamount.storage import Store
from tests.generated import MakeImageList


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["ledger", "check", *args])


def good_state() -> dict[str, Any]:
    ledger = Ledger(10, dataset="cats@1")
    ledger.record(0, range(10))
    ledger.record(0, [3, 3])
    return ledger.state_dict()


def damaged(change: Any) -> Any:
    state = copy.deepcopy(good_state())
    return change(state)


def assert_one_error_line(result: Result, *fragments: str) -> None:
    """Exit status 2 and one line ``datamount: error: ...`` naming each fragment: no traceback, not status 1."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit)
    [line] = result.stderr.splitlines()
    assert line.startswith("datamount: error: "), line
    for fragment in fragments:
        assert fragment in line, line


DAMAGED = {
    "negative repeat": (
        lambda s: s["epochs"]["0"]["repeats"].update({"3": -5}) or s,
        "epoch 0: repeats: row 3 is counted again -5 times",
    ),
    "huge repeat": (
        lambda s: s["epochs"]["0"]["repeats"].update({"3": 1 << 40}) or s,
        "epoch 0: repeats: row 3 is counted again 1099511627776 times, not a whole number from 1 to 4294967294",
    ),
    "epoch key not a number": (
        lambda s: {**s, "epochs": {"x": s["epochs"]["0"]}},
        'epoch "x" is not a whole number from 0 to 2**63 - 1',
    ),
    "epochs as a list": (
        lambda s: {**s, "epochs": [s["epochs"]["0"]]},
        "epochs is a list of 1, not an object of epoch: counts",
    ),
    "negative rows": (lambda s: {**s, "rows": -3}, "rows is -3, not a whole number of at least 0"),
    "an empty list": (
        lambda s: [],
        "not a ledger: a JSON object with format, rows and epochs expected, got an empty list",
    ),
    "negative row": (
        lambda s: s["epochs"]["0"]["repeats"].update({"-1": 1}) or s,
        "epoch 0: repeats: row -1 is not one of the ledger's 10 rows (0 .. 9)",
    ),
    "row beyond the rows": (
        lambda s: s["epochs"]["0"]["repeats"].update({"10": 1}) or s,
        "epoch 0: repeats: row 10 is not one of the ledger's 10 rows (0 .. 9)",
    ),
}


@pytest.mark.parametrize("form", list(DAMAGED), ids=list(DAMAGED))
def test_each_damaged_form_is_one_error_line_with_exit_status_2(tmp_path: Path, form: str) -> None:
    change, message = DAMAGED[form]
    (tmp_path / "rank-0.json").write_text(json.dumps(damaged(change)))
    good = Ledger(10, dataset="cats@1")
    good.save(tmp_path / "rank-1.json")
    assert_one_error_line(run(str(tmp_path)), f"{tmp_path / 'rank-0.json'}: ", message)
    with pytest.raises(ReaderStateError, match="ledger state"):
        Ledger.from_state_dict(damaged(change))


def test_a_bitmap_that_marks_rows_beyond_the_ledgers_is_refused(tmp_path: Path) -> None:
    ledger = Ledger(16)
    ledger.record(0, range(16))
    state = ledger.state_dict()
    (tmp_path / "wide.json").write_text(json.dumps({**state, "rows": 13}))
    assert_one_error_line(run(str(tmp_path / "wide.json")), "row 13 is marked seen, not one of the ledger's 13 rows")
    (tmp_path / "narrow.json").write_text(json.dumps({**state, "rows": 40}))
    assert_one_error_line(run(str(tmp_path / "narrow.json")), "seen is not a bitmap of its 40 rows (5 bytes)")


def test_an_epoch_skipped_between_two_recorded_ones_is_reported(tmp_path: Path) -> None:
    ledger = Ledger(5, dataset="cats@1")
    for epoch in (0, 3, 4):
        ledger.record(epoch, range(5))
    ledger.save(tmp_path / "rank-0")
    result = run(str(tmp_path / "rank-0"))
    assert result.exit_code == 1, result.output
    assert "epoch 1-2: skipped: no row consumed" in result.output
    assert "1 ledger, 3 epochs (2 more skipped): NOT exact" in result.output
    document = json.loads(run(str(tmp_path / "rank-0"), "--json").output)
    skipped = [(e["epoch"], e["skipped_through"], e["gaps"]) for e in document["epochs"] if e["skipped"]]
    assert skipped == [(1, 2, 5)] and document["dataset"] == "cats@1"
    assert run(str(tmp_path / "rank-0"), "--epoch", "2").exit_code == 1
    assert run(str(tmp_path / "rank-0"), "--epoch", "3").exit_code == 0


def test_one_ledger_of_a_whole_version_reads_as_one_and_its_split_is_null(tmp_path: Path) -> None:
    """docs/cli.md: ``split`` is ``null`` when the ledgers name none (a reader of the whole version, ``split=""``)."""
    whole = Ledger(4, dataset="cats@1")
    whole.record(0, range(4))
    whole.save(tmp_path / "rank-0")
    text = run(str(tmp_path / "rank-0"))
    assert text.exit_code == 0, text.output
    assert text.output.splitlines()[0] == "ledger of cats@1"
    assert text.output.splitlines()[-1] == "1 ledger, 1 epoch: every row exactly once"
    document = json.loads(run(str(tmp_path / "rank-0"), "--json").output)
    assert (document["ledgers"], document["dataset"], document["split"]) == (1, "cats@1", None)
    split = Ledger(4, dataset="cats@1", split="train")
    split.record(0, range(4))
    split.save(tmp_path / "rank-0")
    assert json.loads(run(str(tmp_path / "rank-0"), "--json").output)["split"] == "train"


def test_a_mixture_pass_in_which_a_part_was_not_drawn_is_no_skipped_epoch(tmp_path: Path) -> None:
    """A part's epochs are ``pass * EPOCH_STRIDE + restart``: the restarts of a pass are consecutive, passes not."""
    part = Ledger(4)
    for epoch in (0, 1, 2 * EPOCH_STRIDE, 2 * EPOCH_STRIDE + 2):
        part.record(epoch, range(4))
    part.save(tmp_path / "part.json")
    result = run(str(tmp_path / "part.json"), "--json")
    skipped = [(e["epoch"], e["skipped_through"]) for e in json.loads(result.output)["epochs"] if e["skipped"]]
    assert skipped == [(2 * EPOCH_STRIDE + 1, 2 * EPOCH_STRIDE + 1)]


def test_ledgers_of_different_datasets_are_refused_naming_both(tmp_path: Path) -> None:
    for name, dataset in (("a.json", "cats@1"), ("b.json", "dogs@2")):
        ledger = Ledger(10, dataset=dataset)
        ledger.record(0, range(10) if name == "a.json" else [])
        ledger.save(tmp_path / name)
    assert_one_error_line(
        run(str(tmp_path / "a.json"), str(tmp_path / "b.json")),
        f"ledgers of different datasets: {tmp_path / 'a.json'} is of cats@1, {tmp_path / 'b.json'} of dogs@2",
    )
    Ledger(10, dataset="cats@1", split="test").save(tmp_path / "b.json")
    assert_one_error_line(run(str(tmp_path / "a.json"), str(tmp_path / "b.json")), "of cats@1 split 'test'")
    with pytest.raises(ReaderStateError, match="a ledger of cats@1 split 'test' cannot load into one of cats@1"):
        Ledger.from_state_dict(
            [Ledger(10, dataset="cats@1").state_dict(), Ledger.load(tmp_path / "b.json").state_dict()]
        )


def test_a_ledger_saved_before_ledgers_named_their_dataset_still_checks_with_a_note(tmp_path: Path) -> None:
    named = Ledger(10, dataset="cats@1")
    named.record(0, range(6))
    named.save(tmp_path / "new.json")
    old = Ledger(10)  # saves what every ledger held before: format, rows and epochs
    old.record(0, range(6, 10))
    assert set(old.state_dict()) == {"format", "rows", "epochs"}
    old.save(tmp_path / "old.json")
    result = run(str(tmp_path / "new.json"), str(tmp_path / "old.json"))
    assert result.exit_code == 0, result.output
    assert f"note: {tmp_path / 'old.json'} name no dataset (saved before ledgers named theirs)" in result.output
    assert "ledgers of cats@1" in result.output


def test_a_folder_is_read_whatever_its_files_are_named(tmp_path: Path) -> None:
    for name, rows in [("rank0", range(4)), ("rank-1.ledger", range(4, 8)), ("sub/r2.txt", [8, 9])]:
        ledger = Ledger(10, dataset="cats@1")
        ledger.record(0, rows)
        ledger.save(tmp_path / "run" / name)
    (tmp_path / "run" / ".rank0.x1y2z3").write_text('{"format": 1, "rows": 10, "ep')  # a save that was killed
    result = run(str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert "3 ledgers, 1 epoch: every row exactly once" in result.output
    (tmp_path / "run" / "notes.txt").write_text("rank 2 ran on node 7\n")
    assert_one_error_line(run(str(tmp_path / "run")), f"{tmp_path / 'run' / 'notes.txt'}: not a ledger: not JSON")


def test_a_ledger_for_a_reader_names_its_dataset_and_split(local_store: Store, make_image_list: MakeImageList) -> None:
    upload(make_image_list(6), "cats", store=local_store)
    samples = reader("cats", local_store, with_row=True)
    ledger = Ledger.for_reader(samples)
    for row, *_ in samples():
        ledger.record(0, row)
    assert (ledger.rows, ledger.dataset, ledger.split) == (6, "cats@1", "")
    assert Ledger.from_state_dict(json.loads(json.dumps(ledger.state_dict()))).dataset == "cats@1"
    with pytest.raises(ReaderStateError, match="a ledger of cats@1 cannot load into one of dogs@1"):
        Ledger(6, dataset="dogs@1").load_state_dict(ledger.state_dict())


# ---------------------------------------------------------------------------------------- any damaged document

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
#: Where in a good ledger a value is replaced.
PLACES = [(), ("format",), ("rows",), ("dataset",), ("split",), ("epochs",), ("epochs", "0"), ("epochs", "0", "seen")]
PLACES += [("epochs", "0", "repeats"), ("epochs", "0", "repeats", "3")]


@st.composite
def damaged_documents(draw: st.DrawFn) -> bytes:
    how = draw(st.sampled_from(["replace", "delete", "rename", "json", "bytes", "cut"]))
    state = good_state()
    text = json.dumps(state).encode()
    if how == "json":
        return json.dumps(draw(JSON)).encode()
    if how == "bytes":
        return draw(st.binary(max_size=64))
    if how == "cut":
        return text[: draw(st.integers(0, len(text) - 1))]
    place = draw(st.sampled_from(PLACES[1:] if how != "replace" else PLACES))
    parent = state
    for key in place[:-1]:
        parent = parent[key]
    if how == "replace" and not place:
        return json.dumps(draw(JSON)).encode()
    if how == "replace":
        parent[place[-1]] = draw(JSON)
    elif how == "delete":
        parent.pop(place[-1], None)
    else:
        parent[draw(st.text(max_size=6))] = parent.pop(place[-1], None)
    return json.dumps(state).encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=damaged_documents())
def test_no_damaged_document_gives_a_traceback(document: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ledger"
        path.write_bytes(document)
        result = run(str(path))
    if result.exit_code == 2:
        assert_one_error_line(result, f"{path}: ")
    else:  # the change left a ledger (a dataset renamed, a row counted again): checked as such
        assert result.exit_code in (0, 1), (result.exit_code, result.output, result.exception)
        assert isinstance(result.exception, SystemExit) or result.exception is None
        assert re.fullmatch(r"1 ledger, [\d,]+ epochs?( \(.+\))?: .+", result.output.splitlines()[-1]), result.output
        assert not result.stderr


def counted(counts: list[int]) -> dict[str, Any]:
    """A saved ledger of epoch 0 in which row ``i`` was consumed ``counts[i]`` times (as many as the format holds)."""
    ledger = Ledger(len(counts), dataset="cats@1")
    ledger.record(0, [row for row, times in enumerate(counts) if times])
    state = ledger.state_dict()
    state["epochs"]["0"]["repeats"] = {str(row): times - 1 for row, times in enumerate(counts) if times > 1}
    return state


def test_a_row_counted_as_often_as_a_ledger_holds_and_once_more_is_never_reported_as_never_read(
    tmp_path: Path,
) -> None:
    """Two ranks' ledgers merged (a resume with fewer ranks) had added their 32-bit counts round to 0."""
    most = Ledger.from_state_dict(counted([MOST_COUNTS, 1]))
    assert most.counts(0).tolist() == [MOST_COUNTS, 1]
    (tmp_path / "rank-0.json").write_text(json.dumps(counted([MOST_COUNTS, 1])))
    (tmp_path / "rank-1.json").write_text(json.dumps(counted([1, 0])))
    document = json.loads(run(str(tmp_path), "--json").output)
    [epoch] = document["epochs"]
    assert (epoch["consumed"], epoch["duplicates"], epoch["gaps"]) == (MOST_COUNTS + 2, 1, 0)
    with pytest.raises(ReaderStateError, match=rf"epoch 0: row 0 is counted {MOST_COUNTS + 1} times in the ledgers"):
        Ledger.from_state_dict([counted([MOST_COUNTS, 1]), counted([1, 0])])
    with pytest.raises(ValueError, match=f"row 0 cannot be counted more than {MOST_COUNTS} times in epoch 0"):
        most.record(0, [1, 0])
    assert most.counts(0).tolist() == [MOST_COUNTS, 1]  # nothing of the refused record is counted


COUNTS = st.sampled_from([0, 1, 2, MOST_COUNTS // 2, MOST_COUNTS - 1, MOST_COUNTS]) | st.integers(0, MOST_COUNTS)


@settings(deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda rows: st.lists(st.lists(COUNTS, min_size=rows, max_size=rows), min_size=1, max_size=3)
    )
)
def test_ledgers_merged_count_what_ledger_check_counts_or_are_refused(ranks: list[list[int]]) -> None:
    states = [counted(counts) for counts in ranks]
    together = check([Ledger.from_state_dict(state) for state in states])
    totals = [sum(column) for column in zip(*ranks, strict=True)]
    assert together[0].consumed == sum(totals)
    if max(totals) > MOST_COUNTS:
        with pytest.raises(ReaderStateError, match="more than a ledger holds"):
            Ledger.from_state_dict(states)
        return
    merged = Ledger.from_state_dict(states)
    assert merged.counts(0).tolist() == totals
    assert check([merged]) == together
