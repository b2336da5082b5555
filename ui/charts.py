"""Charts drawn on the server as SVG: no script runs in the page, and every text in them is escaped; and the steps
of time their lines are drawn in (:func:`step_rates`).

Each drawing function returns the markup of one ``<svg>`` element, sized by its ``viewBox`` (the page's style scales
it to the width it has).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

#: Colours of the series, in turn (readable on white and told apart by most colour-blind readers).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
_FONT = 'font-family="sans-serif" font-size="11"'


@dataclass(frozen=True)
class Series:
    """One line of a chart: its name and its points (``y`` None leaves a gap)."""

    name: str
    xs: Sequence[float]
    ys: Sequence[float | None]


def step_rates(
    spans: Iterable[tuple[float, float, Sequence[float]]], *, start: float, step: float, steps: int
) -> list[list[float] | None]:
    """Amounts measured over spans of time as rates per step: ``steps`` steps of ``step`` seconds from ``start``.

    ``spans`` are ``(begin, end, amounts)``, one after another, as one process's lines are. Each spreads its amounts
    evenly over its time, and a step's rates are what the spans put in it over the time they cover of it: a step that
    spans cover only in part (lines every 0.51 s over steps of 0.5 s, a process's first and last line) reads the rate
    of its spans, not less, and a step that two spans end in reads theirs, not more. A step that no span covers
    carries the rates of the step before it; steps before the first span and after the last are None. A span of no
    time counts in the step it ends in (over that step's time when nothing else covers it).
    """
    sums: list[list[float] | None] = [None] * steps
    covered = [0.0] * steps
    for begin, end, amounts in spans:
        last = _step_of(end - start, step, steps, ending=True)
        first = _step_of(begin - start, step, steps, ending=False) if end > begin else last
        for index in range(min(first, last), last + 1):
            low, high = max(begin, start + index * step), min(end, start + (index + 1) * step)
            if end > begin and high <= low:
                continue
            share = (high - low) / (end - begin) if end > begin else 1.0
            found = sums[index]
            if found is None:
                found = sums[index] = [0.0] * len(amounts)
            for position, amount in enumerate(amounts):
                found[position] += amount * share
            covered[index] += max(high - low, 0.0)
    rates: list[list[float] | None] = []
    carried: list[float] | None = None
    for found, seconds in zip(sums, covered, strict=True):
        if found is not None:
            carried = [amount / (seconds or step) for amount in found]
        rates.append(carried)
    ended = max((index for index, found in enumerate(sums) if found is not None), default=-1)
    return [rate if index <= ended else None for index, rate in enumerate(rates)]


def _step_of(offset: float, step: float, steps: int, *, ending: bool) -> int:
    """The step holding the time ``offset`` from the first step's start (the one it ends, when ``ending``)."""
    index = math.ceil(offset / step - 1e-9) - 1 if ending else math.floor(offset / step + 1e-9)
    return min(max(index, 0), steps - 1)


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round values from 0 to at least ``top`` for an axis (``count`` steps or about)."""
    if top <= 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [step * index for index in range(math.ceil(top / step - 1e-9) + 1)]


def number(value: float) -> str:
    """A short label for an axis: ``1.5k``, ``2M``, ``0.25``."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.3g}"


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_top: float | None = None,
    y_format: Callable[[float], str] = number,
    width: int = 720,
    height: int = 260,
) -> Markup:
    """Lines of ``series`` on common axes, with a legend when there is more than one."""
    left, right, top, bottom = 56, 110 if len(series) > 1 else 16, 28, 40  # room for the legend on the right
    xs = [x for one in series for x in one.xs]
    ys = [y for one in series for y in one.ys if y is not None]
    x_ticks = nice_ticks(max(xs, default=1.0))
    y_ticks = nice_ticks(y_top if y_top is not None else max(ys, default=1.0))
    x_max, y_max = x_ticks[-1], y_ticks[-1]
    plot_w, plot_h = width - left - right, height - top - bottom

    def at(x: float, y: float) -> str:
        return f"{left + plot_w * x / x_max:.1f},{top + plot_h * (1 - min(y, y_max) / y_max):.1f}"

    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}" '
        f'xmlns="http://www.w3.org/2000/svg">',
        f'<text x="{left}" y="16" {_FONT} font-weight="bold">{escape(title)}</text>',
    ]
    for tick in y_ticks:
        y = top + plot_h * (1 - tick / y_max)
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" {_FONT}>{escape(y_format(tick))}</text>')
    for tick in x_ticks:
        x = left + plot_w * tick / x_max
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + plot_h}" y2="{top + plot_h + 4}" stroke="#555"/>')
        parts.append(f'<text x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle" {_FONT}>{number(tick)}</text>')
    parts.append(
        f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle" {_FONT}>{escape(x_label)}</text>'
        f'<line x1="{left}" x2="{width - right}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#555"/>'
    )
    for index, one in enumerate(series):
        colour = PALETTE[index % len(PALETTE)]
        for run in _runs(one):
            points = " ".join(at(x, y) for x, y in run)
            if len(run) == 1:
                cx, cy = at(*run[0]).split(",")
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{colour}"/>')
            else:
                parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
    if len(series) > 1:
        parts.extend(_legend([one.name for one in series], width - 8, top))
    parts.append("</svg>")
    return Markup("".join(parts))


