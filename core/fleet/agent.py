"""The one narrow interface every agent kind implements (the tuner here, LLM agents next), and what it may call.

An agent works on one problem at a time through a Workbench: it builds and evaluates candidates, each evaluation
recorded as an attempt. It returns when ``bench.should_stop()`` says so (the planner moved it, a person paused it,
the run is stopping) or when it has nothing more to try on this problem.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from core.fleet.facts import RunFacts
from core.fleet.frontier import StartingChoice
from core.fleet.similar import SimilarBest
from core.evaluate.verdict import Verdict
from core.inspect.service import Inspection
from core.problem.schema import Problem
from core.solution.prepare import PreparedSolution
from core.solution.schema import Solution
from core.store.model import AttemptRow, FrontierMember, LlmCall, NoteRow, ProblemRow


class WorkOutcome(str, Enum):
    STOPPED = "stopped"  # asked to stop; may be given this problem again later
    EXHAUSTED = "exhausted"  # nothing more to try here until the problem's best changes
    RETIRED = "retired"  # this agent can do nothing more in this run (its LLM endpoint is down): never assign it


@dataclass(frozen=True)
class AgentIdentity:
    id: int
    name: str
    kind: str
    model: str = ""
    profile: str = ""  # the model profile of this turn (LLM agents)


class Workbench(Protocol):
    agent: AgentIdentity
    problem: Problem
    problem_id: int

    def row(self) -> ProblemRow: ...

    def best(self) -> AttemptRow | None: ...

    def attempts(self, limit: int | None = None, *, since_id: int = 0) -> list[AttemptRow]: ...

    def frontier(self) -> tuple[FrontierMember, ...]:
        """The problem's per-workload frontier (``core.fleet.frontier``)."""
        ...

    def starting_point(self) -> tuple[AttemptRow, StartingChoice] | None:
        """The frontier member to start from, with the rule's reason; the best without a frontier; None before any
        passing attempt."""
        ...

    def facts(self) -> RunFacts:
        """The machine and the run (gathered once per run start)."""
        ...

    def similar_bests(self, limit: int = 5) -> list[SimilarBest]:
        """The best passing attempts of this run's problems most like this one."""
        ...

    def readable_attempt(self, attempt_id: int) -> tuple[AttemptRow, ProblemRow] | None:
        """An attempt of this problem, or the best of a similar one, with its problem; None for any other."""
        ...

    def family_notes(self, limit: int = 10) -> list[NoteRow]:
        """The newest notes on the board of this problem's op family."""
        ...

    def add_note(self, text: str) -> int:
        """Record a short finding on this problem's op-family board; the note's id."""
        ...

    async def build(self, solution: Solution) -> PreparedSolution: ...

    async def inspect(self, instrument: str, solution: Solution, **options: Any) -> Inspection:
        """Build ``solution`` and run an instrument on it: "profile", "sanitize" or "assembly"
        (``core.inspect.service.Inspector``); its device time is counted and an event records it."""
        ...

    async def evaluate(self, solution: Solution, *, workloads: tuple[int, ...] | None = None,
                       parent_id: int | None = None, tunables: dict[str, Any] | None = None,
                       note: str = "") -> AttemptRow:
        """Record and evaluate an attempt; BudgetSpent (core.fleet.budget) when an attempt budget is reached."""
        ...

    def equal_attempt(self, solution: Solution, workloads: tuple[int, ...] | None = None) -> AttemptRow | None:
        """An earlier finished attempt of this problem with the same content that covered ``workloads``."""
        ...

    def reserve_call(self, tokens: int, dollars: float) -> AbstractContextManager[None]:
        """Hold a model call's estimated cost while it is in flight; BudgetSpent if it would pass a budget."""
        ...

    def record_call(self, call: LlmCall) -> None:
        """Record a model call that returned (its tokens and dollars count at once)."""
        ...

    def log(self, message: str, kind: str = "log") -> None: ...

    def should_stop(self) -> bool: ...

    def docs_paths(self) -> tuple[str, ...]:
        """The documentation folders the run's config lists ([llm] docs), for the ``docs`` tool."""
        ...


class Agent(Protocol):
    kind: str

    async def work(self, bench: Workbench) -> WorkOutcome: ...

    def can_work_on(self, best: AttemptRow | None, members: Sequence[AttemptRow] = (),
                    seed: AttemptRow | None = None) -> bool:
        """Whether this kind of agent has anything to do on a problem whose best attempt is ``best`` (``members``:
        a composite best's member attempts, which carry the code it is made of; ``seed``: the problem's seed
        attempt, when known)."""
        ...


class ReviewGate(Protocol):
    """What an agent kind may put before the evaluation of its candidates (``AgentKind.review``): a verdict decided
    before any build (recorded as it is, without device time), or None to evaluate the candidate."""

    async def __call__(self, bench: Workbench, solution: Solution, diff: str, note: str,
                       workloads: tuple[int, ...] | None) -> Verdict | None: ...
