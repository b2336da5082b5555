"""The steps of time the training page's lines are drawn in: a steady rate is drawn steady, whatever the lines'
lengths and the steps' width."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamount.ui.charts import step_rates


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.floats(0.05, 5.0), min_size=1, max_size=40),
    gaps=st.lists(st.sampled_from([0.0, 0.0, 0.0, 0.01, 2.0]), min_size=40, max_size=40),
    rate=st.floats(0.5, 1e6),
    step=st.floats(0.05, 5.0),
)
def test_a_steady_rate_is_drawn_steady_whatever_the_steps(
    lengths: list[float], gaps: list[float], rate: float, step: float
) -> None:
    spans, begin = [], 0.0
    for length, gap in zip(lengths, gaps, strict=False):
        spans.append((begin, begin + length, [rate * length]))
        begin += length + gap
    steps = math.ceil(spans[-1][1] / step)
    drawn = step_rates(spans, start=0.0, step=step, steps=steps)
    last = max(index for index, rates in enumerate(drawn) if rates is not None)
    assert last >= steps - 2 and drawn[0] is not None
    assert [rates[0] for rates in drawn[: last + 1]] == [pytest.approx(rate)] * (last + 1)  # type: ignore[index]


def test_a_step_without_a_line_carries_the_last_rate_and_none_is_drawn_past_the_last() -> None:
    spans = [(0.0, 1.0, [10.0]), (3.0, 4.0, [40.0])]
    assert step_rates(spans, start=0.0, step=1.0, steps=6) == [[10.0], [10.0], [10.0], [40.0], None, None]


def test_a_line_of_no_time_counts_in_the_step_it_ends_in() -> None:
    covered = [(0.0, 2.0, [20.0]), (1.5, 1.5, [5.0])]
    assert step_rates(covered, start=0.0, step=1.0, steps=2) == [[10.0], [15.0]]
    alone = [(0.0, 1.0, [10.0]), (2.0, 2.0, [6.0])]  # over its step's time
    assert step_rates(alone, start=0.0, step=1.0, steps=2) == [[10.0], [6.0]]
