"""Attempts as the run makes them: begun, evaluated and recorded by the attempt owner (``core.fleet.attempt``), then
what follows each: the ``attempt`` event, the problem's activity, and news for the composites job when a passing
result may have changed the problem's frontier."""

from __future__ import annotations

import time
from collections import deque

from core.evaluate.verdict import Verdict
from core.fleet.attempt import Candidate
from core.fleet.context import RunContext
from core.fleet.record import Recorded
from core.solution.schema import Solution


class RunAttempts:
    def __init__(self, run: RunContext):
        self.run = run

    async def attempt(self, problem_id: int, candidate: Candidate, decided: Verdict | None = None, *,
                      priority: int | None = None) -> Recorded:
        """Begin, evaluate and record an attempt; ``decided``: a verdict reached before any build (a static check,
        a review gate), recorded as it is without an evaluation; ``priority`` None: the problem's."""
        attempt_id = self.run.life.begin(problem_id, candidate)
        return await self.complete(problem_id, attempt_id, candidate.solution, candidate.workloads, decided,
                                   priority=priority)

    async def complete(self, problem_id: int, attempt_id: int, solution: Solution,
                       workloads: tuple[int, ...] | None, decided: Verdict | None = None, *,
                       priority: int | None = None) -> Recorded:
        """Evaluate and record a pending attempt, then what the run does after each."""
        run = self.run
        problem = run.problems[problem_id]
        recorded = await run.life.complete(problem_id, problem, attempt_id, solution, workloads, decided=decided,
                                           priority=priority)
        run.attempts_done += 1
        attempt = recorded.attempt
        history = run.activity.setdefault(problem_id, deque())
        history.append((time.time(), attempt.gpu_seconds, attempt.gain))
        agent = "composite" if attempt.composite else run.names.get(attempt.agent_id, "seed")
        run.event("attempt", f"attempt {attempt.id} by {agent}: {outcome_line(attempt)}"
                             + (f" on {attempt.node} GPU {attempt.gpu}" if run.many_nodes() else "")
                             + (" — new best" if recorded.new_best else "")
                             + (f" [{attempt.note}]" if attempt.note and attempt.note != "seed" else ""),
                  agent_id=attempt.agent_id, problem_id=problem_id)
        # A composite needs a frontier of two or more; most attempts leave it at one, and tell nothing.
        if attempt.passed and not attempt.composite and len(run.store.problem(problem_id).frontier) >= 2:
            run.frontier_news.tell(problem_id)
        return recorded


def outcome_line(attempt) -> str:
    if attempt.status != "PASSED":
        return f"{attempt.status}: {attempt.reason[:160]}"
    parts = ["PASSED"]
    if attempt.speedup is not None:
        parts.append(f"{attempt.speedup:.2f}x")
    if attempt.sol is not None:
        parts.append(f"SOL {attempt.sol:.2f}")
    return " ".join(parts)
