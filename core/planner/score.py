"""The scheduling score of an open problem: pure arithmetic over its row, its recent activity and the config.

    score = weight_priority * priority                                     # what a person asked for
          + weight_sol_gap * (1 - best_sol)                                # room left under the speed of light (no best: 1)
          + weight_improvement * min(rate / (rate + ref), 1)               # recent best-SOL gain per GPU-second, in [0, 1)
          - weight_failures * failures_in_row / max_consecutive_failures   # how broken it has been lately
          + PINNED_BONUS if pinned                                         # pinned problems always come first

``rate`` is ``improvement_rate(activity)``; ``ref`` is ``reference_rate`` of the open problems' rates (their median
positive rate), so the improvement term is 1/2 for a problem improving at the median pace. Higher scores are served
first; ties go to the problem with fewer attempts, then the lower id (``rank_key``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from core.planner.model import ProblemActivity
from core.store.model import ProblemRow

if TYPE_CHECKING:
    from core.config.schema import PlannerConfig

PINNED_BONUS = 1e6    # added to a pinned problem's score: more than any sum of the other terms
MIN_GPU_SECONDS = 1e-3  # floor of the rate's denominator
DEFAULT_REF_RATE = 1e-3  # reference rate when no open problem improved recently


def improvement_rate(activity: ProblemActivity | None) -> float:
    """Best-SOL gained per GPU-second over the recent window; 0 without activity, never negative."""
    if activity is None or activity.recent_sol_gain <= 0:
        return 0.0
    return activity.recent_sol_gain / max(activity.recent_gpu_seconds, MIN_GPU_SECONDS)


def reference_rate(rates: Iterable[float]) -> float:
    """The median of the positive rates, or DEFAULT_REF_RATE when none is positive."""
    positive = sorted(r for r in rates if r > 0)
    n = len(positive)
    if n == 0:
        return DEFAULT_REF_RATE
    mid = n // 2
    return positive[mid] if n % 2 else (positive[mid - 1] + positive[mid]) / 2


def problem_score(p: ProblemRow, rate: float, ref: float, cfg: PlannerConfig) -> float:
    """The score of an open problem (see the module docstring); the hot path of ``plan``."""
    improvement = rate / (rate + ref) if rate > 0 else 0.0
    s = (cfg.weight_priority * p.priority
         + cfg.weight_sol_gap * (1.0 - (p.best_sol if p.best_sol is not None else 0.0))
         + cfg.weight_improvement * (improvement if improvement < 1.0 else 1.0)
         - cfg.weight_failures * p.failures_in_row / cfg.max_consecutive_failures)
    return s + PINNED_BONUS if p.pinned else s


def problem_scores(rows: dict[int, ProblemRow], rates: dict[int, float], ref: float,
                   cfg: PlannerConfig) -> dict[int, float]:
    """``problem_score`` of every problem in ``rates`` (ids into ``rows``): the same arithmetic, one loop."""
    wp, wg, wi = cfg.weight_priority, cfg.weight_sol_gap, cfg.weight_improvement
    wf = cfg.weight_failures / cfg.max_consecutive_failures
    out = {}
    for pid, rate in rates.items():
        p = rows[pid]
        sol = p.best_sol
        s = wp * p.priority + wg * (1.0 - (sol if sol is not None else 0.0)) - wf * p.failures_in_row
        if rate > 0:
            improvement = rate / (rate + ref)
            s += wi * (improvement if improvement < 1.0 else 1.0)
        out[pid] = s + PINNED_BONUS if p.pinned else s
    return out


def rank_key(p: ProblemRow, score: float) -> tuple[float, int, int]:
    """Sort key, best first: higher score, then fewer attempts, then lower id."""
    return (-score, p.attempts, p.id)


@dataclass(frozen=True)
class ScoreTerms:
    """The weighted terms of one problem's score, for reasons shown to a person."""

    priority: float
    sol_gap: float
    improvement: float
    failures: float
    pinned: bool

    @property
    def total(self) -> float:
        s = self.priority + self.sol_gap + self.improvement - self.failures
        return s + PINNED_BONUS if self.pinned else s


def score_terms(p: ProblemRow, rate: float, ref: float, cfg: PlannerConfig) -> ScoreTerms:
    improvement = min(rate / (rate + ref), 1.0) if rate > 0 else 0.0
    return ScoreTerms(
        priority=cfg.weight_priority * p.priority,
        sol_gap=cfg.weight_sol_gap * (1.0 - (p.best_sol if p.best_sol is not None else 0.0)),
        improvement=cfg.weight_improvement * improvement,
        failures=cfg.weight_failures * p.failures_in_row / cfg.max_consecutive_failures,
        pinned=p.pinned,
    )


def describe_score(p: ProblemRow, rate: float, ref: float, cfg: PlannerConfig) -> str:
    """E.g. ``norm/rmsnorm (score 1.84: priority 1, SOL gap 0.62, improvement 0.22)``: the raw figures behind it.

    A pinned problem shows its score without PINNED_BONUS and says "pinned".
    """
    total = problem_score(p, rate, ref, cfg)
    if p.pinned:
        total -= PINNED_BONUS
    text = f"{p.key} ({'pinned, ' if p.pinned else ''}score {total:.2f}: priority {p.priority}, SOL gap "
    text += f"{1.0 - (p.best_sol if p.best_sol is not None else 0.0):.2f}"
    if rate > 0:
        text += f", improvement {cfg.weight_improvement * min(rate / (rate + ref), 1.0):.2f}"
    if p.failures_in_row:
        text += f", {p.failures_in_row} failures in a row"
    return text + ")"
