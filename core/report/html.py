"""A run's report as one self-contained HTML page: inline CSS, hand-written inline SVG and one small inline script
(sorting, legends, drill-down links); nothing fetched. Every piece of text from the store is escaped
(``core.report.html_text.esc``); the script holds no data of the run.

The page: the fleet before → after; the bests over time (speedup, SOL) per problem and for the fleet; the
distribution of the attempts' speedups, the best SOL scores (histogram, per subset) and each problem's seed and
best; the problems table; the tuners' parameters against speedup; and per problem a drill-down with its workloads,
its attempts, their diffs, and the best's diff against the seed and its sources. A plot with nothing to show says
why in its place."""

from __future__ import annotations

import datetime
from typing import Sequence

from core.report.figures import busy_sample, counted_sol
from core.report.html_assets import CSS, SCRIPT
from core.report.html_distributions import (sol_histogram_bins, sol_histogram_svg, speedup_bars_legend,
                                            speedup_bars_svg, speedup_distribution_svg, subset_sol_legend,
                                            subset_sol_svg)
from core.report.html_drill import drill_section
from core.report.html_params import (colour_of, no_parameters_reason, parameter_legend, parameter_svg, tuned)
from core.report.html_plots import no_sol_reason, over_time_legend, sol_over_time_svg, speedup_over_time_svg
from core.report.html_svg import LegendEntry, empty, legend, problem_series, series_colour
from core.report.html_tables import not_evaluated_list, problem_anchor, problems_table, summary_table
from core.report.html_text import esc
from core.report.metrics import (ProblemDrill, Progress, RunReport, bests_by_line, build_report, held_by_line,
                                 kernel_time_line, problem_drills, speedup_distribution, subset_sols)
from core.store.queries import Queries

__all__ = ["render_html", "render_report_html", "sol_histogram_bins", "sol_histogram_svg", "sol_over_time_svg",
           "speedup_bars_svg", "speedup_over_time_svg"]


def figure(title: str, body: str, entries: Sequence[LegendEntry] = (), note: str = "") -> str:
    """A plot with its title, its legend (left out when the plot is a note saying why it is empty) and a note."""
    drawn = not body.startswith("<div class=\"empty\"")
    tail = (legend(entries) + (f"<p class=\"note\">{esc(note)}</p>" if note else "")) if drawn else ""
    return f"<figure class=\"plot\"><figcaption>{esc(title)}</figcaption>{body}{tail}</figure>"


def _over_time(report: RunReport, progress: Progress, series: dict[str, int]) -> str:
    run = report.run
    speedup_keys = [c.problem for c in progress.changes]
    sol_keys = [c.problem for c in progress.changes if c.sol is not None]
    return "<div class=\"grid\">" + figure(
        "Best speedup over time", speedup_over_time_svg(progress, run, series=series),
        over_time_legend(speedup_keys, series, "fleet geomean"),
        "Each problem's best so far (an attempt passing on every workload, faster than the best before it) and "
        "the geomean of the bests; the dark line at 1× is T_b. Click a legend entry to hide its line.") + figure(
        "Best SOL score over time", sol_over_time_svg(progress, run, len(report.metrics), series=series),
        over_time_legend(sol_keys, series, "fleet mean SOL"),
        "The SOL score of each problem's best so far and their mean; 0.5 is T_b, 1 the speed of light.") + "</div>"


def _across_problems(report: RunReport, drills: Sequence[ProblemDrill], progress: Progress,
                     series: dict[str, int]) -> str:
    bins = speedup_distribution(drills)
    passing = progress.passing
    why_no_speedup = ("no passing attempt yet" if not passing else
                      f"none of {passing} passing attempts has a speedup on every workload")
    why_no_sol = no_sol_reason(progress, report.run, len(report.metrics))
    drawn = sorted({key for b in bins for key, _ in b.counts}, key=lambda key: series.get(key, 0))
    best_sols = [v for v in (counted_sol(p.best_sol) for p in report.problems) if v is not None]
    return "<div class=\"grid\">" + "".join([
        figure("Distribution of the attempts' speedups", speedup_distribution_svg(bins, series, why_no_speedup),
               [LegendEntry(key, series_colour(series.get(key, 0)), "bar", f"p{series.get(key, 0)}") for key in drawn],
               "Every attempt that passed on every workload, by its speedup over T_b, stacked by problem."),
        figure("Best speedup per problem", speedup_bars_svg(report.problems), speedup_bars_legend(),
               "A bar from 1× (T_b) to the problem's best speedup; the mark is its seed's. Right of 1×: faster "
               "than T_b."),
        figure("Best SOL score across problems", sol_histogram_svg(best_sols, why_no_sol),
               note="How many problems' best reached each SOL score."),
        figure("Best SOL score per subset", subset_sol_svg(subset_sols(report.problems), series, why_no_sol),
               subset_sol_legend(), "Subset (problems with a SOL score / problems)."),
    ]) + "</div>"


