"""Building blocks of the report's hand-written inline SVG: a plot's frame and scales, ticks that read well
(1-2-5 on log axes, whole seconds/minutes/hours on time axes), axis titles, the series' colours and an HTML legend
whose entries show and hide their series. A plot with nothing to draw is :func:`empty`: a sentence saying why."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from core.report.html_text import esc

# Distinct on white and for the common colour-vision deficiencies' worst pairs; past ten, series repeat a colour
# with a dash pattern.
PALETTE = ("#1f6fd1", "#e8710a", "#139a57", "#c62f3b", "#7b4fc9", "#8c5a3c", "#d6409f", "#5f6b7a", "#9a9a00",
           "#0f9fb0")
DASHES = ("", "6 3", "2 2", "8 3 2 3")
FLEET_COLOUR = "#1d2330"
FAIL_COLOUR = "#c62f3b"


def series_colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def series_dash(index: int) -> str:
    return DASHES[(index // len(PALETTE)) % len(DASHES)]


@dataclass(frozen=True)
class Frame:
    """A plot's size and the margins around its plotting area (room for tick labels and axis titles)."""

    width: int
    height: int
    left: int = 52
    right: int = 16
    top: int = 12
    bottom: int = 46

    @property
    def x0(self) -> float:
        return float(self.left)

    @property
    def x1(self) -> float:
        return float(self.width - self.right)

    @property
    def y0(self) -> float:
        return float(self.top)

    @property
    def y1(self) -> float:
        return float(self.height - self.bottom)


@dataclass(frozen=True)
class Scale:
    """Values in [low, high] onto pixels [start, end] (end < start for a y axis: up is more), linear or log10."""

    low: float
    high: float
    start: float
    end: float
    log: bool = False

    def __call__(self, value: float) -> float:
        if self.log:
            lo, hi, v = math.log10(self.low), math.log10(self.high), math.log10(max(value, 1e-300))
        else:
            lo, hi, v = self.low, self.high, value
        share = (v - lo) / (hi - lo) if hi > lo else 0.5
        return self.start + (self.end - self.start) * min(max(share, 0.0), 1.0)


def log_range(values: Sequence[float], low: float = 0.5, high: float = 2.0, pad: float = 0.05) -> tuple[float, float]:
    """A log axis's ends covering ``values`` and at least [low, high], with ``pad`` decades to spare."""
    positive = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return (10 ** (math.log10(min([low, *positive])) - pad), 10 ** (math.log10(max([high, *positive])) + pad))


def log_ticks(low: float, high: float, most: int = 9) -> list[float]:
    """1-2-5 ticks in [low, high]; where that makes more than ``most``, powers of ten, then every other one."""
    def ticks(mantissas: tuple[int, ...], every: int = 1) -> list[float]:
        out = []
        for exponent in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
            for m in mantissas:
                t = m * 10.0 ** exponent
                if low <= t <= high and exponent % every == 0:
                    out.append(float(f"{t:.6g}"))
        return out

    for mantissas, every in (((1, 2, 5), 1), ((1, 3), 1), ((1,), 1), ((1,), 2)):
        chosen = ticks(mantissas, every)
        if len(chosen) <= most:
            return chosen
    return chosen


def x_label(value: float) -> str:
    return f"{value:g}×"


