"""A workload's figures (the TUI detail's and the report's per-workload speedup and SOL) are sol_score's."""

import pytest

from core.roofline.sol import overall_figures, sol_score, workload_figures


def test_a_workloads_figures_are_the_speedup_and_sol_score():
    speedup, sol = workload_figures(0.25, 1.0, 0.1)
    assert speedup == 4.0 and sol == sol_score(0.25, 1.0, 0.1) == pytest.approx(6 / 7)
    assert (speedup, sol) == pytest.approx(overall_figures([(0.25, 1.0, 0.1)]))


@pytest.mark.parametrize("times, expected", [
    ((0.5, None, 0.1), (None, None)),  # no T_b: no speedup
    ((None, 1.0, 0.1), (None, None)),  # not timed
    ((0.5, 1.0, None), (2.0, None)),  # no T_sol: a speedup only
    ((0.5, 1.0, 0.0), (2.0, None)),
    ((0.05, 1.0, 0.1), (20.0, None)),  # below the speed of light: no score (sol_score raises ImpossibleTime)
    ((0.5, 0.1, 0.2), (0.2, None)),  # T_b at or below T_sol: no score (DegenerateBaseline)
    ((0.0, 1.0, 0.1), (None, None)),
])
def test_undefined_figures_are_none(times, expected):
    assert workload_figures(*times) == pytest.approx(expected)
