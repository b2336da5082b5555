"""The training page's reading of a statistics file: per rank, in bins of time, bad lines named and left out; and
the file the real meter writes."""

from __future__ import annotations

import http.client
import json
import math
import re
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamount.datasets.upload import upload
from datamount.readers import multiprocess_reader, reader
from datamount.storage import Store
from datamount.ui.stats_file import MAX_BINS, read_stats
from tests.generated import MakeImageList
from tests.ui.showcase import (
    STATS_INTERVAL_S,
    STATS_INTERVALS,
    STATS_RANKS,
    STATS_WORKERS,
    UiServer,
    write_stats_file,
)


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


def test_lines_out_of_step_with_the_bins_draw_no_drops_nor_spikes(tmp_path: Path) -> None:
    """Rank 0 writes a line every 0.5 s, rank 1 every 0.51 s: the file is plotted in steps of 0.5 s, so that some of
    rank 1's steps hold none of its lines' ends and others two."""
    lines: list[object] = [
        line(time=1000.0 + 0.5 * n, interval_s=0.5, rank=0, samples=100, waited_s=0.1, compute_s=0.4)
        for n in range(1, 121)
    ]
    lines += [
        line(time=1000.0 + 0.51 * n, interval_s=0.51, rank=1, samples=100, waited_s=0.11, compute_s=0.4)
        for n in range(1, 101)
    ]
    report = read_stats(write(tmp_path / "s.jsonl", lines))
    assert report.bin_s == 0.5 and report.problems == []
    steady, jittered = report.ranks
    assert steady.samples_per_s == [pytest.approx(200.0)] * 120
    drawn = [rate for rate in jittered.samples_per_s if rate is not None]
    assert len(drawn) == math.ceil(100 * 0.51 / 0.5)  # every step until its last line ends
    assert drawn == [pytest.approx(100 / 0.51)] * len(drawn)
    assert jittered.wait_share[: len(drawn)] == [pytest.approx(0.11 / 0.51)] * len(drawn)
    assert jittered.samples_per_s[len(drawn) :] == [None] * (120 - len(drawn))


def test_a_ranks_samples_per_second_is_over_its_own_time(tmp_path: Path) -> None:
    """Rank 1 reads for the first 30 s of the file's 60, in two workers side by side: its samples over the 30 s."""
    lines: list[object] = [line(time=1000.0 + 10 * n, samples=1000) for n in range(1, 7)]
    lines += [line(time=1000.0 + 10 * n, rank=1, worker=worker, samples=500) for n in (1, 2, 3) for worker in (0, 1)]
    report = read_stats(write(tmp_path / "s.jsonl", lines))
    assert report.span_s == 60.0
    assert [summary.covered_s for summary in report.ranks] == [60.0, 30.0]
    assert [summary.samples_per_s_total for summary in report.ranks] == [100.0, 100.0]


def test_the_file_the_meter_writes_is_read_whole(
    make_image_list: MakeImageList, local_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two worker processes of one rank read 200 images between them, twice, each writing a line every 0.05 s as its
    consumer takes them: the page shows what they read, at the rate they read it, over the time they read."""
    upload(make_image_list(200, size=2_000), "cats", store=local_store)
    path = tmp_path / "stats.jsonl"
    monkeypatch.setenv("DATAMOUNT_STATS", "0.05")
    monkeypatch.setenv("DATAMOUNT_STATS_FILE", str(path))
    samples = reader("cats", local_store)
    both = multiprocess_reader([samples] * 2, use_pipe=False, queue_size=1, mp_context="fork")
    for _ in range(2):
        for _sample in both():
            time.sleep(0.003)
    written = [json.loads(text) for text in path.read_text(encoding="utf-8").splitlines()]
    report = read_stats(path)
    assert report.problems == [] and report.lines == len(written) > 8
    (summary,) = report.ranks
    assert summary.workers == {0, 1} and summary.passes == {0, 1} and summary.datasets == {"cats@1"}
    for key in ("samples", "bytes", "requests", "bytes_verified"):
        assert summary.totals[key] == sum(record[key] for record in written), key
    assert summary.totals["samples"] == 2 * 200
    drawn = [rate for rate in summary.samples_per_s if rate is not None]
    assert len(drawn) >= len(summary.samples_per_s) - 1 and min(drawn) > 0
    assert summary.covered_s <= report.span_s
    assert summary.samples_per_s_total == pytest.approx(400 / summary.covered_s)


@pytest.mark.s3
def test_a_rank_that_read_local_files_says_so_where_a_remote_ones_requests_are(
    make_image_list: MakeImageList, local_store: Store, s3_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local store makes no requests: the real meter's lines of a pass over it say ``"local": true`` (where
    ``"requests": 0`` had read as a fault), and the training page says "local files" in that rank's row, where the
    rank that read S3 shows its requests."""
    listing = make_image_list(30, size=2_000)
    for store in (local_store, s3_store):
        upload(listing, "cats", store=store)
    path = tmp_path / "stats.jsonl"
    monkeypatch.setenv("DATAMOUNT_STATS_FILE", str(path))
    for rank, store in enumerate((local_store, s3_store)):
        assert len(list(reader("cats", store, rank=rank, world_size=2)())) == 15
    written = [json.loads(text) for text in path.read_text(encoding="utf-8").splitlines()]
    assert {(record["rank"], record["local"]) for record in written} == {(0, True), (1, False)}
    report = read_stats(path)
    assert report.problems == []
    local, remote = report.ranks
    assert local.local and local.totals["requests"] == 0
    assert not remote.local and remote.totals["requests"] >= 15
    server = UiServer([local_store.url], tmp_path / "ui.log", stats_file=path)
    try:
        where = urlsplit(server.url)
        connection = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
        connection.request("GET", "/training")
        page = connection.getresponse().read().decode()
        connection.close()
    finally:
        server.stop()
    rows = page.split('id="ranks"')[1].split("<tbody>")[1].split("</tr>")[:-1]
    cells = [re.findall(r"<td[^>]*>([^<]*)</td>", row)[9:] for row in rows]  # after bytes: how the rank read
    assert cells == [["local files"], [f"{remote.totals['requests']:,.0f}", "0", "0.00 s", "0"]]
