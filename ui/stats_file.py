"""A reader statistics file (``DATAMOUNT_STATS_FILE``: JSON lines, format 1, documented in ``docs/readers.md``) as
the training page plots it: per rank, over time.

Each line holds one process's counters for one interval (the deltas since its previous line), which ends at its
``time`` and lasts ``interval_s``. The lines of a rank's processes (its DataLoader workers) are added up in bins of
time, as wide as the usual interval (wider when the file spans so long that more than :data:`MAX_BINS` would be
drawn): each process's lines as rates over the time they cover (:func:`~datamount.ui.charts.step_rates`), so that
lines that do not fall in step with the bins draw no drops nor spikes, then the rates of a rank's processes added up.
A rank's samples per second in all is its samples over the time its own lines cover; a rank all of whose lines say
``"local": true`` read local files only, and made no requests to count. A line that is not such a record
(not JSON, another format, a count missing, negative, not finite, or beyond 2**63) is named by its number and left
out; the file is only ever read.
"""

from __future__ import annotations

import math
import os
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from datamount.readers.stats_lines import LINE_COUNTERS, StatsLine, parse_line
from datamount.ui.charts import step_rates

#: Points each line of a plot has at most.
MAX_BINS = 240
#: Problems named one by one; past them only counted.
MAX_PROBLEMS = 20


@dataclass
class RankSummary:
    """One rank over the whole file: its counters added up, the seconds its lines cover (``covered_s``: the union of
    their intervals), and its series in bins (``times`` are the bins' ends, in seconds from the file's first line's
    start; None where none of its lines has begun, or after they all ended)."""

    rank: int
    totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LINE_COUNTERS, 0.0))
    datasets: set[str] = field(default_factory=set)
    passes: set[int] = field(default_factory=set)
    workers: set[int | None] = field(default_factory=set)
    covered_s: float = 0.0
    #: Every line of the rank read only local files (no request was counted because none was made).
    local: bool = True
    times: list[float] = field(default_factory=list)
    samples_per_s: list[float | None] = field(default_factory=list)
    wait_share: list[float | None] = field(default_factory=list)

    @property
    def samples_per_s_total(self) -> float | None:
        """Samples over the seconds this rank's lines cover; None when they cover none."""
        return self.totals["samples"] / self.covered_s if self.covered_s > 0 else None

    @property
    def wait_share_total(self) -> float | None:
        """Time waited for samples over that and the time spent between them; None with neither."""
        busy = self.totals["waited_s"] + self.totals["compute_s"]
        return self.totals["waited_s"] / busy if busy > 0 else None


@dataclass
class StatsReport:
    """What the training page shows of a statistics file."""

    path: str
    lines: int = 0
    problems: list[str] = field(default_factory=list)
    problem_count: int = 0
    ranks: list[RankSummary] = field(default_factory=list)
    bin_s: float = 0.0
    span_s: float = 0.0


def read_stats(path: str | os.PathLike[str]) -> StatsReport:
    """The statistics file at ``path``, per rank (an :class:`OSError` when it cannot be read)."""
    report = StatsReport(os.fspath(path))
    parsed: list[StatsLine] = []
    with Path(path).open("rb") as file:
        for number, raw in enumerate(file, 1):
            if not raw.strip():
                continue
            report.lines += 1
            try:
                parsed.append(parse_line(raw.decode("utf-8")))
            except (ValueError, UnicodeDecodeError) as exc:
                report.problem_count += 1
                if len(report.problems) < MAX_PROBLEMS:
                    report.problems.append(f"line {number}: {exc}")
    if parsed:
        _summarise(report, parsed)
    return report


def _summarise(report: StatsReport, lines: list[StatsLine]) -> None:
    start = min(line.time - line.interval_s for line in lines)
    end = max(line.time for line in lines)
    report.span_s = end - start
    usual = statistics.median(line.interval_s for line in lines) or 1.0
    report.bin_s = max(usual, report.span_s / MAX_BINS)
    bins = max(1, math.ceil(report.span_s / report.bin_s - 1e-9))
    ranks: dict[int, RankSummary] = {}
    processes: dict[tuple[int, int | None, str], list[StatsLine]] = defaultdict(list)
    for line in lines:
        summary = ranks.setdefault(line.rank, RankSummary(line.rank))
        for key, value in line.counters.items():
            summary.totals[key] += value
        summary.datasets.add(line.dataset)
        summary.workers.add(line.worker)
        summary.passes.add(line.pass_number)
        summary.local = summary.local and line.local
        processes[line.rank, line.worker, line.dataset].append(line)
    sums: dict[int, list[list[float] | None]] = {rank: [None] * bins for rank in ranks}
    for (rank, _, _), own in processes.items():
        spans = [(line.time - line.interval_s, line.time, _charted(line)) for line in sorted(own, key=_ending)]
        for index, rates in enumerate(step_rates(spans, start=start, step=report.bin_s, steps=bins)):
            if rates is not None:
                held = sums[rank][index] = sums[rank][index] or [0.0, 0.0, 0.0]
                held[:] = [a + b for a, b in zip(held, rates, strict=True)]
    for rank, summary in sorted(ranks.items()):
        summary.covered_s = _covered([line for key, own in processes.items() if key[0] == rank for line in own])
        for index, rates in enumerate(sums[rank]):
            summary.times.append((index + 1) * report.bin_s)
            samples, waited, computing = rates if rates is not None else (None, 0.0, 0.0)
            summary.samples_per_s.append(samples)
            summary.wait_share.append(waited / (waited + computing) if waited + computing > 0 else None)
        report.ranks.append(summary)


def _charted(line: StatsLine) -> tuple[float, float, float]:
    """What the training page plots of ``line``: its samples, seconds waited and seconds computing."""
    return line.counters["samples"], line.counters["waited_s"], line.counters["compute_s"]


def _ending(line: StatsLine) -> float:
    return line.time


def _covered(lines: list[StatsLine]) -> float:
    """The seconds that at least one of ``lines`` covers (the union of their intervals)."""
    total, reached = 0.0, -math.inf
    for begin, end in sorted((line.time - line.interval_s, line.time) for line in lines):
        if end > reached:
            total += end - max(begin, reached)
            reached = end
    return total
