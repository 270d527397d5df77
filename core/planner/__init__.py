"""The planner: pure functions that assign agents to problems and set problem statuses, once per tick."""

from core.planner.model import (
    ACTIVE,
    CLOSED_STATUSES,
    DONE,
    FAILED,
    OVER_BUDGET,
    PAUSED,
    PLATEAUED,
    UNRUNNABLE,
    STATUSES,
    WAITING,
    Assignment,
    Plan,
    PlannerInput,
    ProblemActivity,
    RunTotals,
    StatusChange,
)
from core.planner.plan import REBALANCE_MARGIN, closure_reason, closure_status, plan, run_stop_reason
from core.planner.score import (
    PINNED_BONUS,
    ScoreTerms,
    describe_score,
    improvement_rate,
    problem_score,
    reference_rate,
    score_terms,
)

__all__ = [
    "ACTIVE", "CLOSED_STATUSES", "DONE", "FAILED", "OVER_BUDGET", "PAUSED", "PINNED_BONUS", "PLATEAUED", "REBALANCE_MARGIN",
    "STATUSES", "UNRUNNABLE", "WAITING", "Assignment", "Plan", "PlannerInput", "ProblemActivity", "RunTotals", "ScoreTerms",
    "StatusChange", "closure_reason", "closure_status", "describe_score", "improvement_rate", "plan",
    "problem_score", "reference_rate", "run_stop_reason", "score_terms",
]
