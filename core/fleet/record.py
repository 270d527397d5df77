"""Writing an attempt's result and the counters it moves, in one transaction, so a kill never counts it twice."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from core.evaluate.evaluator import Placement
from core.fleet.frontier import compute_frontier
from core.fleet.scoring import AttemptFigures, improvement
from core.roofline.sol import is_better
from core.store.model import AttemptRow, frontier_member_to_dict
from core.store.writer import RunStore


@dataclass(frozen=True)
class Recorded:
    attempt: AttemptRow
    new_best: bool
    gain: float


def record_result(store: RunStore, attempt_id: int, *, status: str, reason: str, verdict: dict | None,
                  build: dict | None, figures: AttemptFigures, plateau_min_gain: float,
                  placement: Placement | None = None) -> Recorded:
    with store.transaction():
        pending = store.attempt_head(attempt_id)
        if pending is None or pending.state != "pending":
            raise ValueError(f"attempt {attempt_id} is not pending")
        store.finish_attempt(attempt_id, status=status, reason=reason, verdict=verdict, build=build,
                             times_ms=figures.times_ms, speedup=figures.speedup, sol=figures.sol,
                             gpu_seconds=figures.gpu_seconds, node=placement.node if placement else "",
                             gpu=placement.gpu if placement else None,
                             device_model=placement.device_model if placement else "")
        problem = store.problem(pending.problem_id)
        passed = status == "PASSED"
        # Tokens and dollars are not here: every model call adds its own when it returns (RunStore.add_llm_call).
        changes: dict = {"attempts": problem.attempts + 1,
                         "gpu_seconds": problem.gpu_seconds + figures.gpu_seconds,
                         "failures_in_row": 0 if passed else problem.failures_in_row + 1}
        new_best, gain = False, 0.0
        if pending.full:
            if passed and is_better(problem.best_speedup, figures.speedup):
                gain = improvement(problem.best_speedup, problem.best_sol, figures.speedup, figures.sol)
                new_best = True
                changes.update(best_attempt_id=attempt_id, best_speedup=figures.speedup, best_sol=figures.sol,
                               last_change_at=time.time())
            changes["since_improvement"] = 0 if new_best and gain >= plateau_min_gain \
                else problem.since_improvement + 1
        if pending.note == "seed" and problem.seed_attempt_id is None:
            changes.update(seed_attempt_id=attempt_id, seed_speedup=figures.speedup, seed_sol=figures.sol)
            changes["since_improvement"] = 0
        store.update_problem(problem.id, **changes)
        # The gain the planner counts (per problem and per model profile): a first result has no predecessor to
        # improve on (gain inf), so it is no rate to compare.
        if new_best and math.isfinite(gain) and gain > 0:
            store.set_attempt_gain(attempt_id, gain)
        if passed:  # only a passing result can change the frontier
            frontier = compute_frontier(store.passing_times(problem.id))
            store.set_problem_frontier(problem.id, [frontier_member_to_dict(m) for m in frontier])
        if pending.agent_id is not None:
            agent = store.agent(pending.agent_id)
            store.update_agent(agent.id, attempts=agent.attempts + 1,
                               failures_in_row=0 if passed else agent.failures_in_row + 1)
    return Recorded(store.attempt(attempt_id), new_best, gain)
