"""The Workbench an agent works through: builds off the GPU's critical path, evaluations through the pool at the
problem's priority, every evaluation recorded as an attempt (budgets checked first), every model call recorded."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict
from typing import Any

from core.errors import SpecError
from core.evaluate.evaluate import compile_error_verdict, evaluate_prepared
from core.evaluate.verdict import Status, Verdict, WorkloadVerdict
from core.fleet.agent import AgentIdentity
from core.fleet.diff import solution_diff
from core.fleet.record import Recorded, record_result
from core.fleet.scoring import attempt_figures
from core.problem.schema import Problem
from core.solution.io import solution_to_dict
from core.solution.prepare import PreparedSolution, prepare
from core.solution.schema import Solution
from core.store.model import AttemptRow, LlmCall, ProblemRow


def content_hash(solution: dict[str, Any]) -> str:
    """Identity of a candidate's content: its spec and its sources by path (not its name or author)."""
    sources = sorted((s["path"], s["content"]) for s in solution.get("sources", []))
    blob = json.dumps([solution.get("spec"), sources], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


class Workbench:
    def __init__(self, fleet, agent: AgentIdentity, problem: Problem, problem_id: int,
                 should_stop: Callable[[], bool]):
        self.fleet = fleet  # core.fleet.orchestrator.Fleet: store, pool, builds, config, events
        self.agent = agent
        self.problem = problem
        self.problem_id = problem_id
        self._should_stop = should_stop

    def row(self) -> ProblemRow:
        return self.fleet.store.problem(self.problem_id)

    def best(self) -> AttemptRow | None:
        best_id = self.row().best_attempt_id
        return self.fleet.store.attempt(best_id) if best_id is not None else None

    def attempts(self, limit: int | None = None) -> list[AttemptRow]:
        return self.fleet.store.attempts(self.problem_id, limit=limit)

    def should_stop(self) -> bool:
        return self._should_stop()

    def log(self, message: str, kind: str = "log") -> None:
        self.fleet.event(kind, message, agent_id=self.agent.id, problem_id=self.problem_id)

    def record_call(self, call: LlmCall) -> None:
        self.fleet.store.add_llm_call(self.agent.id, self.problem_id, call)

    def reserve_call(self, tokens: int, dollars: float) -> AbstractContextManager[None]:
        return self.fleet.budgets.model_call(self.problem_id, tokens, dollars)

    def equal_attempt(self, solution: Solution, workloads: tuple[int, ...] | None = None) -> AttemptRow | None:
        """The latest finished attempt of this problem with the same content that covered ``workloads`` (None:
        every workload), if there is one."""
        earlier = self.fleet.store.attempts_with_content(self.problem_id, content_hash(solution_to_dict(solution)))
        for attempt in reversed(earlier):
            if attempt.full or (workloads is not None and set(workloads) <= set(attempt.workloads or ())):
                return attempt
        return None

    async def build(self, solution: Solution) -> PreparedSolution:
        return await prepare(solution, self.fleet.builds)

    async def evaluate(self, solution: Solution, *, workloads: tuple[int, ...] | None = None,
                       parent_id: int | None = None, tunables: dict[str, Any] | None = None,
                       note: str = "") -> AttemptRow:
        self.fleet.budgets.check_evaluation(self.problem_id)
        as_dict = solution_to_dict(solution)
        parent = self.fleet.store.attempt(parent_id) if parent_id is not None else None
        attempt_id = self.fleet.store.begin_attempt(
            self.problem_id, self.agent.id, as_dict, language=solution.spec.languages[0].value,
            parent_id=parent_id, diff=solution_diff(parent.solution if parent else None, as_dict),
            tunables=tunables, note=note, workloads=list(workloads) if workloads is not None else None,
            content_hash=content_hash(as_dict))
        recorded = await self.fleet.evaluate_attempt(self.problem, attempt_id, solution, workloads)
        return recorded.attempt


async def run_evaluation(fleet, problem: Problem, solution: Solution,
                         workloads: tuple[int, ...] | None, priority: int) -> tuple[Verdict, dict | None]:
    """Build then evaluate: (verdict, build report). A spec fault or a failed build is a COMPILE_ERROR verdict."""
    first = (workloads or (0,))[0]
    try:
        prepared = await prepare(solution, fleet.builds)
    except SpecError as exc:
        return Verdict(Status.COMPILE_ERROR, str(exc), (WorkloadVerdict(first, Status.COMPILE_ERROR, str(exc)),)), None
    build = _build_report(prepared)
    if not prepared.ok:
        return compile_error_verdict(prepared, (first,)), build
    verdict = await evaluate_prepared(fleet.pool, problem, prepared, workloads=workloads,
                                      rounds=fleet.config.evaluation.rounds, timing=fleet.timing,
                                      sol_ms=fleet.sol_ms.get(problem.path), priority=priority,
                                      blob_roots=fleet.blob_roots)
    return verdict, build


def _build_report(prepared: PreparedSolution) -> dict:
    report: dict[str, Any] = {"ok": prepared.ok, "kind": prepared.kind.value, "seconds": round(prepared.seconds, 3),
                              "cache_hit": prepared.cache_hit, "errors": prepared.errors[:4000]}
    if prepared.build is not None:
        report["resources"] = [asdict(r) for r in prepared.build.resources]
    return report


def finish(fleet, attempt_id: int, verdict: Verdict, build: dict | None, workloads_info) -> Recorded:
    figures = attempt_figures(verdict, workloads_info)
    return record_result(fleet.store, attempt_id, status=verdict.status.value, reason=verdict.reason,
                         verdict=verdict.to_dict(), build=build, figures=figures,
                         plateau_min_gain=fleet.config.planner.plateau_min_gain)
