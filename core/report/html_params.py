"""A tuner's parameters against speedup: per problem, one small scatter per tunable with the values the trials
tried along x (in order, evenly spaced) and the speedup the run counted for each trial on a log y axis; failed or
partial trials in a strip at the bottom, the seed's speedup as a dashed line and the best ringed."""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

from core.report.html_svg import (FAIL_COLOUR, Frame, LegendEntry, Scale, axis_titles, empty, log_range, log_ticks,
                                  series_colour, svg, x_label, x_ticks, y_grid)
from core.report.html_text import clip, esc, fmt_x
from core.report.metrics import ParameterPoint, ProblemDrill, json_key, ordered_values, parameter_points

SEED_LINE = "#8a8f9c"


def value_text(value: Any) -> str:
    """A tunable's value as the page writes it: text as is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def parameter_svg(drill: ProblemDrill, name: str, colour: str, width: int = 360, height: int = 250) -> str:
    points = parameter_points(drill.attempts, name)
    label = f"{drill.summary.key}: speedup against {name}"
    if not points:
        return empty(label, f"no finished trial set {name}")
    values = ordered_values([p.value for p in points])
    slot = {json_key(v): i for i, v in enumerate(values)}
    failed = any(p.speedup is None for p in points)
    frame = Frame(width, height, left=60, right=12, top=10, bottom=44)
    strip = frame.y1 - 8  # where trials without a counted speedup go
    plot = Frame(width, height, left=60, right=12, top=10, bottom=44 + (22 if failed else 0))
    step = (frame.x1 - frame.x0) / len(values)
    seed = drill.seed.speedup if drill.seed is not None and drill.seed.passed and drill.seed.full else None
    low, high = log_range([p.speedup for p in points if p.speedup is not None] + ([seed] if seed else []),
                          low=1.0, high=1.0, pad=0.08)
    y = Scale(low, high, plot.y1, plot.y0, log=True)
    every = max(1, math.ceil(len(values) / 8))
    parts = [y_grid(plot, log_ticks(low, high, most=5), y, x_label, strong=1.0),
             x_ticks(frame, [(frame.x0 + step * (i + 0.5), clip(value_text(v), 10)) for i, v in enumerate(values)
                             if i % every == 0]),
             axis_titles(frame, clip(f"{name} (tunable)", 40), "speedup over T_b (log)")]
    if failed:
        parts.append(f"<text x=\"{frame.x0 + 4:.1f}\" y=\"{strip - 8:.1f}\" class=\"faint\">failed or partial</text>"
                     f"<line x1=\"{frame.x0:.1f}\" y1=\"{strip - 5:.1f}\" x2=\"{frame.x1:.1f}\" y2=\"{strip - 5:.1f}\" "
                     "stroke=\"#e3e6ee\" stroke-dasharray=\"3 3\"/>")
    if seed is not None and seed > 0:
        parts.append(f"<line x1=\"{frame.x0:.1f}\" y1=\"{y(seed):.1f}\" x2=\"{frame.x1:.1f}\" y2=\"{y(seed):.1f}\" "
                     f"stroke=\"{SEED_LINE}\" stroke-dasharray=\"5 3\"><title>seed {fmt_x(seed)}</title></line>")
    seen: dict[str, int] = {}
    best_id = drill.best.id if drill.best is not None else None
    for p in points:
        key = json_key(p.value)
        repeat = seen.get(key, 0)
        seen[key] = repeat + 1
        # trials of one value side by side, a few pixels apart, so that none hides another
        cx = frame.x0 + step * (slot[key] + 0.5) + ((repeat % 5) - 2) * min(3.0, step / 12)
        parts.append(_mark(p, name, cx, strip if p.speedup is None else y(p.speedup), colour, p.attempt_id == best_id))
    return svg(frame, label, "".join(parts))


def _mark(p: ParameterPoint, name: str, cx: float, cy: float, colour: str, best: bool) -> str:
    what = (f"attempt {p.attempt_id}: {name}={value_text(p.value)} → "
            + (fmt_x(p.speedup) if p.speedup is not None else p.status))
    tip = f"<title>{esc(what)}{' (the best)' if best else ''}</title>"
    if p.speedup is None:
        return (f"<path d=\"M{cx - 3.5:.1f} {cy - 3.5:.1f} l7 7 m0 -7 l-7 7\" stroke=\"{FAIL_COLOUR}\" "
                f"stroke-width=\"2\">{tip}</path>")
    ring = (f"<circle cx=\"{cx:.1f}\" cy=\"{cy:.1f}\" r=\"7\" fill=\"none\" stroke=\"#1d2330\" stroke-width=\"1.5\"/>"
            if best else "")
    return (f"{ring}<circle cx=\"{cx:.1f}\" cy=\"{cy:.1f}\" r=\"3.5\" fill=\"{colour}\" fill-opacity=\"0.8\">"
            f"{tip}</circle>")


def parameter_legend(colour: str) -> list[LegendEntry]:
    return [LegendEntry("a trial, on every workload", colour, "dot"),
            LegendEntry("failed or partial trial", FAIL_COLOUR, "cross"),
            LegendEntry("the seed's speedup", SEED_LINE, "dashed"),
            LegendEntry("the best", "#1d2330", "ring")]


def tuned(drills: Sequence[ProblemDrill]) -> list[ProblemDrill]:
    """The problems whose attempts set tunables."""
    return [d for d in drills if d.parameters]


def no_parameters_reason(drills: Sequence[ProblemDrill]) -> str:
    attempts = sum(len(d.attempts) for d in drills)
    return (f"no attempt set a tunable parameter ({attempts} attempts over {len(drills)} problems): tuner agents "
            "search a seed's tunables, and none ran here")


def colour_of(series: dict[str, int], drill: ProblemDrill) -> str:
    return series_colour(series.get(drill.summary.key, 0))
