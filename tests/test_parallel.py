"""The tests that need one server run on one worker (``tests/parallel.py``), however pytest-xdist spreads the rest."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ON_A_SERVER = """
import pytest

pytestmark = pytest.mark.gluster

@pytest.mark.parametrize("i", range(6))
def test_on_the_server(i):
    pass
"""

ELSEWHERE = """
import pytest

@pytest.mark.parametrize("i", range(6))
def test_anywhere(i):
    pass
"""


def test_every_test_of_a_server_runs_on_one_worker(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parents[1]))  # the workers import tests.parallel
    pytester.makeini("[pytest]\nmarkers =\n    gluster: needs GlusterFS\n")
    pytester.makepyfile(test_first=ON_A_SERVER, test_second=ON_A_SERVER, test_other=ELSEWHERE)
    result = pytester.runpytest_subprocess("-p", "tests.parallel", "-n", "2", "--dist", "loadgroup", "-v")
    result.assert_outcomes(passed=18)
    workers = {
        match["worker"]
        for line in result.outlines
        if (match := re.search(r"\[(?P<worker>gw\d)\].*PASSED .*test_on_the_server", line))
    }
    assert len(workers) == 1, "\n".join(result.outlines)
