"""A run's report as one self-contained HTML page: inline CSS and hand-written inline SVG, no scripts, nothing
fetched. Every piece of text from the store goes through :func:`html.escape`."""

from __future__ import annotations

import datetime
import html
import math
from typing import Sequence

from core.report.metrics import FleetSummary, ProblemSummary, RunReport, build_report, comparison_rows
from core.store.model import MetricRow
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


def _summary_table(before: FleetSummary, after: FleetSummary) -> str:
    rows = comparison_rows(before, after, _x, _f)
    body = "".join(f"<tr><td class=\"l\">{_e(a)}</td><td>{_e(b)}</td><td>{_e(c)}</td></tr>" for a, b, c in rows)
    totals = (f"{after.attempts} attempts · {after.tokens} tokens · ${after.dollars:.2f} · "
              f"{after.gpu_seconds:.1f} GPU seconds")
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
            f"<td class=\"{_delta_class(p.seed_sol, p.best_sol)}\">{_e(_f(p.best_sol))}</td></tr>")
    return ("<table class=\"problems\"><thead><tr><th class=\"l\">problem</th><th class=\"l\">status</th>"
            "<th>attempts</th><th>seed speedup</th><th>best speedup</th><th>seed SOL</th><th>best SOL</th>"
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table>")


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


def sol_over_time_svg(metrics: Sequence[MetricRow], width: int = 640, height: int = 220) -> str:
    """Fleet mean SOL (0-1) against time since the first sample."""
    points = [(m.ts, m.fleet_mean_sol) for m in metrics
              if m.fleet_mean_sol is not None and math.isfinite(m.fleet_mean_sol)]
    left, right, top, bottom = 44, 16, 10, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    parts = []
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = top + plot_h * (1 - tick)
        parts.append(f"<line x1=\"{left}\" y1=\"{y:.1f}\" x2=\"{left + plot_w}\" y2=\"{y:.1f}\" stroke=\"#e3e6ee\"/>"
                     f"<text x=\"{left - 6}\" y=\"{y + 4:.1f}\" text-anchor=\"end\">{tick:.2f}</text>")
    if not points:
        parts.append(f"<text x=\"{left + plot_w / 2:.1f}\" y=\"{top + plot_h / 2:.1f}\" text-anchor=\"middle\" "
                     "class=\"none\">no metric samples yet</text>")
        return _svg(width, height, "fleet mean SOL over time: no samples", "".join(parts))
    t0, t1 = points[0][0], points[-1][0]
    span = max(t1 - t0, 1e-9)

    def xy(ts: float, value: float) -> tuple[float, float]:
        x = left + (plot_w * (ts - t0) / span if t1 > t0 else plot_w / 2)
        return x, top + plot_h * (1 - min(max(value, 0.0), 1.0))

    coords = [xy(ts, v) for ts, v in points]
    if len(coords) > 1:
        parts.append("<polyline fill=\"none\" stroke=\"#2f6fdb\" stroke-width=\"2\" points=\""
                     + " ".join(f"{x:.1f},{y:.1f}" for x, y in coords) + "\"/>")
    x, y = coords[-1]
    parts.append(f"<circle cx=\"{x:.1f}\" cy=\"{y:.1f}\" r=\"3\" fill=\"#2f6fdb\"/>")
    parts.append(f"<text x=\"{left}\" y=\"{height - 8}\">0</text>"
                 f"<text x=\"{left + plot_w}\" y=\"{height - 8}\" text-anchor=\"end\">{_e(_duration(t1 - t0))}</text>")
    return _svg(width, height, f"fleet mean SOL over time, last {points[-1][1]:.2f}", "".join(parts))


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
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1><p class=\"meta\">{_e(' · '.join(meta))}</p>",
        "<h2>Fleet: before → after</h2>", _summary_table(report.before, report.after),
        "<h2>Fleet mean SOL over time</h2>", sol_over_time_svg(report.metrics),
        "<h2>Best SOL across problems</h2>", sol_histogram_svg(best_sols),
        "<h2>Best speedup per problem</h2>", speedup_bars_svg(report.problems),
        "<h2>Problems</h2>", _problem_table(report.problems),
        "</body></html>\n",
    ])


def render_html(reader: Queries) -> str:
    run_dir = getattr(reader, "run_dir", None)
    title = f"kernelfleet run {run_dir.name}" if run_dir is not None else "kernelfleet run"
    return render_report_html(build_report(reader), title)
