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
