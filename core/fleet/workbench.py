"""The Workbench an agent works through: builds off the GPU's critical path, evaluations through the run's attempt
owner (``core.fleet.attempt``) at the problem's priority (budgets checked first), every model call recorded. It
takes its dependencies explicitly (``BenchServices``), not the run."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any

from core.build import BuildService
from core.config import FleetConfig
from core.errors import SpecError
from core.evaluate.evaluate import spec_fault_verdict
from core.evaluate.evaluator import Evaluator
from core.evaluate.verdict import Verdict
from core.fleet.agent import AgentIdentity, ReviewGate
from core.fleet.attempt import Candidate, content_hash
from core.fleet.budget import Budgets
from core.fleet.checks import static_faults
from core.fleet.diff import solution_diff
from core.fleet.directives import directives_for
from core.fleet.facts import RunFacts, language_refusal
from core.fleet.frontier import StartingChoice, choose_start
from core.fleet.record import Recorded
from core.fleet.similar import SimilarBest, op_family, similar_problems
from core.inspect.service import Inspection, Inspector
from core.problem.schema import Problem
from core.solution.io import solution_to_dict
from core.solution.prepare import PreparedSolution, prepare
from core.solution.schema import Solution
from core.store.model import AttemptRow, FrontierMember, LlmCall, NoteRow, ProblemRow
from core.store.writer import RunStore

__all__ = ["BenchServices", "Workbench", "content_hash"]


@dataclass(frozen=True)
class BenchServices:
    """What every workbench of a run shares."""

    store: RunStore
    config: FleetConfig
    builds: BuildService
    budgets: Budgets
    evaluator: Evaluator
    # (problem id, candidate, verdict decided before any build or None) -> the recorded attempt; the run's
    # attempt owner plus what the run does after each attempt (events, activity, composites)
    attempt: Callable[[int, Candidate, Verdict | None], Awaitable[Recorded]]
    event: Callable[..., None]  # (kind, message, agent_id=, problem_id=)
    facts: Callable[[], RunFacts]
    references: Callable[[], dict[int, str]]  # problem id -> reference source, for similar problems
    device_seconds: Callable[[int, float], None]  # (problem id, device seconds an instrument held)
    device: str = "cuda"
    blob_roots: tuple[str, ...] = ()
    review_gate: Callable[[str], ReviewGate | None] = lambda kind: None  # an agent kind -> its review gate, if any
    # agent id -> the newest event id when its latest turn began: its brief shows the directives after the one before
    turns_began: dict[int, int] = field(default_factory=dict)


class Workbench:
    def __init__(self, services: BenchServices, agent: AgentIdentity, problem: Problem, problem_id: int,
                 should_stop: Callable[[], bool]):
        self.services = services
        self.store = services.store
        self.agent = agent
        self.problem = problem
        self.problem_id = problem_id
        self._should_stop = should_stop
        self.attempts_begun = 0  # by this turn
        # A Workbench is one turn: the directives since the agent's previous turn began are this turn's news.
        self.directives_since = services.turns_began.get(agent.id, 0)
        services.turns_began[agent.id] = self.store.last_event_id()

    def row(self) -> ProblemRow:
        return self.store.problem(self.problem_id)

    def best(self) -> AttemptRow | None:
        best_id = self.row().best_attempt_id
        return self.store.attempt(best_id) if best_id is not None else None

    def attempts(self, limit: int | None = None, *, since_id: int = 0) -> list[AttemptRow]:
        """This problem's attempts, oldest first: the newest ``limit``, or those with an id above ``since_id``."""
        return self.store.attempts(self.problem_id, since_id=since_id, limit=limit)

    def frontier(self) -> tuple[FrontierMember, ...]:
        return self.row().frontier

    def starting_point(self) -> tuple[AttemptRow, StartingChoice] | None:
        """The attempt to start from (``core.fleet.frontier.choose_start``) and why; None with no passing attempt."""
        row = self.row()
        choice = choose_start(row.frontier, row.workloads, row.best_attempt_id)
        attempt = self.store.attempt(choice.attempt_id) if choice is not None else None
        return (attempt, choice) if attempt is not None else None

    def should_stop(self) -> bool:
        return self._should_stop()

    def docs_paths(self) -> tuple[str, ...]:
        return self.services.config.llm.docs

    def log(self, message: str, kind: str = "log") -> None:
        self.services.event(kind, message, agent_id=self.agent.id, problem_id=self.problem_id)

    def record_call(self, call: LlmCall) -> None:
        self.store.add_llm_call(self.agent.id, self.problem_id, call, profile=self.agent.profile,
                                      model=self.agent.model)

    def reserve_call(self, tokens: int, dollars: float) -> AbstractContextManager[None]:
        return self.services.budgets.model_call(self.problem_id, tokens, dollars)

    def equal_attempt(self, solution: Solution, workloads: tuple[int, ...] | None = None) -> AttemptRow | None:
        """The latest finished attempt of this problem with the same content that covered ``workloads`` (None:
        every workload), if there is one."""
        earlier = self.store.attempts_with_content(self.problem_id, content_hash(solution_to_dict(solution)))
        for attempt in reversed(earlier):
            if attempt.full or (workloads is not None and set(workloads) <= set(attempt.workloads or ())):
                return attempt
        return None

    def facts(self) -> RunFacts:
        """The run's facts, with the planner's directives to this agent or problem since its previous turn."""
        found = directives_for(self.store, self.agent.id, self.problem_id, self.directives_since)
        return replace(self.services.facts(), directives=found)

    def similar_bests(self, limit: int = 5) -> list[SimilarBest]:
        """The best passing attempts of the problems of this run most like this one (``core.fleet.similar``)."""
        found = []
        for other, why in self._similar():
            best = self.store.attempt(other.best_attempt_id) if other.best_attempt_id is not None else None
            if best is not None and best.passed:
                found.append(SimilarBest(other.id, other.key, best.id, best.speedup, best.sol, best.language, why))
            if len(found) >= limit:
                break
        return found

    def readable_attempt(self, attempt_id: int) -> tuple[AttemptRow, ProblemRow] | None:
        """An attempt this agent may read, with its problem: any of this problem's, or the best of a similar
        problem of this run; None for any other."""
        attempt = self.store.attempt(attempt_id)
        if attempt is None:
            return None
        if attempt.problem_id == self.problem_id:
            return attempt, self.row()
        for other, _ in self._similar():
            if other.id == attempt.problem_id and other.best_attempt_id == attempt_id:
                return attempt, other
        return None

    def _similar(self) -> list[tuple[ProblemRow, str]]:
        return similar_problems(self.row(), self.services.references(), self.store.problems())

    def family_notes(self, limit: int = 10) -> list[NoteRow]:
        """The newest notes on the board of this problem's op family, every agent's."""
        return self.store.notes(op_family(self.row(), self.problem.definition.reference), limit=limit)

    def add_note(self, text: str) -> int:
        family = op_family(self.row(), self.problem.definition.reference)
        note_id = self.store.add_note(family, text, agent_id=self.agent.id, problem_id=self.problem_id)
        self.log(f"note for {family or 'this problem'}: {' '.join(text.split())[:200]}")
        return note_id

    def _check_language(self, solution: Solution) -> None:
        refusal = language_refusal(solution.spec.languages[0].value, self.services.config.fleet.languages)
        if refusal is not None:
            raise SpecError("solution.json", "spec.languages", refusal)

    async def build(self, solution: Solution) -> PreparedSolution:
        self._check_language(solution)
        return await prepare(solution, self.services.builds)

    async def evaluate(self, solution: Solution, *, workloads: tuple[int, ...] | None = None,
                       parent_id: int | None = None, tunables: dict[str, Any] | None = None,
                       note: str = "") -> AttemptRow:
        self._check_language(solution)  # before anything is recorded
        self.services.budgets.check_evaluation(self.problem_id)
        as_dict = solution_to_dict(solution)
        parent = self.store.attempt(parent_id) if parent_id is not None else None
        diff = solution_diff(parent.solution if parent else None, as_dict)
        # A candidate a static check or the reviewer refuses is recorded all the same (COMPILE_ERROR or REJECTED,
        # with the reason: the history keeps it), without a build or device time.
        decided = self._static_verdict(solution, workloads)
        gate = self.services.review_gate(self.agent.kind) if decided is None else None
        if gate is not None:
            decided = await gate(self, solution, diff, note, workloads)
        self.attempts_begun += 1
        candidate = Candidate(solution, self.agent.id, parent_id, diff=diff, tunables=tunables, note=note,
                              workloads=workloads, profile=self.agent.profile)
        recorded = await self.services.attempt(self.problem_id, candidate, decided)
        return recorded.attempt

    def _static_verdict(self, solution: Solution, workloads: tuple[int, ...] | None) -> Verdict | None:
        definition = self.problem.definition
        faults = static_faults(solution, tuple(definition.inputs), tuple(definition.outputs))
        if not faults:
            return None
        return spec_fault_verdict("static check: " + "; ".join(faults[:4]), (workloads or (0,))[:1])

    async def inspect(self, instrument: str, solution: Solution, **options: Any) -> Inspection:
        """Build ``solution`` and run one instrument on it ("profile", "sanitize" or "assembly", with the
        ``core.inspect.service.Inspector`` method's options); the device time it held counts in the problem's
        GPU seconds, and one ``tool`` event says what ran, for how long and what came of it."""
        started = time.monotonic()
        self._check_language(solution)
        prepared = await prepare(solution, self.services.builds)
        if not prepared.ok:
            result = Inspection("the candidate does not build:\n" + (prepared.errors or prepared.log[-3000:]), False)
        else:
            inspector = Inspector(self.services.evaluator.run_confined if self.services.evaluator else None, device=self.services.device,
                                  timeout_s=self.services.config.llm.tool_timeout_s,
                                  blob_roots=self.services.blob_roots)
            result = await getattr(inspector, instrument)(self.problem, prepared, **options)
        if result.device_seconds:
            self.services.device_seconds(self.problem_id, result.device_seconds)
        detail = ", ".join(f"{k} {v}" for k, v in options.items() if k in ("workload", "tool", "form", "kernel")
                           and v is not None)
        self.log(f"{instrument}{f' ({detail})' if detail else ''}: {result.instrument or 'no instrument'}, "
                 f"{'figures' if result.ok else 'no figures'}, {time.monotonic() - started:.1f} s"
                 + (f" ({result.device_seconds:.1f} s on the device)" if result.device_seconds else "")
                 + f", {len(result.text)} characters", kind="tool")
        return result
