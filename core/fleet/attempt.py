"""The one owner of an attempt's life: begin (recorded pending, so a kill never loses it) → build and evaluate
(through the ``Evaluator``) → figures (``core.fleet.scoring``) → record (``core.fleet.record``, one transaction).
Agents' candidates, seeds, composites and ``--resume``'s re-evaluations all go through it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from core.evaluate.evaluator import Evaluation, EvaluationRequest, Evaluator
from core.evaluate.timing_policy import TimingPolicy
from core.evaluate.verdict import Status, Verdict
from core.fleet.baselines import ModelBaselines
from core.fleet.record import Recorded, record_result
from core.fleet.scoring import attempt_figures
from core.problem.schema import Problem
from core.solution.io import solution_to_dict
from core.solution.prepare import PreparedSolution
from core.solution.schema import Solution
from core.store.writer import RunStore


@dataclass(frozen=True)
class EvaluationPolicy:
    """How every attempt of a run is evaluated and counted."""

    rounds: int = 5
    timing: TimingPolicy | None = field(default_factory=TimingPolicy)
    blob_roots: tuple[str, ...] = ()
    plateau_min_gain: float = 0.01


@dataclass(frozen=True)
class Candidate:
    """What an attempt begins with: the solution, who made it and from what."""

    solution: Solution
    agent_id: int | None = None
    parent_id: int | None = None
    parents: tuple[int, ...] | None = None  # a composite's members; default (parent_id,)
    diff: str = ""
    tunables: dict[str, Any] | None = None
    note: str = ""
    workloads: tuple[int, ...] | None = None  # None: every workload
    profile: str = ""


def content_hash(solution: dict[str, Any]) -> str:
    """Identity of a candidate's content: its spec and its sources by path (not its name or author)."""
    sources = sorted((s["path"], s["content"]) for s in solution.get("sources", []))
    blob = json.dumps([solution.get("spec"), sources], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


class AttemptLife:
    """``store`` None: evaluations that are not recorded (``kernelfleet eval``): only ``evaluate`` then."""

    def __init__(self, store: RunStore | None, evaluator: Evaluator, policy: EvaluationPolicy,
                 baselines: ModelBaselines | None = None):
        self.store = store
        self.evaluator = evaluator
        self.policy = policy
        self.baselines = baselines  # T_b per GPU model; None: the problem's recorded T_b for every attempt

    async def evaluate(self, problem: Problem, solution: Solution, workloads: tuple[int, ...] | None, *,
                       priority: int = 0, prepared: PreparedSolution | None = None,
                       rounds: int | None = None, timed: bool = True) -> Evaluation:
        """Build (unless ``prepared`` was built already) and evaluate under the run's policy (``rounds``: other
        than the policy's; ``timed``: False for correctness alone)."""
        request = EvaluationRequest(problem, solution, workloads, rounds or self.policy.rounds,
                                    self.policy.timing if timed else None, priority, self.policy.blob_roots)
        if prepared is not None:
            return await self.evaluator.evaluate_prepared(request, prepared)
        return await self.evaluator.evaluate(request)

    def begin(self, problem_id: int, candidate: Candidate) -> int:
        as_dict = solution_to_dict(candidate.solution)
        return self.store.begin_attempt(
            problem_id, candidate.agent_id, as_dict, language=candidate.solution.spec.languages[0].value,
            parent_id=candidate.parent_id, parents=list(candidate.parents) if candidate.parents is not None else None,
            diff=candidate.diff, tunables=candidate.tunables, note=candidate.note,
            workloads=list(candidate.workloads) if candidate.workloads is not None else None,
            content_hash=content_hash(as_dict), profile=candidate.profile)

    async def complete(self, problem_id: int, problem: Problem, attempt_id: int, solution: Solution,
                       workloads: tuple[int, ...] | None, *, decided: Verdict | None = None,
                       priority: int | None = None) -> Recorded:
        """Evaluate a pending attempt at ``priority`` (None: its problem's) and record the result; ``decided``: a
        verdict reached before any build (a static check, the reviewer), recorded as it is."""
        if decided is not None:
            evaluation = Evaluation(decided, None)
        else:
            evaluation = await self.evaluate(problem, solution, workloads, priority=self.store.problem(
                problem_id).priority if priority is None else priority)
        verdict = evaluation.verdict
        if self.baselines is not None and verdict.status is Status.PASSED:
            workloads = await self.baselines.workloads(problem_id, problem, evaluation.placement)
        else:
            workloads = self.store.problem(problem_id).workloads
        figures = attempt_figures(verdict, workloads)
        return record_result(self.store, attempt_id, status=verdict.status.value, reason=verdict.reason,
                             verdict=verdict.to_dict(), build=evaluation.build, figures=figures,
                             plateau_min_gain=self.policy.plateau_min_gain, placement=evaluation.placement)

    async def run(self, problem_id: int, problem: Problem, candidate: Candidate, *,
                  decided: Verdict | None = None) -> Recorded:
        attempt_id = self.begin(problem_id, candidate)
        return await self.complete(problem_id, problem, attempt_id, candidate.solution, candidate.workloads,
                                   decided=decided)