def _runs(series: Series) -> list[list[tuple[float, float]]]:
    """The points of ``series`` in runs without gaps."""
    runs: list[list[tuple[float, float]]] = [[]]
    for x, y in zip(series.xs, series.ys, strict=True):
        if y is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((x, y))
    return [run for run in runs if run]


def _legend(names: Sequence[str], right: float, top: float) -> list[str]:
    parts = []
    for index, name in enumerate(names[:12]):
        y = top + 4 + 14 * index
        colour = PALETTE[index % len(PALETTE)]
        parts.append(
            f'<rect x="{right - 90}" y="{y}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{right - 76}" y="{y + 9}" {_FONT}>{escape(name)}</text>'
        )
    if len(names) > 12:
        parts.append(f'<text x="{right - 90}" y="{top + 4 + 14 * 12 + 9}" {_FONT}>and {len(names) - 12} more</text>')
    return parts


def bar_chart(
    bars: Sequence[tuple[str, Sequence[float]]], *, parts: Sequence[str], title: str, unit: str = "", width: int = 720
) -> Markup:
    """Horizontal bars, one per ``(label, values)``, each made of ``values`` laid end to end (one per name of
    ``parts``, coloured in turn), with its total written after it."""
    label_w, row_h, top = 180, 20, 28
    total_w = width - label_w - 90
    height = top + row_h * len(bars) + (22 if len(parts) > 1 else 8)
    biggest = max((sum(values) for _, values in bars), default=0.0) or 1.0
    out = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}" '
        f'xmlns="http://www.w3.org/2000/svg">',
        f'<text x="0" y="16" {_FONT} font-weight="bold">{escape(title)}</text>',
    ]
    for row, (label, values) in enumerate(bars):
        y = top + row * row_h
        shown = label if len(label) <= 28 else label[:27] + "…"
        out.append(
            f'<text x="{label_w - 6}" y="{y + 13}" text-anchor="end" {_FONT}><title>{escape(label)}</title>'
            f"{escape(shown)}</text>"
        )
        x = float(label_w)
        for index, value in enumerate(values):
            w = total_w * value / biggest
            out.append(
                f'<rect x="{x:.1f}" y="{y + 2}" width="{w:.1f}" height="{row_h - 5}" '
                f'fill="{PALETTE[index % len(PALETTE)]}"/>'
            )
            x += w
        out.append(f'<text x="{x + 4:.1f}" y="{y + 13}" {_FONT}>{escape(number(sum(values)) + unit)}</text>')
    if len(parts) > 1:
        y = top + row_h * len(bars) + 6
        for index, name in enumerate(parts):
            out.append(
                f'<rect x="{label_w + 110 * index}" y="{y}" width="10" height="10" '
                f'fill="{PALETTE[index % len(PALETTE)]}"/><text x="{label_w + 110 * index + 14}" y="{y + 9}" '
                f"{_FONT}>{escape(name)}</text>"
            )
    out.append("</svg>")
    return Markup("".join(out))