def _parameters(drills: Sequence[ProblemDrill], series: dict[str, int]) -> str:
    problems = tuned(drills)
    if not problems:
        return empty("tuner parameters against speedup", no_parameters_reason(drills))
    index = {id(d): i for i, d in enumerate(drills)}
    out = []
    for drill in problems:
        colour = colour_of(series, drill)
        plots = "".join(parameter_svg(drill, name, colour) for name in drill.parameters)
        link = f"#{problem_anchor(index[id(drill)])}-attempts"
        out.append(f"<figure class=\"plot\"><figcaption>{esc(drill.summary.key)} <span class=\"meta\">· "
                   f"{len(drill.parameters)} tunables · <a href=\"{link}\">its attempts</a></span></figcaption>"
                   f"<div class=\"params\">{plots}</div>{legend(parameter_legend(colour))}</figure>")
    return f"<div class=\"stack\">{''.join(out)}</div>"


def _pool_note(report: RunReport) -> str:
    """The pool's account since the run's last start: busy, running kernels, what the held time went to."""
    sample, device = busy_sample(report.metrics), report.device_word
    if sample is None:
        return ""
    lines = [f"{device} busy while work waited: {sample.gpu_busy:.0%} (since the last start)",
             kernel_time_line(sample, device), held_by_line(sample, device)]
    return f"<p class=\"meta\">{' · '.join(esc(line) for line in lines if line)}</p>"


def _makers_note(report: RunReport) -> str:
    """Who made the problems' bests, by kind: the compiler agents' (the reference compiled, no hand-written kernel)
    apart from the kernels agents wrote or tuned."""
    line = bests_by_line(report.problems)
    return f"<p class=\"meta\">{esc(line[0].upper() + line[1:])}</p>" if line else ""


def _meta(report: RunReport) -> str:
    run = report.run
    meta = []
    if run is not None:
        meta.append(f"started {datetime.datetime.fromtimestamp(run.created_at).strftime('%Y-%m-%d %H:%M')}")
        meta.append(f"state {run.state}")
        meta.append(run.gpu_name or run.device)
        if run.gpus:
            meta.append(f"GPUs {', '.join(str(g) for g in run.gpus)}")
    meta.append(f"{len(report.problems)} problems")
    return " · ".join(meta)


_NAV = ("<nav><a href=\"#summary\">summary</a><a href=\"#over-time\">over time</a>"
        "<a href=\"#across\">across problems</a><a href=\"#problems\">problems</a>"
        "<a href=\"#parameters\">tuner parameters</a><a href=\"#details\">per problem</a></nav>")


def render_report_html(report: RunReport, title: str = "kernelfleet run",
                       drills: Sequence[ProblemDrill] = ()) -> str:
    """The page of ``report``; ``drills`` (``core.report.metrics.problem_drills``) give the attempts of each
    problem for the drill-downs, the speedup distribution and the parameter view."""
    progress = report.progress or Progress([], [], 0, 0)
    series = problem_series([p.key for p in report.problems] + [c.problem for c in progress.changes])
    details = "".join(drill_section(i, d) for i, d in enumerate(drills)) or \
        "<p class=\"meta\">no attempts were read for this page</p>"
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1><p class=\"meta\">{esc(_meta(report))}</p>{_NAV}",
        "<h2 id=\"summary\">Fleet: before → after</h2>",
        summary_table(report.before, report.after, report.device_word), _pool_note(report), _makers_note(report),
        "<h2 id=\"over-time\">Over time</h2>", _over_time(report, progress, series),
        "<h2 id=\"across\">Across problems</h2>", _across_problems(report, drills, progress, series),
        "<h2 id=\"problems\">Problems</h2>",
        "<p class=\"meta\">Click a header to sort, a problem to see its attempts.</p>",
        problems_table(report.problems), not_evaluated_list(report.not_evaluated),
        "<h2 id=\"parameters\">Tuner parameters against speedup</h2>", _parameters(drills, series),
        "<h2 id=\"details\">Per problem</h2>", details,
        f"<script>{SCRIPT}</script></body></html>\n",
    ])


def render_html(reader: Queries) -> str:
    run_dir = getattr(reader, "run_dir", None)
    title = f"kernelfleet run {run_dir.name}" if run_dir is not None else "kernelfleet run"
    return render_report_html(build_report(reader), title, problem_drills(reader))
