"""The closing summary counts the skipped tests by reason and names the command that runs them all."""

from __future__ import annotations

import pytest

SOME_SKIPPED = """
import pytest

@pytest.mark.parametrize("i", range(3))
def test_on_a_server(i):
    pytest.skip("the X server cannot run here: /dev/x is missing")

def test_with_a_package():
    pytest.importorskip("a_package_that_is_not_installed")

def test_runs():
    pass
"""


def test_the_summary_counts_skips_by_reason_and_names_the_command(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_some=SOME_SKIPPED)
    result = pytester.runpytest("-p", "tests.skip_summary")
    result.assert_outcomes(passed=1, skipped=4)
    result.stdout.fnmatch_lines(
        [
            "*= 4 skipped, by reason =*",
            "     3  the X server cannot run here: /dev/x is missing",
            "     1  could not import 'a_package_that_is_not_installed': No module named *",
            "To run them all: `bash .ci/run` as root on Debian 12 *",
        ]
    )


def test_a_run_that_skipped_nothing_says_nothing_of_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_some="def test_runs():\n    pass\n")
    result = pytester.runpytest("-p", "tests.skip_summary")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*skipped, by reason*")
    result.stdout.no_fnmatch_line("*bash .ci/run*")


def test_the_skipped_tests_are_written_for_a_run_that_takes_them_again(pytester: pytest.Pytester) -> None:
    """``--skipped-to FILE`` lists each skipped test (a module that skipped as a whole by its path), and
    ``pytest @FILE`` runs exactly those again (as ``.ci/run`` does once every server and package is there)."""
    pytester.makepyfile(test_some=SOME_SKIPPED, test_whole="import pytest\npytest.importorskip('nothing_such')\n")
    listed = pytester.path / "skipped.txt"
    result = pytester.runpytest("-p", "tests.skip_summary", f"--skipped-to={listed}")
    result.assert_outcomes(passed=1, skipped=5)
    assert listed.read_text().splitlines() == [
        "test_some.py::test_on_a_server[0]",
        "test_some.py::test_on_a_server[1]",
        "test_some.py::test_on_a_server[2]",
        "test_some.py::test_with_a_package",
        "test_whole.py",
    ]
    again = pytester.runpytest("-p", "tests.skip_summary", f"@{listed}")
    again.assert_outcomes(skipped=5)


GROUPED = """
import pytest

@pytest.mark.xdist_group("server")
@pytest.mark.parametrize("i", [0, 1])
def test_on_one_worker(i):
    pytest.skip("no server here")
"""


def test_tests_run_on_one_worker_are_written_by_the_ids_that_select_them(pytester: pytest.Pytester) -> None:
    """Under ``--dist loadgroup`` a grouped test's id carries its group (``...[0]@server``); the file lists the id a
    run selects it by."""
    pytester.makepyfile(test_grouped=GROUPED)
    listed = pytester.path / "skipped.txt"
    result = pytester.runpytest("-p", "tests.skip_summary", "-n", "2", "--dist", "loadgroup", f"--skipped-to={listed}")
    result.assert_outcomes(skipped=2)
    assert listed.read_text().splitlines() == [
        "test_grouped.py::test_on_one_worker[0]",
        "test_grouped.py::test_on_one_worker[1]",
    ]
    again = pytester.runpytest("-p", "tests.skip_summary", f"@{listed}")
    again.assert_outcomes(skipped=2)
