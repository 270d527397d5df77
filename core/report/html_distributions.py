"""The report's plots across problems: the distribution of the attempts' speedups, the best SOL scores (a
histogram, and per subset) and each problem's seed and best speedup. Figures come from
``core.report.metrics`` (``speedup_distribution``, ``subset_sols``, the problems' summaries)."""

from __future__ import annotations

import math
from typing import Sequence

from core.report.html_svg import (FLEET_COLOUR, Frame, LegendEntry, Scale, axis_titles, empty, group,
                                  log_range, log_ticks, series_colour, svg, x_label, x_ticks, y_grid)
from core.report.html_text import clip, esc, fmt_num, fmt_x
from core.report.metrics import ProblemSummary, SpeedupBin, SubsetSol

GAIN_COLOUR, LOSS_COLOUR, SEED_COLOUR, MEAN_COLOUR = "#2e9d5b", "#d0574b", "#f0a000", "#b9c7e4"


def _count_ticks(peak: int) -> list[int]:
    step = max(1, math.ceil(peak / 5))
    return list(range(0, peak + step, step))


def speedup_distribution_svg(bins: Sequence[SpeedupBin], series: dict[str, int], why_none: str,
                             width: int = 640, height: int = 300) -> str:
    """How many attempts reached each speedup (log-width bins), stacked by problem, with the 1× (T_b) edge dark."""
    label = "distribution of the attempts' speedups"
    if not bins:
        return empty(label, why_none)
    frame = Frame(width, height)
    peak = max(b.total for b in bins)
    counts = _count_ticks(peak)
    y = Scale(0, counts[-1], frame.y1, frame.y0)
    x = Scale(bins[0].low, bins[-1].high, frame.x0, frame.x1, log=True)
    ticks = log_ticks(bins[0].low, bins[-1].high, most=8)
    parts = [y_grid(frame, counts, y, lambda t: f"{t:g}"), x_ticks(frame, [(x(t), x_label(t)) for t in ticks]),
             axis_titles(frame, "speedup over T_b of an attempt on every workload (log)", "attempts")]
    for b in bins:
        left, right, base = x(b.low), x(b.high), 0
        for key, n in b.counts:
            index = series.get(key, 0)
            top, bottom = y(base + n), y(base)
            parts.append(group(f"p{index}", f"<rect x=\"{left + 1:.1f}\" y=\"{top:.1f}\" "
                               f"width=\"{max(right - left - 2, 1):.1f}\" height=\"{bottom - top:.1f}\" "
                               f"fill=\"{series_colour(index)}\"><title>{esc(key)}: {n} attempts at "
                               f"{b.low:.3g}×–{b.high:.3g}×</title></rect>"))
            base += n
        if b.total:
            parts.append(f"<text x=\"{(left + right) / 2:.1f}\" y=\"{y(b.total) - 4:.1f}\" "
                         f"text-anchor=\"middle\">{b.total}</text>")
    if bins[0].low <= 1.0 <= bins[-1].high:
        parts.append(f"<line x1=\"{x(1.0):.1f}\" y1=\"{frame.y0:.1f}\" x2=\"{x(1.0):.1f}\" y2=\"{frame.y1:.1f}\" "
                     f"stroke=\"{FLEET_COLOUR}\" stroke-width=\"1.5\"><title>1×: as fast as T_b</title></line>")
    total = sum(b.total for b in bins)
    return svg(frame, f"{label}: {total} attempts", "".join(parts))


def sol_histogram_bins(sols: Sequence[float], bins: int = 10) -> list[int]:
    """Counts of SOL scores in ``bins`` equal bins over [0, 1] (the last bin includes 1.0)."""
    counts = [0] * bins
    for value in sols:
        if value is None or not math.isfinite(value):
            continue
        counts[min(max(int(min(max(value, 0.0), 1.0) * bins), 0), bins - 1)] += 1
    return counts


