"""Builders for planner tests: rows with sensible defaults and a config/budget shaped like core.config's."""

from __future__ import annotations

from dataclasses import dataclass, replace

from core.planner import PlannerInput, ProblemActivity, RunTotals
from core.store.model import AgentRow, ProblemRow


@dataclass(frozen=True)
class Cfg:
    tick_s: float = 2.0
    max_agents_per_problem: int = 2
    weight_priority: float = 1.0
    weight_sol_gap: float = 1.0
    weight_improvement: float = 1.0
    weight_failures: float = 0.5
    max_consecutive_failures: int = 8
    plateau_attempts: int = 12
    plateau_min_gain: float = 0.01


@dataclass(frozen=True)
class Budgets:
    run_wall_s: float = 0
    run_attempts: int = 0
    run_tokens: int = 0
    run_dollars: float = 0
    problem_wall_s: float = 0
    problem_attempts: int = 0
    problem_tokens: int = 0
    problem_dollars: float = 0


def problem(pid: int, *, key: str | None = None, priority: int = 0, paused: bool = False, pinned: bool = False,
            status: str = "waiting", best_sol: float | None = 0.5, attempts: int = 0, failures_in_row: int = 0,
            since_improvement: int = 0, tokens: int = 0, dollars: float = 0.0, wall_seconds: float = 0.0) -> ProblemRow:
    key = key or f"set/p{pid}"
    subset, name = key.split("/")
    return ProblemRow(id=pid, key=key, name=name, subset=subset, path=f"problems/{key}", op="op",
                      priority=priority, paused=paused, pinned=pinned, status=status, best_attempt_id=None,
                      best_speedup=None, best_sol=best_sol, seed_attempt_id=None, seed_speedup=None, seed_sol=None,
                      attempts=attempts, failures_in_row=failures_in_row, since_improvement=since_improvement,
                      tokens=tokens, dollars=dollars, gpu_seconds=0.0, wall_seconds=wall_seconds,
                      last_change_at=None)


def agent(aid: int, problem_id: int | None = None, *, kind: str = "llm", paused: bool = False,
          state: str | None = None) -> AgentRow:
    if state is None:
        state = "paused" if paused else ("working" if problem_id is not None else "idle")
    return AgentRow(id=aid, name=f"a{aid}", kind=kind, model="m", state=state, problem_id=problem_id, paused=paused,
                    attempts=0, failures_in_row=0, tokens=0, dollars=0.0, updated_at=0.0)


def make_input(problems, agents, *, activity=None, eligible=None, config=None, budgets=None, totals=None,
               now: float = 1000.0) -> PlannerInput:
    return PlannerInput(now=now, problems=tuple(problems), agents=tuple(agents), activity=dict(activity or {}),
                        eligible=dict(eligible or {}), config=config or Cfg(), budgets=budgets or Budgets(),
                        totals=totals or RunTotals(0.0, 0, 0, 0.0))


def activity(pid: int, gpu_s: float, gain: float) -> ProblemActivity:
    return ProblemActivity(pid, gpu_s, gain)


def apply(inp: PlannerInput, plan) -> PlannerInput:
    """What the orchestrator does with a plan: move agents and store the new statuses."""
    where = {a.agent_id: a.problem_id for a in plan.assignments}
    status = {c.problem_id: c.status for c in plan.status_changes}
    agents = tuple(replace(a, problem_id=where[a.id]) if a.id in where else a for a in inp.agents)
    problems = tuple(replace(p, status=status[p.id]) if p.id in status else p for p in inp.problems)
    return replace(inp, agents=agents, problems=problems)


def placement(inp: PlannerInput, plan) -> dict[int, int | None]:
    """agent id -> problem id after the plan is applied."""
    where = {a.id: a.problem_id for a in inp.agents}
    where.update({a.agent_id: a.problem_id for a in plan.assignments})
    return where


def load(where: dict[int, int | None]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for pid in where.values():
        if pid is not None:
            counts[pid] = counts.get(pid, 0) + 1
    return counts
