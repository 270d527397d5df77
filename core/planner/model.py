"""What the planner reads and what it decides, as frozen dataclasses.

The planner is a pure function (``core.planner.plan.plan``): it reads a ``PlannerInput`` snapshot and returns a
``Plan``; it does no I/O, reads no clock and draws no random numbers, so one input always gives the same plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.store.model import AgentRow, ProblemRow

if TYPE_CHECKING:  # duck-typed: any object with these attribute names will do
    from core.config.schema import BudgetConfig, PlannerConfig

# Problem statuses the planner sets (ProblemRow.status).
WAITING = "waiting"          # open, no agent on it
ACTIVE = "active"            # open, at least one agent on it
DONE = "done"                # open, but no kind of agent in the run has anything left to try on it
PAUSED = "paused"            # a person paused it
PLATEAUED = "plateaued"      # plateau_attempts attempts without a plateau_min_gain best-SOL gain (never when pinned)
OVER_BUDGET = "over budget"  # a per-problem budget is spent
FAILED = "failed"            # failures_in_row reached max_consecutive_failures
# Set by the run at its start, not by the planner: no workload of the problem can run on this machine (its blobs
# are missing, every workload is over the CPU's size cap); never prepared, never assigned.
UNRUNNABLE = "unrunnable"
STATUSES = (WAITING, ACTIVE, DONE, PAUSED, PLATEAUED, OVER_BUDGET, FAILED, UNRUNNABLE)
CLOSED_STATUSES = (PAUSED, OVER_BUDGET, FAILED, PLATEAUED, UNRUNNABLE)


@dataclass(frozen=True)
class ProblemActivity:
    """A problem's work over a recent window; its improvement rate is the best-SOL gained per GPU-second."""

    problem_id: int
    recent_gpu_seconds: float
    recent_sol_gain: float


@dataclass(frozen=True)
class RunTotals:
    """What the whole run has spent so far, checked against the run_* budgets."""

    wall_seconds: float = 0.0
    attempts: int = 0
    tokens: int = 0
    dollars: float = 0.0


@dataclass(frozen=True)
class PlannerInput:
    now: float
    problems: tuple[ProblemRow, ...]
    agents: tuple[AgentRow, ...]
    activity: Mapping[int, ProblemActivity]  # by problem id; a missing problem has had no recent activity
    # eligible[lane]: ids of the problems an agent of that lane (``lane``) can work on now; a lane not in it may take
    # any problem.
    eligible: Mapping[str, frozenset[int]]
    config: PlannerConfig
    budgets: BudgetConfig
    totals: RunTotals


@dataclass(frozen=True)
class Assignment:
    """An agent's problem changes to ``problem_id`` (None: the agent goes idle)."""

    agent_id: int
    problem_id: int | None
    reason: str


@dataclass(frozen=True)
class StatusChange:
    problem_id: int
    status: str
    reason: str


@dataclass(frozen=True)
class Plan:
    assignments: tuple[Assignment, ...]       # only agents whose problem changes, by agent id
    status_changes: tuple[StatusChange, ...]  # only problems whose status changes, by problem id
    stop_reason: str | None                   # set when a run budget is spent: the run should stop

    @property
    def decisions(self) -> int:
        return len(self.assignments) + len(self.status_changes)


def lane(agent: AgentRow) -> str:
    """An agent's eligibility group: its kind, and its model profile where it has one ("llm/strong"), since what one
    model has found nothing more to try on, another may."""
    return f"{agent.kind}/{agent.profile}" if agent.profile else agent.kind
