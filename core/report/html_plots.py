"""The report's plots over time: each problem's best speedup and SOL score since the run started, and the fleet's
(geomean speedup, mean SOL), replayed from the attempts by ``core.report.metrics.progress_over_time``."""

from __future__ import annotations

import math
from typing import Sequence

from core.report.html_svg import (FLEET_COLOUR, Frame, LegendEntry, Scale, axis_titles, empty, group, log_range,
                                  log_ticks, point, problem_series, series_colour, series_dash, step_line, svg,
                                  time_ticks, x_label, x_ticks, y_grid)
from core.report.html_text import duration
from core.report.metrics import BestChange, Progress
from core.store.model import RunInfo

TIME_AXIS = "time since the run started"
SPEEDUP_AXIS = "best speedup over T_b (log)"
SOL_AXIS = "best SOL score (1 = speed of light)"


def _span(progress: Progress, run: RunInfo | None) -> tuple[float, float]:
    """From the run's start (else the first change) to its end, or the last change while it goes on."""
    first, last = progress.changes[0].ts, progress.changes[-1].ts
    t0 = run.created_at if run is not None and run.created_at <= first else first
    t1 = run.ended_at if run is not None and run.ended_at and run.ended_at >= last else last
    return t0, max(t1, t0 + 1e-9)


def _time_scale(frame: Frame, t0: float, t1: float) -> tuple[Scale, str]:
    scale = Scale(t0, t1, frame.x0, frame.x1)
    return scale, x_ticks(frame, [(scale(t0 + s), text) for s, text in time_ticks(t1 - t0)])


def _by_problem(changes: Sequence[BestChange]) -> dict[str, list[BestChange]]:
    out: dict[str, list[BestChange]] = {}
    for change in changes:
        out.setdefault(change.problem, []).append(change)
    return out


def _problem_lines(changes: dict[str, list[BestChange]], series: dict[str, int], x: Scale, y, right: float,
                   t0: float, value, fmt) -> list[str]:
    """One step line and its points per problem, each in its own toggled group."""
    parts = []
    for key, problem_changes in changes.items():
        index = series.get(key, 0)
        colour = series_colour(index)
        coords = [(x(c.ts), y(value(c))) for c in problem_changes]
        marks = [step_line(coords, right, colour, 1.5, series_dash(index))]
        marks += [point(cx, cy, colour, c.ts - t0, fmt(value(c)), f"{key} best (attempt {c.attempt_id})",
                        duration(c.ts - t0)) for c, (cx, cy) in zip(problem_changes, coords)]
        parts.append(group(f"p{index}", "".join(marks)))
    return parts


def over_time_legend(keys: Sequence[str], series: dict[str, int] | None, fleet: str) -> list[LegendEntry]:
    series = series if series is not None else problem_series(keys)
    entries = [LegendEntry(fleet, FLEET_COLOUR, "thick", "fleet")]
    for key in dict.fromkeys(keys):
        index = series.get(key, 0)
        entries.append(LegendEntry(key, series_colour(index), "line", f"p{index}", series_dash(index)))
    return entries


def speedup_over_time_svg(progress: Progress, run: RunInfo | None = None, width: int = 640, height: int = 300,
                          series: dict[str, int] | None = None) -> str:
    """Each problem's best speedup so far and the fleet geomean of them (thick) against time since the run
    started, on a log scale with a line at 1× (T_b); a point at every change of a best."""
    label = "best speedup over time"
    if not progress.changes:
        why = "no passing attempt yet" if not progress.passing else \
            f"no speedup: none of {progress.passing} passing attempts has a trusted T_b"
        return empty(label, why)
    series = series if series is not None else problem_series([c.problem for c in progress.changes])
    frame = Frame(width, height)
    t0, t1 = _span(progress, run)
    x, x_axis = _time_scale(frame, t0, t1)
    low, high = log_range([c.speedup for c in progress.changes] + [f.geomean_speedup for f in progress.fleet])
    y = Scale(low, high, frame.y1, frame.y0, log=True)
    parts = [y_grid(frame, log_ticks(low, high), y, x_label, strong=1.0), x_axis,
             axis_titles(frame, TIME_AXIS, SPEEDUP_AXIS)]
    parts += _problem_lines(_by_problem(progress.changes), series, x, y, x(t1), t0, lambda c: c.speedup,
                            lambda v: f"{v:.2f}×")
    fleet = [(x(f.ts), y(f.geomean_speedup)) for f in progress.fleet]
    parts.append(group("fleet", step_line(fleet, x(t1), FLEET_COLOUR, 2.5) + "".join(
        point(cx, cy, FLEET_COLOUR, f.ts - t0, f"{f.geomean_speedup:.2f}×",
              f"fleet geomean over {f.with_speedup} problems", duration(f.ts - t0))
        for f, (cx, cy) in zip(progress.fleet, fleet))))
    return svg(frame, f"{label}, fleet geomean last {progress.fleet[-1].geomean_speedup:.2f}×", "".join(parts))


def sol_over_time_svg(progress: Progress, run: RunInfo | None = None, samples: int = 0, width: int = 640,
                      height: int = 300, series: dict[str, int] | None = None) -> str:
    """Each problem's best's SOL score (0-1) and the fleet mean of them (thick) against time since the run
    started, a point at every change of a best."""
    label = "best SOL score over time"
    fleet_points = [f for f in progress.fleet if f.mean_sol is not None and math.isfinite(f.mean_sol)]
    if not fleet_points:
        return empty(label, no_sol_reason(progress, run, samples))
    series = series if series is not None else problem_series([c.problem for c in progress.changes])
    frame = Frame(width, height)
    t0, t1 = _span(progress, run)
    x, x_axis = _time_scale(frame, t0, t1)
    y = Scale(0.0, 1.0, frame.y1, frame.y0)
    parts = [y_grid(frame, (0.0, 0.25, 0.5, 0.75, 1.0), y, lambda t: f"{t:.2f}", strong=0.5), x_axis,
             axis_titles(frame, TIME_AXIS, SOL_AXIS)]
    with_sol = [c for c in progress.changes if c.sol is not None and math.isfinite(c.sol)]
    parts += _problem_lines(_by_problem(with_sol), series, x, y, x(t1), t0, lambda c: c.sol, lambda v: f"{v:.3f}")
    coords = [(x(f.ts), y(f.mean_sol)) for f in fleet_points]
    parts.append(group("fleet", step_line(coords, x(t1), FLEET_COLOUR, 2.5) + "".join(
        point(cx, cy, FLEET_COLOUR, f.ts - t0, f"{f.mean_sol:.3f}", f"fleet mean SOL over {f.with_sol} problems",
              duration(f.ts - t0)) for f, (cx, cy) in zip(fleet_points, coords))))
    return svg(frame, f"{label}, fleet mean last {fleet_points[-1].mean_sol:.2f}", "".join(parts))


def no_sol_reason(progress: Progress, run: RunInfo | None, samples: int = 0) -> str:
    """Why a run's SOL plots have nothing to show."""
    if not progress.passing:
        return "no passing attempt yet"
    if run is not None and run.device == "cpu":
        return (f"no SOL score: the cpu device has no speed of light (T_sol); {progress.passing} passing attempts "
                f"and {samples} metric samples stored, see the speedup plots")
    return f"no SOL score: none of {progress.passing} passing attempts has T_sol on its workloads"
