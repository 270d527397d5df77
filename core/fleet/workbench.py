"""The Workbench an agent works through: builds off the GPU's critical path, evaluations through the pool at the
problem's priority, every evaluation recorded as an attempt (budgets checked first), every model call recorded."""

from __future__ import annotations

import hashlib
import json
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict
from typing import Any

from core.errors import SpecError
from core.evaluate.evaluate import compile_error_verdict, evaluate_prepared
from core.evaluate.verdict import Status, Verdict, WorkloadVerdict
from core.fleet.agent import AgentIdentity
from core.fleet.checks import static_faults
from core.fleet.diff import solution_diff
from core.fleet.facts import RunFacts, facts_from_probe, language_refusal
from core.fleet.frontier import StartingChoice, choose_start
from core.fleet.record import Recorded, record_result
from core.fleet.scoring import attempt_figures
from core.fleet.similar import SimilarBest, op_family, similar_problems
from core.inspect.service import Inspection, Inspector
from core.problem.schema import Problem
from core.solution.io import solution_to_dict
from core.solution.prepare import PreparedSolution, prepare
from core.solution.schema import Solution
from core.store.model import AttemptRow, FrontierMember, LlmCall, NoteRow, ProblemRow


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
        self.attempts_begun = 0  # by this turn

    def row(self) -> ProblemRow:
        return self.fleet.store.problem(self.problem_id)

    def best(self) -> AttemptRow | None:
        best_id = self.row().best_attempt_id
        return self.fleet.store.attempt(best_id) if best_id is not None else None

    def attempts(self, limit: int | None = None) -> list[AttemptRow]:
        return self.fleet.store.attempts(self.problem_id, limit=limit)

    def frontier(self) -> tuple[FrontierMember, ...]:
        return self.row().frontier

    def starting_point(self) -> tuple[AttemptRow, StartingChoice] | None:
        """The attempt to start from (``core.fleet.frontier.choose_start``) and why; None with no passing attempt."""
        row = self.row()
        choice = choose_start(row.frontier, row.workloads, row.best_attempt_id)
        attempt = self.fleet.store.attempt(choice.attempt_id) if choice is not None else None
        return (attempt, choice) if attempt is not None else None

    def should_stop(self) -> bool:
        return self._should_stop()

    def docs_paths(self) -> tuple[str, ...]:
        return self.fleet.config.llm.docs

    def log(self, message: str, kind: str = "log") -> None:
        self.fleet.event(kind, message, agent_id=self.agent.id, problem_id=self.problem_id)

    def record_call(self, call: LlmCall) -> None:
        self.fleet.store.add_llm_call(self.agent.id, self.problem_id, call, profile=self.agent.profile,
                                      model=self.agent.model)

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

    def facts(self) -> RunFacts:
        facts = getattr(self.fleet, "facts", None)
        return facts if facts is not None else facts_from_probe(self.fleet.device, self.fleet.config.fleet.languages)

    def similar_bests(self, limit: int = 5) -> list[SimilarBest]:
        """The best passing attempts of the problems of this run most like this one (``core.fleet.similar``)."""
        found = []
        for other, why in self._similar():
            best = self.fleet.store.attempt(other.best_attempt_id) if other.best_attempt_id is not None else None
            if best is not None and best.passed:
                found.append(SimilarBest(other.id, other.key, best.id, best.speedup, best.sol, best.language, why))
            if len(found) >= limit:
                break
        return found

    def readable_attempt(self, attempt_id: int) -> tuple[AttemptRow, ProblemRow] | None:
        """An attempt this agent may read, with its problem: any of this problem's, or the best of a similar
        problem of this run; None for any other."""
        attempt = self.fleet.store.attempt(attempt_id)
        if attempt is None:
            return None
        if attempt.problem_id == self.problem_id:
            return attempt, self.row()
        for other, _ in self._similar():
            if other.id == attempt.problem_id and other.best_attempt_id == attempt_id:
                return attempt, other
        return None

    def _similar(self) -> list[tuple[ProblemRow, str]]:
        references = {pid: p.definition.reference for pid, p in self.fleet.problems.items()}
        return similar_problems(self.row(), references, self.fleet.store.problems())

    def family_notes(self, limit: int = 10) -> list[NoteRow]:
        """The newest notes on the board of this problem's op family, every agent's."""
        return self.fleet.store.notes(op_family(self.row()), limit=limit)

    def add_note(self, text: str) -> int:
        family = op_family(self.row())
        note_id = self.fleet.store.add_note(family, text, agent_id=self.agent.id, problem_id=self.problem_id)
        self.log(f"note for {family or 'this problem'}: {' '.join(text.split())[:200]}")
        return note_id

    def _check_language(self, solution: Solution) -> None:
        refusal = language_refusal(solution.spec.languages[0].value, self.fleet.config.fleet.languages)
        if refusal is not None:
            raise SpecError("solution.json", "spec.languages", refusal)

    async def build(self, solution: Solution) -> PreparedSolution:
        self._check_language(solution)
        return await prepare(solution, self.fleet.builds)

    async def evaluate(self, solution: Solution, *, workloads: tuple[int, ...] | None = None,
                       parent_id: int | None = None, tunables: dict[str, Any] | None = None,
                       note: str = "") -> AttemptRow:
        self._check_language(solution)  # before anything is recorded
        self.fleet.budgets.check_evaluation(self.problem_id)
        as_dict = solution_to_dict(solution)
        parent = self.fleet.store.attempt(parent_id) if parent_id is not None else None
        diff = solution_diff(parent.solution if parent else None, as_dict)
        # A candidate a static check or the reviewer refuses is recorded all the same (COMPILE_ERROR or REJECTED,
        # with the reason: the history keeps it), without a build or device time.
        decided = self._static_verdict(solution, workloads)
        if decided is None and self.agent.kind == "llm" and self.fleet.config.review.enabled:
            decided = await self._review(solution, diff, note, workloads)
        self.attempts_begun += 1
        attempt_id = self.fleet.store.begin_attempt(
            self.problem_id, self.agent.id, as_dict, language=solution.spec.languages[0].value,
            parent_id=parent_id, diff=diff,
            tunables=tunables, note=note, workloads=list(workloads) if workloads is not None else None,
            content_hash=content_hash(as_dict), profile=self.agent.profile)
        recorded = await self.fleet.evaluate_attempt(self.problem, attempt_id, solution, workloads, decided=decided)
        return recorded.attempt

    def _static_verdict(self, solution: Solution, workloads: tuple[int, ...] | None) -> Verdict | None:
        definition = self.problem.definition
        faults = static_faults(solution, tuple(definition.inputs), tuple(definition.outputs))
        if not faults:
            return None
        reason = "static check: " + "; ".join(faults[:4])
        return Verdict(Status.COMPILE_ERROR, reason,
                       tuple(WorkloadVerdict(i, Status.COMPILE_ERROR, reason) for i in (workloads or (0,))[:1]))

    async def _review(self, solution: Solution, diff: str, note: str,
                      workloads: tuple[int, ...] | None) -> Verdict | None:
        """The reviewer's REJECTED verdict, or None when it approves (or fails: it fails open)."""
        from core.llm.review import Reviewer, problem_summary, review_messages, reviewer_config

        if getattr(self.fleet, "reviewer", None) is None:
            self.fleet.reviewer = Reviewer(reviewer_config(self.fleet.config))
        shown = diff or "\n".join(f"--- {s.path}\n{s.content}" for s in solution.sources)
        messages = review_messages(problem_summary(self.problem), solution_to_dict(solution)["spec"], shown, note)
        review = await self.fleet.reviewer.review(
            messages, reserve=self.reserve_call,
            record=lambda call: self.fleet.store.add_llm_call(None, self.problem_id, call,
                                                              profile=self.fleet.config.review.profile,
                                                              model=self.fleet.reviewer.cfg.model), log=self.log)
        if review.approved:
            return None
        reason = f"review: {review.reason}"
        self.log(f"candidate rejected by the reviewer before evaluation: {review.reason}")
        return Verdict(Status.REJECTED, reason,
                       tuple(WorkloadVerdict(i, Status.REJECTED, reason) for i in (workloads or (0,))[:1]))

    async def inspect(self, instrument: str, solution: Solution, **options: Any) -> Inspection:
        """Build ``solution`` and run one instrument on it ("profile", "sanitize" or "assembly", with the
        ``core.inspect.service.Inspector`` method's options); the device time it held counts in the problem's
        GPU seconds, and one ``tool`` event says what ran, for how long and what came of it."""
        started = time.monotonic()
        self._check_language(solution)
        prepared = await prepare(solution, self.fleet.builds)
        if not prepared.ok:
            result = Inspection("the candidate does not build:\n" + (prepared.errors or prepared.log[-3000:]), False)
        else:
            inspector = Inspector(getattr(self.fleet.pool, "run_confined", None), device=self.fleet.device,
                                  timeout_s=self.fleet.config.llm.tool_timeout_s, blob_roots=self.fleet.blob_roots)
            result = await getattr(inspector, instrument)(self.problem, prepared, **options)
        if result.device_seconds:
            self.fleet.activity.setdefault(self.problem_id, deque()).append(
                (time.time(), result.device_seconds, 0.0))
        detail = ", ".join(f"{k} {v}" for k, v in options.items() if k in ("workload", "tool", "form", "kernel")
                           and v is not None)
        self.log(f"{instrument}{f' ({detail})' if detail else ''}: {result.instrument or 'no instrument'}, "
                 f"{'figures' if result.ok else 'no figures'}, {time.monotonic() - started:.1f} s"
                 + (f" ({result.device_seconds:.1f} s on the device)" if result.device_seconds else "")
                 + f", {len(result.text)} characters", kind="tool")
        return result


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
