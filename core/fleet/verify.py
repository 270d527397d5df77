"""Each problem's best attempt re-verified with upstream SOL-ExecBench's full correctness rules before the run
reports it as best: ``rounds`` (upstream's 10) rounds of fresh seeded inputs on every workload it was counted on,
under the same checks, on a device of the run (not timed again: its times are those it was evaluated with). The
search loop may use fewer rounds for speed; a best that fails here is marked (``attempts.verified`` = "failed:
...") and the problem's best passes to its next fastest passing attempt, which is verified in turn.
``kernelfleet report`` says which bests were re-verified.

Only the candidate's own failures demote a best. A verdict every failure of which is ours (``inconclusive``: the
judge ran out of device memory, ``ReasonCode.ours``, or the reference failed) says nothing of the candidate: the
evaluation is tried again after each of ``retry_waits_s``, and when none is conclusive the best stays best, not yet
re-verified, for a later pass (the end of the run, ``--resume``, ``kernelfleet verify``). Where the line between our
out-of-memory and the candidate's lies: ``core.evaluate.memory_budget``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import anyio

from core.evaluate.verdict import Status, Verdict
from core.fleet.attempt import AttemptLife
from core.problem.schema import Problem
from core.roofline.sol import is_better
from core.solution.io import parse_solution
from core.store.model import AttemptRow
from core.store.writer import RunStore

UPSTREAM_ROUNDS = 10
MAX_TRIES = 3  # bests tried per problem; a problem whose first three fail keeps no verified best this time
PASSED_PREFIX, FAILED_PREFIX = "passed", "failed"
# Beyond the evaluation pool's own tries (core.evaluate.memory_budget.OomRetry), an inconclusive verification is
# evaluated again after each of these waits: long enough for the T_b of problems still being prepared to finish.
RETRY_WAITS_S = (30.0, 120.0)


def inconclusive(verdict: Verdict) -> str:
    """Why ``verdict`` says nothing of the candidate (the first such reason), or "" when it does: it passed, or a
    workload failed by the candidate's own doing."""
    failing = [w for w in verdict.workloads if not w.passed and w.status is not Status.UNAVAILABLE]
    if verdict.status is Status.PASSED or not failing:
        return ""
    if all(w.code.ours or w.status is Status.INVALID_REFERENCE for w in failing):
        first = failing[0]
        line = first.reason.splitlines()[0][:300] if first.reason else ""
        return f"workload {first.index}: {first.status.value}" + (f": {line}" if line else "")
    return ""


class BestVerifier:
    def __init__(self, store: RunStore, life: AttemptLife, rounds: int = UPSTREAM_ROUNDS,
                 log: Callable[..., None] = lambda line, problem_id=None: None,
                 retry_waits_s: Sequence[float] = RETRY_WAITS_S):
        self.store = store
        self.life = life
        self.rounds = rounds
        self.log = log
        self.retry_waits_s = tuple(retry_waits_s)

    def unverified(self) -> list[int]:
        """Problems whose best attempt has not been re-verified."""
        return [p.id for p in self.store.problems()
                if p.best_attempt_id is not None and not self.store.attempt(p.best_attempt_id).verified]

    async def verify(self, problem_id: int, problem: Problem) -> None:
        for _ in range(MAX_TRIES):
            row = self.store.problem(problem_id)
            if row.best_attempt_id is None:
                return
            best = self.store.attempt(row.best_attempt_id)
            if best.verified.startswith(PASSED_PREFIX):
                return
            outcome = best.verified
            if not outcome:
                verdict = await self._conclusive_verdict(problem_id, problem, best, row.priority)
                if verdict is None:
                    return
                if verdict.status is Status.PASSED:
                    self.store.set_attempt_verified(best.id, f"{PASSED_PREFIX}: {self.rounds} rounds of fresh inputs")
                    self.log(f"best attempt {best.id} re-verified: {self.rounds} rounds of fresh inputs passed",
                             problem_id=problem_id)
                    return
                first = (verdict.reason or "").splitlines()[0][:300] if verdict.reason else ""
                outcome = f"{FAILED_PREFIX}: {verdict.status.value}" + (f": {first}" if first else "")
                self.store.set_attempt_verified(best.id, outcome)
            self._demote(problem_id, best, outcome)

    async def _conclusive_verdict(self, problem_id: int, problem: Problem, best: AttemptRow,
                                  priority: int) -> Verdict | None:
        """The best's verdict under the full rules, evaluated again after each retry wait while it is
        ``inconclusive``; None when it never was conclusive (the best is left as it is, not yet re-verified)."""
        for wait_s in (*self.retry_waits_s, None):
            # Correctness alone: the attempt's times were measured when it was evaluated.
            evaluation = await self.life.evaluate(problem, parse_solution(best.solution), best.workloads,
                                                  priority=priority, rounds=self.rounds, timed=False)
            why = inconclusive(evaluation.verdict)
            if not why:
                return evaluation.verdict
            if wait_s is None:
                self.log(f"best attempt {best.id} not re-verified: the evaluation failed, not the candidate "
                         f"({why}); it stays best, to be re-verified later", problem_id=problem_id)
                return None
            self.log(f"best attempt {best.id}: the re-verification failed, not the candidate ({why}); "
                     f"evaluated again in {wait_s:g} s", problem_id=problem_id)
            await anyio.sleep(wait_s)
        return None

    def _demote(self, problem_id: int, failed: AttemptRow, outcome: str) -> None:
        """The problem's best becomes its fastest other full passing attempt not failed in re-verification."""
        following = None
        for attempt in self.store.attempts(problem_id, state="done"):
            if (attempt.passed and attempt.full and attempt.id != failed.id
                    and not attempt.verified.startswith(FAILED_PREFIX)
                    and is_better(following.speedup if following else None, attempt.speedup)):
                following = attempt
        self.store.update_problem(problem_id, best_attempt_id=following.id if following else None,
                                  best_speedup=following.speedup if following else None,
                                  best_sol=following.sol if following else None)
        self.log(f"best attempt {failed.id} {outcome.replace(FAILED_PREFIX, 'failed re-verification', 1)}; "
                 + (f"the best is now attempt {following.id}" if following else "no other attempt passed"),
                 problem_id=problem_id)
