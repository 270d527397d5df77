"""The report groups the bests by subset (L1, L2, FlashInfer-Bench, Quant...) as the leaderboard does: problems with a
result, geomean speedup, how many beat T_b and median SOL per subset, by the one rule of core.report.figures, in the
text report (at 80 columns, whole) and in --json."""

from __future__ import annotations

import io

from rich.console import Console

from cli.report_cmd import subset_lines
from core.report.figures import problem_figures, subset_figures
from core.report.metrics import ProblemSummary


def _summary(key: str, speedup: float | None, sol: float | None, status: str = "done") -> ProblemSummary:
    subset, name = key.split("/")
    return ProblemSummary(key, name, subset, status, 3, speedup, sol, 1.0, 0.5)


PROBLEMS = [_summary("L1/001_a", 2.0, 0.8), _summary("L1/002_b", 0.5, 0.4), _summary("L1/003_c", None, None, "failed"),
            _summary("L2/001_d", 1.5, 0.6), _summary("FlashInfer-Bench/009_e", None, None, "unrunnable")]


def test_each_subset_has_its_own_figures_by_the_fleet_rule():
    subsets = subset_figures(PROBLEMS)
    assert list(subsets) == ["FlashInfer-Bench", "L1", "L2"]
    l1 = subsets["L1"]
    assert (l1.problems, l1.with_result, l1.beating_baseline) == (3, 2, 1)
    assert abs(l1.geomean_speedup - 1.0) < 1e-12 and abs(l1.median_sol - 0.6) < 1e-12
    assert subsets["FlashInfer-Bench"].with_result == 0 and subsets["FlashInfer-Bench"].geomean_speedup is None
    # The subsets add up to the fleet.
    assert sum(f.problems for f in subsets.values()) == problem_figures(PROBLEMS).problems == 5


def test_the_text_report_shows_one_line_per_subset_at_80_columns():
    out = io.StringIO()
    console = Console(file=out, width=80, color_system=None)
    for para in subset_lines(PROBLEMS):
        for line in para.wrapped(80):
            console.print(line, markup=False, soft_wrap=True)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("By subset, best") and all(len(line) <= 80 for line in lines)
    assert any(line.split() == ["L1", "2/3", "1.00x", "1/3", "beat", "T_b", "SOL", "0.60"] for line in lines), lines
    assert any(line.split()[:3] == ["FlashInfer-Bench", "0/1", "—"] for line in lines), lines
    assert subset_lines(PROBLEMS[:3]) == []  # one subset: the fleet's lines say it all
