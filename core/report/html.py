"""A run's report as one self-contained HTML page: inline CSS and hand-written inline SVG, no scripts, nothing
fetched. Every piece of text from the store goes through :func:`html.escape`."""

from __future__ import annotations

import datetime
import html
import math
from typing import Callable, Sequence

from core.report.metrics import (FleetSummary, ProblemSummary, Progress, RunReport, build_report, comparison_rows,
                                 verified_label)
from core.store.model import RunInfo
from core.store.queries import Queries

_CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 2em auto; max-width: 1000px;
       color: #1d2330; background: #fff; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #dde; padding-bottom: 0.2em; }
p.meta { color: #667; margin-top: 0; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: 0.25em 0.8em; border-bottom: 1px solid #eef; text-align: right; }
th { background: #f4f6fa; }
td.l, th.l { text-align: left; }
.up { color: #18794e; } .down { color: #b42318; } .none { color: #999; }
svg { display: block; margin: 0.5em 0; }
svg text { font-family: system-ui, sans-serif; font-size: 11px; fill: #333; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _x(value: float | None) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.2f}×"


def _f(value: float | None) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.2f}"


# ---------------------------------------------------------------- tables


def _summary_table(before: FleetSummary, after: FleetSummary, device: str) -> str:
    rows = comparison_rows(before, after, _x, _f)
    body = "".join(f"<tr><td class=\"l\">{_e(a)}</td><td>{_e(b)}</td><td>{_e(c)}</td></tr>" for a, b, c in rows)
    totals = (f"{after.attempts} attempts · {after.tokens} tokens · ${after.dollars:.2f} · "
              f"{after.gpu_seconds:.1f} {device} seconds")
    return ("<table class=\"summary\"><thead><tr><th class=\"l\">fleet</th><th>before (seed)</th>"
            f"<th>after (best)</th></tr></thead><tbody>{body}</tbody></table>"
            f"<p class=\"meta\">{_e(totals)}</p>")


def _delta_class(before: float | None, after: float | None) -> str:
    if after is None:
        return "none"
    if before is None or after > before:
        return "up"
    return "down" if after < before else ""


def _problem_table(problems: Sequence[ProblemSummary]) -> str:
    rows = []
    for p in problems:
        rows.append(
            f"<tr><td class=\"l\">{_e(p.key)}</td><td class=\"l\">{_e(p.status)}</td><td>{p.attempts}</td>"
            f"<td>{_e(_x(p.seed_speedup))}</td>"
            f"<td class=\"{_delta_class(p.seed_speedup, p.best_speedup)}\">{_e(_x(p.best_speedup))}</td>"
            f"<td>{_e(_f(p.seed_sol))}</td>"
            f"<td class=\"{_delta_class(p.seed_sol, p.best_sol)}\">{_e(_f(p.best_sol))}</td>"
            f"<td class=\"l\" title=\"{_e(p.best_verified)}\">{_e(verified_label(p))}</td></tr>")
    return ("<table class=\"problems\"><thead><tr><th class=\"l\">problem</th><th class=\"l\">status</th>"
            "<th>attempts</th><th>seed speedup</th><th>best speedup</th><th>seed SOL</th><th>best SOL</th>"
            f"<th class=\"l\">re-verified</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _not_evaluated(not_evaluated: dict[str, list[tuple[int, str]]]) -> str:
    if not not_evaluated:
        return ""
    items = "".join(f"<li>{_e(key)}: workload {_e(', '.join(str(i) for i, _ in skipped))} "
                    f"({_e(sorted({why for _, why in skipped})[0])})</li>" for key, skipped in not_evaluated.items())
    return f"<p class=\"meta\">Not evaluated (speedup and SOL are over the other workloads):</p><ul>{items}</ul>"


# ---------------------------------------------------------------- charts


def _svg(width: int, height: int, label: str, body: str) -> str:
    return (f"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" "
            f"viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"{_e(label)}\">{body}</svg>")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


_LEFT, _RIGHT, _TOP, _BOTTOM = 52, 16, 10, 28


def _no_points(width: int, height: int, label: str, why: str) -> str:
    return _svg(width, height, f"{label}: {why}",
                f"<text x=\"{width / 2:.1f}\" y=\"{height / 2:.1f}\" text-anchor=\"middle\" "
                f"class=\"none\">{_e(why)}</text>")


def _time_axis(t0: float, t1: float, width: int, height: int) -> tuple[str, Callable[[float], float]]:
    """The x axis (seconds since the run started) and the function placing a time on it."""
    plot_w = width - _LEFT - _RIGHT
    span = max(t1 - t0, 1e-9)

    def x(ts: float) -> float:
        return _LEFT + plot_w * min(max(ts - t0, 0.0), span) / span

    axis = (f"<text x=\"{_LEFT}\" y=\"{height - 8}\">0</text>"
            f"<text x=\"{_LEFT + plot_w}\" y=\"{height - 8}\" text-anchor=\"end\">{_e(_duration(t1 - t0))}</text>")
    return axis, x


def _step_line(coords: list[tuple[float, float]], right: float, colour: str, width: float) -> str:
    """A best-so-far line: flat until the next change, then up; carried on to ``right`` (the end of the run)."""
    points = []
    for i, (x, y) in enumerate(coords):
        if i:
            points.append((x, coords[i - 1][1]))
        points.append((x, y))
    points.append((right, coords[-1][1]))
    return (f"<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"{width}\" points=\""
            + " ".join(f"{x:.1f},{y:.1f}" for x, y in points) + "\"/>")


def _point(x: float, y: float, colour: str, ts: float, t0: float, value: str, what: str) -> str:
    return (f"<circle cx=\"{x:.1f}\" cy=\"{y:.1f}\" r=\"3\" fill=\"{colour}\" data-t=\"{ts - t0:.3f}\" "
            f"data-value=\"{_e(value)}\"><title>{_e(what)}: {_e(value)} at {_e(_duration(ts - t0))}</title></circle>")


def _span(progress: Progress, run: RunInfo | None) -> tuple[float, float]:
    """From the run's start (else the first change) to its end, or the last change while it goes on."""
    first, last = progress.changes[0].ts, progress.changes[-1].ts
    t0 = run.created_at if run is not None and run.created_at <= first else first
    t1 = run.ended_at if run is not None and run.ended_at and run.ended_at >= last else last
    return t0, max(t1, t0 + 1e-9)


def sol_over_time_svg(progress: Progress, run: RunInfo | None = None, samples: int = 0, width: int = 640,
                      height: int = 220) -> str:
    """Fleet mean of the problems' best SOL score (0-1) against time since the run started, a point at every
    change of a best (``core.report.metrics.progress_over_time``)."""
    label = "fleet mean SOL over time"
    points = [f for f in progress.fleet if f.mean_sol is not None and math.isfinite(f.mean_sol)]
    if not points:
        if not progress.passing:
            why = "no passing attempt yet"
        elif run is not None and run.device == "cpu":
            why = f"no SOL score: the cpu device has no speed of light (T_sol); {progress.passing} passing " \
                  f"attempts and {samples} metric samples stored, see the speedup below"
        else:
            why = f"no SOL score: none of {progress.passing} passing attempts has T_sol on its workloads"
        return _no_points(width, height, label, why)
    t0, t1 = _span(progress, run)
    axis, x = _time_axis(t0, t1, width, height)
    plot_h = height - _TOP - _BOTTOM
    parts = []
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = _TOP + plot_h * (1 - tick)
        parts.append(f"<line x1=\"{_LEFT}\" y1=\"{y:.1f}\" x2=\"{width - _RIGHT}\" y2=\"{y:.1f}\" "
                     f"stroke=\"#e3e6ee\"/><text x=\"{_LEFT - 6}\" y=\"{y + 4:.1f}\" text-anchor=\"end\">{tick:.2f}</text>")

    def y(value: float) -> float:
        return _TOP + plot_h * (1 - min(max(value, 0.0), 1.0))

    coords = [(x(p.ts), y(p.mean_sol)) for p in points]
    parts.append(_step_line(coords, x(t1), "#2f6fdb", 2))
    for p, (cx, cy) in zip(points, coords):
        parts.append(_point(cx, cy, "#2f6fdb", p.ts, t0, f"{p.mean_sol:.3f}",
                            f"fleet mean SOL over {p.with_sol} problems"))
    parts.append(axis)
    return _svg(width, height, f"{label}, last {points[-1].mean_sol:.2f}", "".join(parts))


_PROBLEM_COLOURS = ("#9aa5b8", "#b9a27a", "#8fb39a", "#b58fae", "#8fb0c4", "#c49a8f")


def speedup_over_time_svg(progress: Progress, run: RunInfo | None = None, width: int = 640,
                          height: int = 260) -> str:
    """Each problem's best speedup so far (thin lines) and the fleet geomean of them (thick) against time since
    the run started, on a log scale with a line at 1x; a point at every change of a best."""
    label = "best speedup over time"
    if not progress.changes:
        why = "no passing attempt yet" if not progress.passing else \
            f"no speedup: none of {progress.passing} passing attempts has a trusted T_b"
        return _no_points(width, height, label, why)
    t0, t1 = _span(progress, run)
    axis, x = _time_axis(t0, t1, width, height)
    plot_h = height - _TOP - _BOTTOM
    values = [c.speedup for c in progress.changes] + [f.geomean_speedup for f in progress.fleet]
    log_low = math.log10(min([0.5, *values])) - 0.05
    log_high = math.log10(max([2.0, *values])) + 0.05

    def y(value: float) -> float:
        return _TOP + plot_h * (1 - (math.log10(value) - log_low) / (log_high - log_low))

    parts = []
    tick = 2.0 ** math.floor(math.log2(10 ** log_low))
    while tick <= 10 ** log_high:
        if tick >= 10 ** log_low:
            ty = y(tick)
            stroke = "#333" if tick == 1.0 else "#e3e6ee"
            parts.append(f"<line x1=\"{_LEFT}\" y1=\"{ty:.1f}\" x2=\"{width - _RIGHT}\" y2=\"{ty:.1f}\" "
                         f"stroke=\"{stroke}\"/><text x=\"{_LEFT - 6}\" y=\"{ty + 4:.1f}\" "
                         f"text-anchor=\"end\">{tick:g}×</text>")
        tick *= 2
    by_problem: dict[str, list] = {}
    for change in progress.changes:
        by_problem.setdefault(change.problem, []).append(change)
    for i, (key, changes) in enumerate(by_problem.items()):
        colour = _PROBLEM_COLOURS[i % len(_PROBLEM_COLOURS)]
        coords = [(x(c.ts), y(c.speedup)) for c in changes]
        parts.append(_step_line(coords, x(t1), colour, 1))
        for c, (cx, cy) in zip(changes, coords):
            parts.append(_point(cx, cy, colour, c.ts, t0, f"{c.speedup:.2f}×", f"{key} best (attempt {c.attempt_id})"))
    fleet = [(x(f.ts), y(f.geomean_speedup)) for f in progress.fleet]
    parts.append(_step_line(fleet, x(t1), "#2e9d5b", 2.5))
    for f, (cx, cy) in zip(progress.fleet, fleet):
        parts.append(_point(cx, cy, "#2e9d5b", f.ts, t0, f"{f.geomean_speedup:.2f}×",
                            f"fleet geomean over {f.with_speedup} problems"))
    parts.append(axis)
    return _svg(width, height, f"{label}, fleet geomean last {progress.fleet[-1].geomean_speedup:.2f}×",
                "".join(parts))


def sol_histogram_bins(sols: Sequence[float], bins: int = 10) -> list[int]:
    """Counts of SOL scores in ``bins`` equal bins over [0, 1] (the last bin includes 1.0)."""
    counts = [0] * bins
    for value in sols:
        if value is None or not math.isfinite(value):
            continue
        counts[min(max(int(min(max(value, 0.0), 1.0) * bins), 0), bins - 1)] += 1
    return counts


def sol_histogram_svg(sols: Sequence[float], width: int = 640, height: int = 220) -> str:
    counts = sol_histogram_bins(sols)
    left, right, top, bottom = 44, 16, 16, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max(counts) or 1
    bar_w = plot_w / len(counts)
    parts = [f"<line x1=\"{left}\" y1=\"{top + plot_h}\" x2=\"{left + plot_w}\" y2=\"{top + plot_h}\" "
             "stroke=\"#99a\"/>"]
    for i, count in enumerate(counts):
        h = plot_h * count / peak
        x = left + i * bar_w
        parts.append(f"<rect x=\"{x + 2:.1f}\" y=\"{top + plot_h - h:.1f}\" width=\"{bar_w - 4:.1f}\" "
                     f"height=\"{h:.1f}\" fill=\"#5b8def\"><title>SOL {i / 10:.1f}–{(i + 1) / 10:.1f}: {count}"
                     "</title></rect>")
        if count:
            parts.append(f"<text x=\"{x + bar_w / 2:.1f}\" y=\"{top + plot_h - h - 3:.1f}\" "
                         f"text-anchor=\"middle\">{count}</text>")
        parts.append(f"<text x=\"{x:.1f}\" y=\"{height - 10}\" text-anchor=\"middle\">{i / 10:.1f}</text>")
    parts.append(f"<text x=\"{left + plot_w:.1f}\" y=\"{height - 10}\" text-anchor=\"middle\">1.0</text>")
    total = sum(counts)
    return _svg(width, height, f"histogram of best SOL over {total} problems", "".join(parts))


def speedup_bars_svg(problems: Sequence[ProblemSummary], width: int = 900) -> str:
    """One horizontal bar per problem from 1× to its best speedup, on a log scale, with a line at 1×."""
    label_w, right, top, row_h, axis_h = 280, 70, 8, 20, 24
    height = top + row_h * max(len(problems), 1) + axis_h
    plot_w = width - label_w - right
    speedups = [p.best_speedup for p in problems
                if p.best_speedup is not None and math.isfinite(p.best_speedup) and p.best_speedup > 0]
    low = min([0.5, *speedups])
    high = max([2.0, *speedups])
    log_low, log_high = math.log10(low) - 0.05, math.log10(high) + 0.05

    def x(value: float) -> float:
        return label_w + plot_w * (math.log10(value) - log_low) / (log_high - log_low)

    parts = []
    bottom = top + row_h * max(len(problems), 1)
    tick = 2.0 ** math.floor(math.log2(low))
    while tick <= high * 1.0001:
        if low <= tick * 1.0001 and tick > 0:
            tx = x(tick)
            parts.append(f"<line x1=\"{tx:.1f}\" y1=\"{top}\" x2=\"{tx:.1f}\" y2=\"{bottom}\" stroke=\"#eef\"/>"
                         f"<text x=\"{tx:.1f}\" y=\"{bottom + 15}\" text-anchor=\"middle\">{tick:g}×</text>")
        tick *= 2
    for i, p in enumerate(problems):
        y = top + i * row_h
        parts.append(f"<text x=\"{label_w - 8}\" y=\"{y + row_h * 0.7:.1f}\" text-anchor=\"end\">{_e(p.key)}</text>")
        s = p.best_speedup
        if s is None or not math.isfinite(s) or s <= 0:
            parts.append(f"<text x=\"{x(1.0) + 6:.1f}\" y=\"{y + row_h * 0.7:.1f}\" fill=\"#999\">no result</text>")
            continue
        x0, x1 = sorted((x(1.0), x(s)))
        colour = "#2e9d5b" if s > 1.0 else "#d0574b" if s < 1.0 else "#8a8f9c"
        parts.append(f"<rect x=\"{x0:.1f}\" y=\"{y + 3}\" width=\"{max(x1 - x0, 1.0):.1f}\" height=\"{row_h - 6}\" "
                     f"fill=\"{colour}\"><title>{_e(p.key)}: {s:.2f}×</title></rect>")
        parts.append(f"<text x=\"{max(x(s), x(1.0)) + 4:.1f}\" y=\"{y + row_h * 0.7:.1f}\">{s:.2f}×</text>")
    one = x(1.0)
    parts.append(f"<line x1=\"{one:.1f}\" y1=\"{top - 4}\" x2=\"{one:.1f}\" y2=\"{bottom}\" stroke=\"#333\" "
                 "stroke-width=\"1.5\"/>")
    return _svg(width, height, "best speedup per problem, log scale", "".join(parts))


# ---------------------------------------------------------------- the page


def render_report_html(report: RunReport, title: str = "kernelfleet run") -> str:
    run = report.run
    meta = []
    if run is not None:
        created = datetime.datetime.fromtimestamp(run.created_at).strftime("%Y-%m-%d %H:%M")
        meta.append(f"started {created}")
        meta.append(f"state {run.state}")
        meta.append(run.gpu_name or run.device)
        if run.gpus:
            meta.append(f"GPUs {', '.join(str(g) for g in run.gpus)}")
    meta.append(f"{len(report.problems)} problems")
    best_sols = [p.best_sol for p in report.problems if p.best_sol is not None]
    progress = report.progress or Progress([], [], 0, 0)
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1><p class=\"meta\">{_e(' · '.join(meta))}</p>",
        "<h2>Fleet: before → after</h2>", _summary_table(report.before, report.after, report.device_word),
        "<h2>Best speedup over time</h2>", speedup_over_time_svg(progress, run),
        "<h2>Fleet mean SOL over time</h2>", sol_over_time_svg(progress, run, len(report.metrics)),
        "<h2>Best SOL across problems</h2>", sol_histogram_svg(best_sols),
        "<h2>Best speedup per problem</h2>", speedup_bars_svg(report.problems),
        "<h2>Problems</h2>", _problem_table(report.problems), _not_evaluated(report.not_evaluated),
        "</body></html>\n",
    ])


def render_html(reader: Queries) -> str:
    run_dir = getattr(reader, "run_dir", None)
    title = f"kernelfleet run {run_dir.name}" if run_dir is not None else "kernelfleet run"
    return render_report_html(build_report(reader), title)
