"""Model profiles in the planner: which LLM agent uses which profile. Pure and deterministic, like ``plan``.

- ``round_robin``: at the start the LLM agents are spread over the profiles in config order (llm-1 the first, ...).
- ``profile_rates``: what each profile pays, from ``ProfileUsage`` (the store's sums over its agents' attempts and
  model calls): its best-SOL gain (the gain ``core.fleet.record`` counts, the one the problem scores use) per
  dollar where every profile has a price, else per GPU-second (one objective for a run, so rates compare).
- ``choose_switch``, called every ``[planner] profile_switch_s``, moves at most one agent:
  1. Exploration: a profile with no agent that has fewer than ``min_attempts`` attempts takes one agent from the
     judged profile with the most agents.
  2. UCB1 over the judged profiles (``min_attempts`` attempts or more), with each profile's rate normalised by the
     best rate, so rewards lie in [0, 1]: the best is the highest rate; a profile whose upper bound
     ``rate + best * sqrt(2 ln N / n)`` (n its attempts, N all judged attempts) is below the best's rate pays less
     even at its most optimistic, and one of its agents moves to the best (the lowest upper bound first).
  No switch leaves a profile with fewer than ``floor`` agents (when there are agents enough for every profile's
  floor), so no profile is starved: the ones left keep being measured, and a bad start can be undone.
- ``choose_escalation``: a plateaued problem (``closure_status``), once, gets one turn of an LLM agent on the
  highest-ranked profile (where ranks differ): the orchestrator holds that agent there for the turn, away from
  ``plan``, so the closure does not free it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.planner.model import PLATEAUED
from core.planner.plan import closure_reason, closure_status
from core.store.model import AgentRow, ProblemRow, ProfileUsage

if TYPE_CHECKING:
    from core.config.schema import BudgetConfig, ModelProfile, PlannerConfig

PER_DOLLAR = "$"
PER_GPU_SECOND = "GPU-second"
_MIN_COST = 1e-9  # a judged profile that cost nothing yet is rated on this


@dataclass(frozen=True)
class ProfileSpec:
    """What the planner needs of a configured profile."""

    name: str
    rank: int = 0
    priced: bool = False  # has a price per token, so its calls cost dollars


def profile_specs(profiles: Sequence[ModelProfile]) -> tuple[ProfileSpec, ...]:
    return tuple(ProfileSpec(p.name, p.rank, p.llm.price_input_per_mtok > 0 or p.llm.price_output_per_mtok > 0)
                 for p in profiles)


def round_robin(number: int, profiles: Sequence[ProfileSpec]) -> str:
    """The profile of the ``number``-th LLM agent (1-based) at the start."""
    return profiles[(number - 1) % len(profiles)].name


@dataclass(frozen=True)
class ProfileRate:
    profile: str
    attempts: int
    sol_gain: float
    cost: float  # dollars or GPU seconds, as ``unit`` says
    unit: str  # PER_DOLLAR or PER_GPU_SECOND

    @property
    def rate(self) -> float:
        return self.sol_gain / max(self.cost, _MIN_COST) if self.sol_gain > 0 else 0.0

    def describe(self) -> str:
        """E.g. ``0.31 (6 attempts, $0.22)``."""
        cost = (f"${self.cost:.2f}" if self.cost >= 1 or self.cost == 0 else f"${self.cost:.4f}") \
            if self.unit == PER_DOLLAR else f"{self.cost:.1f} GPU-s"
        return f"{_figure(self.rate)} ({self.attempts} attempts, {cost})"


def _figure(x: float) -> str:
    return f"{x:.2f}" if x < 100 else f"{x:.0f}"


def objective(profiles: Sequence[ProfileSpec]) -> str:
    """Per dollar where every profile has a price, else per GPU-second."""
    return PER_DOLLAR if profiles and all(p.priced for p in profiles) else PER_GPU_SECOND


def profile_rates(profiles: Sequence[ProfileSpec], usage: Mapping[str, ProfileUsage]) -> dict[str, ProfileRate]:
    unit = objective(profiles)
    rates = {}
    for p in profiles:
        u = usage.get(p.name, ProfileUsage(p.name))
        rates[p.name] = ProfileRate(p.name, u.attempts, u.sol_gain,
                                    u.dollars if unit == PER_DOLLAR else u.gpu_seconds, unit)
    return rates


@dataclass(frozen=True)
class ProfileSwitch:
    agent_id: int
    old: str
    new: str
    reason: str  # "profile 'cheap' → 'strong': ..."


@dataclass(frozen=True)
class Escalation:
    agent_id: int
    problem_id: int
    profile: str
    reason: str


def _mover(agents: Sequence[AgentRow], profile: str) -> AgentRow:
    """The agent of ``profile`` to move: an idle one first, then the newest."""
    return min((a for a in agents if a.profile == profile), key=lambda a: (a.state == "working", -a.id))


def choose_switch(profiles: Sequence[ProfileSpec], agents: Sequence[AgentRow], usage: Mapping[str, ProfileUsage],
                  *, min_attempts: int, floor: int) -> ProfileSwitch | None:
    """At most one agent's new profile (see the module docstring). ``agents``: the LLM agents that may change
    profile (not paused, stopped or held by an escalation)."""
    if len(profiles) < 2:
        return None
    agents = [a for a in agents if not a.paused and a.state != "stopped"]
    order = {p.name: i for i, p in enumerate(profiles)}
    counts = dict.fromkeys(order, 0)
    for a in agents:
        if a.profile in counts:
            counts[a.profile] += 1
    agents = [a for a in agents if a.profile in counts]
    keep = floor if len(agents) >= floor * len(profiles) else 0
    rates = profile_rates(profiles, usage)
    judged = [p.name for p in profiles if rates[p.name].attempts >= min_attempts]
    unit = objective(profiles)

    unexplored = [p.name for p in profiles if counts[p.name] == 0 and rates[p.name].attempts < min_attempts]
    donors = [name for name in judged if counts[name] > keep]
    if unexplored and donors:
        new = unexplored[0]
        old = max(donors, key=lambda name: (counts[name], -order[name]))
        mover = _mover(agents, old)
        return ProfileSwitch(mover.id, old, new, f"profile '{old}' → '{new}': exploring '{new}', which has "
                                                 f"{rates[new].attempts} of the {min_attempts} attempts a profile "
                                                 f"needs to be judged and no agent")
    if len(judged) < 2:
        return None
    by_rank = {p.name: p.rank for p in profiles}
    best = max(judged, key=lambda name: (rates[name].rate, by_rank[name], -order[name]))
    top = rates[best].rate
    if top <= 0:
        return None
    total = sum(rates[name].attempts for name in judged)

    def upper(name: str) -> float:
        return rates[name].rate + top * math.sqrt(2 * math.log(total) / rates[name].attempts)

    losers = [name for name in judged if name != best and counts[name] > keep and upper(name) < top]
    if not losers:
        return None
    old = min(losers, key=lambda name: (upper(name), -order[name]))
    mover = _mover(agents, old)
    return ProfileSwitch(mover.id, old, best,
                         f"profile '{old}' → '{best}': SOL gain per {unit} {rates[old].describe()} vs "
                         f"{rates[best].describe()}; '{old}' at most {_figure(upper(old))} (UCB1), under "
                         f"'{best}' {_figure(top)}")


def choose_escalation(problems: Sequence[ProblemRow], agents: Sequence[AgentRow], profiles: Sequence[ProfileSpec],
                      escalated: frozenset[int], cfg: PlannerConfig, budgets: BudgetConfig) -> Escalation | None:
    """One plateaued problem not escalated before, and the LLM agent (idle first, then one already on the strongest
    profile, then the lowest id) that takes a turn on it on the highest-ranked profile; None where the profiles'
    ranks are all equal, nothing is plateaued or no agent can go."""
    if len({p.rank for p in profiles}) < 2:
        return None
    strongest = max(profiles, key=lambda p: p.rank)  # the first of the highest rank, in config order
    plateaued = [p for p in problems if p.id not in escalated and closure_status(p, cfg, budgets) == PLATEAUED]
    ready = [a for a in agents if not a.paused and a.state != "stopped"]
    if not plateaued or not ready:
        return None
    problem = min(plateaued, key=lambda p: (p.best_sol if p.best_sol is not None else 0.0, p.id))
    agent = min(ready, key=lambda a: (a.state == "working", a.profile != strongest.name, a.id))
    switched = f" (profile '{agent.profile}' → '{strongest.name}')" if agent.profile != strongest.name else ""
    return Escalation(agent.id, problem.id, strongest.name,
                      f"escalated to profile '{strongest.name}' (rank {strongest.rank}, the strongest): "
                      f"{closure_reason(problem, PLATEAUED, cfg, budgets)}; {agent.name}{switched} gets one turn "
                      f"on {problem.key}")