def sol_histogram_svg(sols: Sequence[float], why_none: str = "no problem has a SOL score", width: int = 640,
                      height: int = 300) -> str:
    """How many problems' best SOL score falls in each tenth of [0, 1]."""
    label = "histogram of the best SOL scores"
    counts = sol_histogram_bins(sols)
    if not sum(counts):
        return empty(label, why_none)
    frame = Frame(width, height)
    ticks = _count_ticks(max(counts))
    y = Scale(0, ticks[-1], frame.y1, frame.y0)
    bar_w = (frame.x1 - frame.x0) / len(counts)
    parts = [y_grid(frame, ticks, y, lambda t: f"{t:g}"),
             x_ticks(frame, [(frame.x0 + i * bar_w, f"{i / 10:.1f}") for i in range(len(counts) + 1)]),
             axis_titles(frame, "best SOL score (0.5 = T_b, 1 = speed of light)", "problems")]
    for i, count in enumerate(counts):
        top = y(count)
        x = frame.x0 + i * bar_w
        parts.append(f"<rect x=\"{x + 2:.1f}\" y=\"{top:.1f}\" width=\"{bar_w - 4:.1f}\" "
                     f"height=\"{frame.y1 - top:.1f}\" fill=\"#5b8def\"><title>SOL {i / 10:.1f}–{(i + 1) / 10:.1f}: "
                     f"{count} problems</title></rect>")
        if count:
            parts.append(f"<text x=\"{x + bar_w / 2:.1f}\" y=\"{top - 4:.1f}\" text-anchor=\"middle\">{count}</text>")
    return svg(frame, f"{label} over {sum(counts)} problems", "".join(parts))


def subset_sol_svg(subsets: Sequence[SubsetSol], series: dict[str, int], why_none: str, width: int = 640) -> str:
    """Per subset a bar to the mean of its problems' best SOL, a mark at the median, and a dot per problem."""
    label = "best SOL score per subset"
    if not any(s.sols for s in subsets):
        return empty(label, why_none)
    names = [f"{s.subset} ({len(s.sols)}/{s.problems})" for s in subsets]
    left = min(200, 12 + 7 * max(len(clip(n, 28)) for n in names))
    row_h = 30
    frame = Frame(width, 12 + row_h * len(subsets) + 46, left=left)
    x = Scale(0.0, 1.0, frame.x0, frame.x1)
    parts = [x_ticks(frame, [(x(t), f"{t:.2f}") for t in (0.0, 0.25, 0.5, 0.75, 1.0)]),
             f"<text class=\"axis\" x=\"{(frame.x0 + frame.x1) / 2:.1f}\" y=\"{frame.height - 8}\" "
             "text-anchor=\"middle\">best SOL score (0.5 = T_b, 1 = speed of light)</text>"]
    for t in (0.25, 0.5, 0.75, 1.0):
        parts.append(f"<line x1=\"{x(t):.1f}\" y1=\"{frame.y0:.1f}\" x2=\"{x(t):.1f}\" y2=\"{frame.y1:.1f}\" "
                     f"stroke=\"{'#9aa1ad' if t == 0.5 else '#e3e6ee'}\"/>")
    for i, (subset, name) in enumerate(zip(subsets, names)):
        top = frame.y0 + i * row_h
        mid = top + row_h / 2
        parts.append(f"<text x=\"{frame.x0 - 8:.1f}\" y=\"{mid + 4:.1f}\" text-anchor=\"end\"><title>{esc(name)}"
                     f"</title>{esc(clip(name, 28))}</text>")
        if subset.mean_sol is None:
            parts.append(f"<text x=\"{frame.x0 + 6:.1f}\" y=\"{mid + 4:.1f}\" fill=\"#8a8f9c\">no SOL score</text>")
            continue
        parts.append(f"<rect x=\"{frame.x0:.1f}\" y=\"{top + 6:.1f}\" width=\"{x(subset.mean_sol) - frame.x0:.1f}\" "
                     f"height=\"{row_h - 12}\" fill=\"{MEAN_COLOUR}\"><title>{esc(subset.subset)}: mean "
                     f"{fmt_num(subset.mean_sol)}, median {fmt_num(subset.median_sol)}</title></rect>")
        if subset.median_sol is not None:
            mx = x(subset.median_sol)
            parts.append(f"<line x1=\"{mx:.1f}\" y1=\"{top + 3:.1f}\" x2=\"{mx:.1f}\" y2=\"{top + row_h - 3:.1f}\" "
                         f"stroke=\"{FLEET_COLOUR}\" stroke-width=\"2\"/>")
        for key, sol in subset.sols:
            index = series.get(key, 0)
            parts.append(group(f"p{index}", f"<circle cx=\"{x(sol):.1f}\" cy=\"{mid:.1f}\" r=\"4\" "
                               f"fill=\"{series_colour(index)}\" stroke=\"#fff\"><title>{esc(key)}: "
                               f"{sol:.3f}</title></circle>"))
    return svg(frame, label, "".join(parts))


