"""core.report.figures: each fleet figure by hand on pairs where the old formulas disagreed, and the report's, the
progress replay's and the planner's figures read from it."""

import math

import pytest

from core.llm.planner import fleet_text
from core.report.figures import (beating_baseline, busy_fraction, busy_sample, counted_sol, counted_speedup,
                                 device_word, fleet_figures, fleet_geomean_speedup, fleet_mean_sol, fleet_median_sol,
                                 problem_figures)
from core.report.metrics import ProblemSummary, fleet_summary
from core.store.model import MetricRow, RunInfo

# (speedup, SOL) per problem: solved; a speedup without SOL (a workload with T_b lacks T_sol); unsolved;
# slower than T_b; 0 and non-finite values a store may hold (the old metric sample took inf and raised on nan)
PAIRS = [(4.0, 0.8), (2.0, None), (None, None), (0.5, 0.3), (float("inf"), float("nan")), (0.0, None),
         (float("nan"), 0.1)]


def test_what_counts():
    assert [counted_speedup(s) for s, _ in PAIRS] == [4.0, 2.0, None, 0.5, None, None, None]
    assert [counted_sol(v) for _, v in PAIRS] == [0.8, None, None, 0.3, None, None, 0.1]


def test_fleet_figures_by_hand():
    f = fleet_figures(PAIRS)
    assert f.problems == 7 and f.with_result == 4  # the nan-speedup problem has a SOL score
    assert (f.with_speedup, f.with_sol) == (3, 3)
    assert f.geomean_speedup == pytest.approx(4 ** (1 / 3))  # (4 * 2 * 0.5)^(1/3)
    assert f.mean_sol == pytest.approx(0.4) and f.median_sol == pytest.approx(0.3)
    assert (f.beating_baseline, f.above_2x, f.share_beating) == (2, 1, pytest.approx(2 / 7))
    # each figure is its function's, over the same values
    speedups, sols = [s for s, _ in PAIRS], [v for _, v in PAIRS]
    assert f.geomean_speedup == fleet_geomean_speedup(speedups) and f.mean_sol == fleet_mean_sol(sols)
    assert f.median_sol == fleet_median_sol(sols) and f.beating_baseline == beating_baseline(speedups)


def test_no_problem_and_no_result():
    assert fleet_figures([]) == fleet_figures([]) and fleet_figures([]).share_beating == 0.0
    f = fleet_figures([(None, None), (float("inf"), None)])
    assert (f.problems, f.with_result, f.geomean_speedup, f.mean_sol, f.median_sol) == (2, 0, None, None, None)


def test_the_reports_fleet_summary_is_the_figures_of_bests_and_seeds():
    problems = [ProblemSummary(f"s/p{i}", f"p{i}", "s", "active", 1, s, v, None if s is None else s / 2, v)
                for i, (s, v) in enumerate(PAIRS)]
    for seed in (False, True):
        summary, f = fleet_summary(problems, seed=seed), problem_figures(problems, seed=seed)
        assert (summary.problems, summary.with_result, summary.geomean_speedup, summary.beating_baseline,
                summary.share_beating, summary.above_2x, summary.median_sol, summary.mean_sol) == (
            f.problems, f.with_result, f.geomean_speedup, f.beating_baseline, f.share_beating, f.above_2x,
            f.median_sol, f.mean_sol)
    assert fleet_summary(problems, seed=True).geomean_speedup == pytest.approx(4 ** (1 / 3) / 2)


def _metric(busy):
    return MetricRow(0.0, None, None, busy, None, 0, 0, 0.0, 0)


def test_busy_fraction_is_the_latest_known():
    assert busy_fraction([]) is None and busy_sample([_metric(None)]) is None
    samples = [_metric(0.25), _metric(0.5), _metric(None)]
    assert busy_fraction(samples) == 0.5 and busy_sample(samples) is samples[1]


def test_device_word():
    def run(device):
        return RunInfo(0.0, {}, (), device, (), "", "running", None)

    assert (device_word(run("cpu")), device_word(run("cuda")), device_word(None)) == ("CPU", "GPU", "GPU")


def test_the_planners_fleet_line_is_the_figures():
    text = fleet_text(fleet_figures(PAIRS))
    assert text == ("Fleet: geomean speedup 1.59x over 3 problems with one, mean best SOL 0.4 over 3, 2 of 7 problems "
                    "faster than T_b")
    assert not math.isnan(fleet_figures(PAIRS).mean_sol)
