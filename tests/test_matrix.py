"""The README's test command leaves the full real-server matrix out, and never downloads within a test's time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import hdfs

#: Where the tests collected come from: store tests on every backend, and a data-center rig.
COLLECTED = ["tests/datasets/test_catalog.py", "tests/datacenter/test_ceph_replicas.py"]


def _collected(*options: str) -> set[str]:
    """The node ids pytest collects from :data:`COLLECTED` with ``options`` (in a process of its own, as a user
    runs it)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *options, *COLLECTED],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line for line in done.stdout.splitlines() if "::" in line}


def test_the_default_run_leaves_the_full_matrix_out_and_m_full_runs_it_alone() -> None:
    default, full = _collected(), _collected("-m", "full")
    assert full and default and not default & full
    verify = "tests/datasets/test_catalog.py::test_verify_reports_every_missing_and_corrupt_object"
    assert {f"{verify}[{server}]" for server in ("gluster", "hdfs", "ceph-rgw")} <= full
    assert {f"{verify}[{server}]" for server in ("local", "memory", "s3-moto", "gcs")} <= default
    assert {node for node in full if node.startswith("tests/datacenter/")}
    assert default | full == _collected("-m", "")


def test_without_the_hadoop_jars_the_hdfs_tests_skip_naming_the_command_and_fetch_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hdfs, "CACHE_ROOT", tmp_path / "empty-cache")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/nothing-here")  # a download could not succeed
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    reason = hdfs.why_hdfs_cannot_run()
    if reason is not None and ("hdfs-native" in reason or "java" in reason):
        pytest.skip(reason)
    assert reason is not None and hdfs.FETCH_COMMAND in reason, reason
    assert not (tmp_path / "empty-cache").exists()  # nothing was fetched, nor begun


SOME_TESTS = """
import pytest

@pytest.mark.slow
def test_slow():
    pass

@pytest.mark.parametrize("i", [0, 1])
def test_plain(i):
    pass
"""


def test_the_tests_a_file_names_join_the_full_matrix_of_one_run(pytester: pytest.Pytester) -> None:
    """``-m full --with-ids=FILE`` runs the full matrix and the tests ``FILE`` names (node ids, and modules by their
    path, as ``--skipped-to`` writes them) in one session, as ``.ci/run`` does."""
    pytester.makepyfile(test_some=SOME_TESTS, test_whole="def test_in_a_listed_module():\n    pass\n")
    listed = pytester.path / "skipped.txt"
    listed.write_text("test_some.py::test_plain[1]\ntest_whole.py\n", encoding="utf-8")

    def passed(*options: str) -> list[str]:
        recorded = pytester.inline_run("-p", "tests.matrix", "-m", "full", *options)
        return sorted(report.nodeid for report in recorded.listoutcomes()[0])

    assert passed() == ["test_some.py::test_slow"]
    assert passed(f"--with-ids={listed}") == [
        "test_some.py::test_plain[1]",
        "test_some.py::test_slow",
        "test_whole.py::test_in_a_listed_module",
    ]