def subset_sol_legend() -> list[LegendEntry]:
    return [LegendEntry("mean of the subset's best SOL", MEAN_COLOUR, "bar"),
            LegendEntry("median", FLEET_COLOUR, "line"),
            LegendEntry("a problem's best (its colour on every plot)", "#5f6b7a", "dot")]


def speedup_bars_svg(problems: Sequence[ProblemSummary], width: int = 640) -> str:
    """One horizontal bar per problem from 1× to its best speedup and a mark at its seed's, on a log scale."""
    label = "best speedup per problem, log scale"
    if not problems:
        return empty(label, "the run has no problems")
    keys = [clip(p.key, 38) for p in problems]
    row_h = 22
    frame = Frame(width, 12 + row_h * len(problems) + 46, left=min(280, 16 + 7 * max(len(k) for k in keys)),
                  right=64)
    low, high = log_range([v for p in problems for v in (p.best_speedup, p.seed_speedup) if v is not None])
    x = Scale(low, high, frame.x0, frame.x1, log=True)
    ticks = log_ticks(low, high)
    parts = [f"<line x1=\"{x(t):.1f}\" y1=\"{frame.y0:.1f}\" x2=\"{x(t):.1f}\" y2=\"{frame.y1:.1f}\" "
             "stroke=\"#e3e6ee\"/>" for t in ticks]
    parts += [x_ticks(frame, [(x(t), x_label(t)) for t in ticks]),
              f"<text class=\"axis\" x=\"{(frame.x0 + frame.x1) / 2:.1f}\" y=\"{frame.height - 8}\" "
              "text-anchor=\"middle\">best speedup over T_b (log)</text>"]
    for i, (p, key) in enumerate(zip(problems, keys)):
        top = frame.y0 + i * row_h
        text_y = top + row_h * 0.68
        parts.append(f"<text x=\"{frame.x0 - 8:.1f}\" y=\"{text_y:.1f}\" text-anchor=\"end\"><title>{esc(p.key)}"
                     f"</title>{esc(key)}</text>")
        s = p.best_speedup
        if s is None or not math.isfinite(s) or s <= 0:
            parts.append(f"<text x=\"{x(1.0) + 6:.1f}\" y=\"{text_y:.1f}\" fill=\"#8a8f9c\">no result</text>")
            continue
        x0, x1 = sorted((x(1.0), x(s)))
        colour = GAIN_COLOUR if s > 1.0 else LOSS_COLOUR if s < 1.0 else "#8a8f9c"
        parts.append(f"<rect x=\"{x0:.1f}\" y=\"{top + 4}\" width=\"{max(x1 - x0, 1.0):.1f}\" height=\"{row_h - 8}\" "
                     f"fill=\"{colour}\"><title>{esc(p.key)}: best {fmt_x(s)}, seed {fmt_x(p.seed_speedup)}"
                     "</title></rect>")
        parts.append(f"<text x=\"{max(x(s), x(1.0)) + 4:.1f}\" y=\"{text_y:.1f}\">{s:.2f}×</text>")
        if p.seed_speedup is not None and math.isfinite(p.seed_speedup) and p.seed_speedup > 0:
            sx = x(p.seed_speedup)
            parts.append(f"<line x1=\"{sx:.1f}\" y1=\"{top + 1:.1f}\" x2=\"{sx:.1f}\" y2=\"{top + row_h - 1:.1f}\" "
                         f"stroke=\"{SEED_COLOUR}\" stroke-width=\"3\"><title>{esc(p.key)}: seed "
                         f"{fmt_x(p.seed_speedup)}</title></line>")
    one = x(1.0)
    parts.append(f"<line x1=\"{one:.1f}\" y1=\"{frame.y0 - 4:.1f}\" x2=\"{one:.1f}\" y2=\"{frame.y1:.1f}\" "
                 f"stroke=\"{FLEET_COLOUR}\" stroke-width=\"1.5\"/>")
    return svg(frame, label, "".join(parts))


def speedup_bars_legend() -> list[LegendEntry]:
    return [LegendEntry("best, faster than T_b", GAIN_COLOUR, "bar"),
            LegendEntry("best, slower than T_b", LOSS_COLOUR, "bar"),
            LegendEntry("seed", SEED_COLOUR, "line"), LegendEntry("1× (T_b)", FLEET_COLOUR, "line")]

