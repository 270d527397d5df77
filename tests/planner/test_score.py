"""score.py: the terms of the score and the reference rate."""

from __future__ import annotations

import pytest
from planner_testkit import Cfg, activity, problem

from core.planner import PINNED_BONUS, describe_score, improvement_rate, problem_score, reference_rate, score_terms


def test_reference_rate_is_the_median_positive_rate():
    assert reference_rate([]) == 1e-3
    assert reference_rate([0.0, 0.0]) == 1e-3
    assert reference_rate([0.0, 3.0, 1.0, 2.0]) == 2.0
    assert reference_rate([4.0, 1.0]) == 2.5


def test_improvement_rate():
    assert improvement_rate(None) == 0.0
    assert improvement_rate(activity(1, 10.0, 0.5)) == pytest.approx(0.05)
    assert improvement_rate(activity(1, 0.0, 0.002)) == pytest.approx(2.0)  # GPU seconds floored at 1e-3
    assert improvement_rate(activity(1, 10.0, -0.1)) == 0.0


def test_score_terms():
    cfg = Cfg(weight_priority=2.0, weight_sol_gap=1.0, weight_improvement=1.0, weight_failures=0.5)
    p = problem(1, priority=1, best_sol=0.38, failures_in_row=4)
    s = problem_score(p, 0.01, 0.01, cfg)
    assert s == pytest.approx(2.0 + 0.62 + 0.5 - 0.5 * 4 / 8)
    assert s == pytest.approx(score_terms(p, 0.01, 0.01, cfg).total)
    assert problem_score(problem(1, best_sol=None), 0.0, 1e-3, cfg) == pytest.approx(1.0)
    assert problem_score(problem(1, best_sol=0.0), 1e9, 1e-3, cfg) < 2.0  # the improvement term saturates below 1
    pinned = problem(1, priority=1, best_sol=0.38, failures_in_row=4, pinned=True)
    assert problem_score(pinned, 0.01, 0.01, cfg) == pytest.approx(s + PINNED_BONUS)
    assert describe_score(pinned, 0.01, 0.01, Cfg()) == (
        "set/p1 (pinned, score 1.87: priority 1, SOL gap 0.62, improvement 0.50, 4 failures in a row)")


def test_describe_score():
    assert describe_score(problem(1, key="norm/rmsnorm", priority=1, best_sol=0.38), 0.0, 1e-3, Cfg()) == (
        "norm/rmsnorm (score 1.62: priority 1, SOL gap 0.62)")
