"""The training page's reading of a statistics file: per rank, in bins of time, bad lines named and left out."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamount.ui.stats_file import MAX_BINS, read_stats
from tests.ui.showcase import STATS_INTERVAL_S, STATS_INTERVALS, STATS_RANKS, STATS_WORKERS, write_stats_file


def line(**changes: object) -> dict[str, object]:
    record: dict[str, object] = {
        "format": 1, "time": 1000.0, "rank": 0, "world_size": 1, "worker": None, "dataset": "cats@2", "pass": 0,
        "interval_s": 10.0, "samples": 100, "bytes": 1000, "waited_s": 1.0, "compute_s": 3.0, "requests": 4,
        "retries": 0, "throttled_s": 0.0, "cache_hits": 0, "bytes_verified": 1000, "final": False,
    }  # fmt: skip
    record.update(changes)
    return record


def write(path: Path, lines: list[object]) -> Path:
    path.write_text("".join((text if isinstance(text, str) else json.dumps(text)) + "\n" for text in lines))
    return path


def test_each_rank_adds_up_its_workers_lines(tmp_path: Path) -> None:
    path = tmp_path / "stats.jsonl"
    write_stats_file(path)
    records = [json.loads(text) for text in path.read_text().splitlines()]
    report = read_stats(path)
    assert report.lines == STATS_RANKS * STATS_WORKERS * STATS_INTERVALS and report.problems == []
    assert [summary.rank for summary in report.ranks] == list(range(STATS_RANKS))
    for summary in report.ranks:
        mine = [record for record in records if record["rank"] == summary.rank]
        for key in ("samples", "bytes", "waited_s", "compute_s", "requests", "retries", "throttled_s"):
            assert summary.totals[key] == pytest.approx(sum(record[key] for record in mine))
        assert summary.workers == set(range(STATS_WORKERS)) and summary.passes == {0, 1}
        assert report.bin_s == STATS_INTERVAL_S and len(summary.times) == STATS_INTERVALS
        assert summary.times[0] == STATS_INTERVAL_S and summary.times[-1] == STATS_INTERVALS * STATS_INTERVAL_S
        for index, rate in enumerate(summary.samples_per_s):
            interval = [record for record in mine if record["time"] == mine[0]["time"] + index * STATS_INTERVAL_S]
            assert rate == pytest.approx(sum(record["samples"] for record in interval) / STATS_INTERVAL_S)
    slow = report.ranks[1].wait_share[8:16]
    assert all(share == pytest.approx(0.6) for share in slow)
    assert all(share is not None and share < 0.1 for share in report.ranks[0].wait_share)


def test_the_wait_share_is_the_time_waited_over_that_and_the_training_step(tmp_path: Path) -> None:
    report = read_stats(write(tmp_path / "s.jsonl", [line(), line(time=1010.0, waited_s=3.0, compute_s=1.0)]))
    assert report.ranks[0].wait_share_total == pytest.approx(4.0 / 8.0)
    assert report.ranks[0].wait_share == [pytest.approx(0.25), pytest.approx(0.75)]


def test_a_line_that_is_no_record_is_named_and_left_out(tmp_path: Path) -> None:
    lines: list[object] = [
        line(),
        "{not json",
        line(format=2),
        {key: value for key, value in line().items() if key != "samples"},
        line(waited_s=-1.0),
        line(rank=True),
        "",
        "[1, 2]",
        line(time=1010.0, rank=1, compute_s=-1e-9),  # a difference of rounded times: zero
    ]
    report = read_stats(write(tmp_path / "s.jsonl", lines))
    assert report.lines == 8 and report.problem_count == 6
    assert [problem.split(":")[0] for problem in report.problems] == [f"line {n}" for n in (2, 3, 4, 5, 6, 8)]
    assert "format 2, not 1" in report.problems[1] and "'samples' is missing" in report.problems[2]
    assert [summary.rank for summary in report.ranks] == [0, 1]
    assert report.ranks[1].totals["compute_s"] == 0.0 and report.ranks[1].wait_share_total == 1.0


def test_a_long_file_is_drawn_in_wider_bins(tmp_path: Path) -> None:
    lines: list[object] = [line(time=1000.0 + 10 * n) for n in range(5 * MAX_BINS)]
    report = read_stats(write(tmp_path / "s.jsonl", lines))
    assert len(report.ranks[0].times) <= MAX_BINS
    assert sum(rate * report.bin_s for rate in report.ranks[0].samples_per_s) == pytest.approx(100 * 5 * MAX_BINS)


#: The keys of a line that hold numbers (docs/readers.md, "Statistics").
NUMBER_KEYS = [
    "time", "rank", "world_size", "pass", "interval_s", "samples", "bytes", "waited_s", "compute_s", "requests",
    "retries", "throttled_s", "cache_hits", "bytes_verified",
]  # fmt: skip
#: Numbers no line of the format holds, as a line of the file writes them (``json.dumps`` writes NaN and Infinity).
OUT_OF_RANGE = [math.nan, math.inf, -math.inf, 10**400, 2**63, -(2**63), 1e300]


def test_a_line_with_a_number_not_finite_or_out_of_range_is_named_and_left_out(tmp_path: Path) -> None:
    lines: list[object] = [
        line(),
        '{"format": 1, "time": NaN}',
        line(time=1010.0, waited_s=math.nan),
        line(time=1020.0, time_unused=0, compute_s=math.inf),
        line(time=math.inf),
        line(time=1030.0, samples=10**400),
        line(time=1040.0, bytes=-(2**70)),
        line(time=1050.0, worker=2**64),
        line(time=1020.0),
    ]
    report = read_stats(write(tmp_path / "s.jsonl", lines))
    assert report.lines == 9 and report.problem_count == 7
    assert [problem.split(":")[0] for problem in report.problems] == [f"line {n}" for n in range(2, 9)]
    assert "'time' is nan: not a finite number" in report.problems[0]
    assert "'waited_s' is nan" in report.problems[1] and "'compute_s' is inf" in report.problems[2]
    assert "'time' is inf" in report.problems[3]
    assert "'samples' is a number of 401 digits" in report.problems[4]
    assert "'worker' is 18446744073709551616" in report.problems[6]
    (summary,) = report.ranks
    assert summary.totals["samples"] == 200 and report.span_s == 30.0
    assert all(math.isfinite(rate) for rate in summary.samples_per_s if rate is not None)


@settings(max_examples=60, deadline=None)
@given(
    key=st.sampled_from(NUMBER_KEYS),
    bad=st.sampled_from(OUT_OF_RANGE),
    where=st.integers(0, 5),
)
def test_any_count_out_of_range_leaves_its_line_out_and_the_rest_as_without_it(
    tmp_path_factory: pytest.TempPathFactory, key: str, bad: float, where: int
) -> None:
    good = [line(time=1000.0 + 10 * n, samples=100 + n) for n in range(6)]
    folder = tmp_path_factory.mktemp("range")
    without = read_stats(write(folder / "without.jsonl", good[:where] + good[where + 1 :]))
    report = read_stats(write(folder / "with.jsonl", [*good[:where], line(**{key: bad}), *good[where + 1 :]]))
    assert report.problem_count == 1 and report.problems[0].startswith(f"line {where + 1}: {key!r} is ")
    assert [summary.totals for summary in report.ranks] == [summary.totals for summary in without.ranks]
    assert report.ranks[0].samples_per_s == without.ranks[0].samples_per_s