_TIME_STEPS = (1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def time_ticks(span_s: float, most: int = 6) -> list[tuple[float, str]]:
    """(seconds, label) ticks from 0 over ``span_s``, at a round step, labelled in one unit."""
    step = next((s for s in _TIME_STEPS if span_s / s <= most), _TIME_STEPS[-1] * math.ceil(span_s / 86400 / most))
    unit, word = (1, "s") if step < 60 else (60, "min") if step < 3600 else (3600, "h")
    return [(k * step, f"{k * step / unit:g} {word}") for k in range(int(span_s // step) + 1)]


def svg(frame: Frame, label: str, body: str) -> str:
    return (f"<svg class=\"chart\" width=\"{frame.width}\" height=\"{frame.height}\" "
            f"viewBox=\"0 0 {frame.width} {frame.height}\" role=\"img\" aria-label=\"{esc(label)}\">{body}</svg>")


def empty(label: str, why: str) -> str:
    """What a plot shows when it has nothing to draw: why, as wrapping text in the plot's place."""
    return f"<div class=\"empty\" role=\"note\" aria-label=\"{esc(label)}\">{esc(why)}</div>"


def y_grid(frame: Frame, ticks: Sequence[float], at: Callable[[float], float], label: Callable[[float], str],
           strong: float | None = None) -> str:
    """Horizontal grid lines with their labels left of the plot; the line at ``strong`` (e.g. 1×) darker."""
    parts = []
    for tick in ticks:
        y = at(tick)
        stroke = "#6b7280" if strong is not None and math.isclose(tick, strong) else "#e3e6ee"
        parts.append(f"<line x1=\"{frame.x0:.1f}\" y1=\"{y:.1f}\" x2=\"{frame.x1:.1f}\" y2=\"{y:.1f}\" "
                     f"stroke=\"{stroke}\"/><text x=\"{frame.x0 - 6:.1f}\" y=\"{y + 4:.1f}\" "
                     f"text-anchor=\"end\">{esc(label(tick))}</text>")
    return "".join(parts)


def x_ticks(frame: Frame, ticks: Sequence[tuple[float, str]]) -> str:
    """Tick marks and labels under the plot at the given x positions."""
    parts = [f"<line x1=\"{frame.x0:.1f}\" y1=\"{frame.y1:.1f}\" x2=\"{frame.x1:.1f}\" y2=\"{frame.y1:.1f}\" "
             "stroke=\"#9aa1ad\"/>"]
    for x, text in ticks:
        parts.append(f"<line x1=\"{x:.1f}\" y1=\"{frame.y1:.1f}\" x2=\"{x:.1f}\" y2=\"{frame.y1 + 4:.1f}\" "
                     f"stroke=\"#9aa1ad\"/><text x=\"{x:.1f}\" y=\"{frame.y1 + 16:.1f}\" "
                     f"text-anchor=\"middle\">{esc(text)}</text>")
    return "".join(parts)


def axis_titles(frame: Frame, x_title: str, y_title: str) -> str:
    """The x axis's title under its tick labels and the y axis's, turned, at the left edge."""
    mid_x, mid_y = (frame.x0 + frame.x1) / 2, (frame.y0 + frame.y1) / 2
    return (f"<text class=\"axis\" x=\"{mid_x:.1f}\" y=\"{frame.height - 8}\" text-anchor=\"middle\">"
            f"{esc(x_title)}</text>"
            f"<text class=\"axis\" transform=\"translate(12 {mid_y:.1f}) rotate(-90)\" text-anchor=\"middle\">"
            f"{esc(y_title)}</text>")


def step_line(coords: Sequence[tuple[float, float]], right: float, colour: str, width: float, dash: str = "") -> str:
    """A best-so-far line: flat until the next change, then up; carried on to ``right`` (the end of the run)."""
    points = []
    for i, (x, y) in enumerate(coords):
        if i:
            points.append((x, coords[i - 1][1]))
        points.append((x, y))
    points.append((right, coords[-1][1]))
    dashes = f" stroke-dasharray=\"{dash}\"" if dash else ""
    return (f"<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"{width}\"{dashes} points=\""
            + " ".join(f"{x:.1f},{y:.1f}" for x, y in points) + "\"/>")


def point(x: float, y: float, colour: str, t: float, value: str, what: str, when: str) -> str:
    """A marked point: its time (``data-t``, seconds since the start) and value as data, and a tooltip."""
    return (f"<circle cx=\"{x:.1f}\" cy=\"{y:.1f}\" r=\"3\" fill=\"{colour}\" data-t=\"{t:.3f}\" "
            f"data-value=\"{esc(value)}\"><title>{esc(what)}: {esc(value)} at {esc(when)}</title></circle>")


def group(series: str, body: str) -> str:
    """A series' marks, which its legend entry shows and hides."""
    return f"<g data-series=\"{esc(series)}\">{body}</g>"


@dataclass(frozen=True)
class LegendEntry:
    label: str
    colour: str
    mark: str = "line"  # line | thick | dashed | dot | ring | bar | cross
    series: str = ""  # the series it toggles ("" for none)
    dash: str = ""


def _swatch(entry: LegendEntry) -> str:
    c = entry.colour
    if entry.mark == "dot":
        shape = f"<circle cx=\"9\" cy=\"6\" r=\"4\" fill=\"{c}\"/>"
    elif entry.mark == "ring":
        shape = f"<circle cx=\"9\" cy=\"6\" r=\"4.5\" fill=\"none\" stroke=\"{c}\" stroke-width=\"1.5\"/>"
    elif entry.mark == "bar":
        shape = f"<rect x=\"2\" y=\"1\" width=\"14\" height=\"10\" fill=\"{c}\"/>"
    elif entry.mark == "cross":
        shape = f"<path d=\"M5 2 L13 10 M13 2 L5 10\" stroke=\"{c}\" stroke-width=\"2\"/>"
    else:
        width = 3 if entry.mark == "thick" else 2
        dash = entry.dash or ("4 3" if entry.mark == "dashed" else "")
        dashes = f" stroke-dasharray=\"{dash}\"" if dash else ""
        shape = f"<line x1=\"1\" y1=\"6\" x2=\"17\" y2=\"6\" stroke=\"{c}\" stroke-width=\"{width}\"{dashes}/>"
    return f"<svg class=\"swatch\" width=\"18\" height=\"12\" viewBox=\"0 0 18 12\" aria-hidden=\"true\">{shape}</svg>"


def legend(entries: Sequence[LegendEntry]) -> str:
    """The plot's legend as an HTML list (long problem keys wrap); an entry with a series is a toggle button."""
    if not entries:
        return ""
    items = []
    for entry in entries:
        inner = f"{_swatch(entry)}<span>{esc(entry.label)}</span>"
        if entry.series:
            items.append(f"<li><button type=\"button\" data-series=\"{esc(entry.series)}\" aria-pressed=\"true\" "
                         f"title=\"show or hide\">{inner}</button></li>")
        else:
            items.append(f"<li>{inner}</li>")
    return f"<ul class=\"legend\">{''.join(items)}</ul>"


def problem_series(keys: Sequence[str]) -> dict[str, int]:
    """Each problem's series index (its colour on every plot of the page), in the order given."""
    return {key: i for i, key in enumerate(dict.fromkeys(keys))}
