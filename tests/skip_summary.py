"""The closing summary of a run that skipped tests: how many were skipped for each reason, and the one command that
runs them all.

A test skips, with its reason, where something it needs is missing here: a server (GlusterFS, Ceph, HDFS and their
Debian packages), a device (``/dev/fuse``, root for a tmpfs) or an optional package (PyTorch, pyfuse3, Node.js).
``.ci/run``, run as root on Debian, installs all of them (PyTorch only from a CPU build pip's configured find-links
hold: the registry's is a several-GB CUDA build) and runs every test.
"""

from __future__ import annotations

from collections import Counter

import pytest

#: What brings every server and optional package these tests need, then runs them all.
RUN_EVERYTHING = "bash .ci/run"


def skip_reason(report: pytest.TestReport) -> str:
    """The reason a skipped test gave (``longrepr`` is ``(path, line, "Skipped: reason")`` for a skip)."""
    if isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return str(report.longrepr)


def node_id(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The id that selects the test again: pytest-xdist's ``loadgroup`` writes a grouped test's group after an ``@``
    at the end of its id (``test_x[a]@fuse``), which no run finds."""
    if "xdist_group" in getattr(report, "keywords", {}) and "@" in report.nodeid:  # a module's CollectReport has none
        return report.nodeid.rsplit("@", 1)[0]
    return report.nodeid


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--skipped-to",
        metavar="FILE",
        help="write the node ids of the tests (and modules) that skipped, one a line: `pytest @FILE` runs them again",
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = [report for report in terminalreporter.stats.get("skipped", []) if report.skipped]
    where = terminalreporter.config.getoption("skipped_to")
    if where:
        with open(where, "w", encoding="utf-8") as out:
            out.writelines(f"{nodeid}\n" for nodeid in sorted({node_id(report) for report in skipped if report.nodeid}))
    if not skipped:
        return
    counts = Counter(skip_reason(report) for report in skipped)
    terminalreporter.section(f"{len(skipped)} skipped, by reason")
    for reason, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        terminalreporter.line(f"{count:6d}  {reason}")
    terminalreporter.line(
        f"To run them all: `{RUN_EVERYTHING}` as root on Debian 12 installs every server and optional package "
        "(PyTorch from a CPU build pip finds on the machine), then runs every test."
    )
