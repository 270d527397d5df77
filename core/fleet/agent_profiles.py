"""Which model profile each agent of a profiled kind uses (a kind that declares ``profiles``): the spread at the
start, escalation of a plateaued problem and the switches ``core.planner.profiles`` decides, each tick."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from core.planner.profiles import choose_escalation, choose_switch, profile_specs, round_robin

if TYPE_CHECKING:
    from core.config import FleetConfig
    from core.config.schema import ModelProfile
    from core.fleet.context import RunContext
    from core.fleet.kinds import AgentKind
    from core.store.writer import RunStore


class AgentProfiles:
    def __init__(self) -> None:
        self.by_kind: dict[str, dict[str, ModelProfile]] = {}  # kind -> its profiles by name, config order
        self.of: dict[int, str] = {}  # agent id -> its profile now
        self.holds: dict[int, int] = {}  # agent id -> the plateaued problem it has one escalated turn on
        self.escalated: set[int] = set()  # problems escalated since this start
        self._judged_at = time.monotonic()

    def configure(self, kinds: dict[str, AgentKind], config: FleetConfig) -> None:
        self.by_kind = {}
        for kind in kinds.values():
            profiles = tuple(kind.profiles(config))
            if profiles:
                self.by_kind[kind.name] = {p.name: p for p in profiles}

    def start_profile(self, kind: str, number: int) -> str:
        """The profile of the ``number``-th agent of ``kind`` (1-based) at the start; "" for a kind without."""
        profiles = self.by_kind.get(kind)
        return round_robin(number, profile_specs(tuple(profiles.values()))) if profiles else ""

    def model(self, kind: str, profile: str) -> str:
        return self.by_kind[kind][profile].llm.model if profile else ""

    def restore(self, store: RunStore) -> None:
        """Each profiled agent's profile: its stored one (a resumed run keeps its own), else the start's spread
        (an older store's agents have none)."""
        for kind, profiles in self.by_kind.items():
            for n, agent in enumerate((a for a in store.agents() if a.kind == kind), start=1):
                profile = agent.profile if agent.profile in profiles else self.start_profile(kind, n)
                self.set(store, agent.id, kind, profile)

    def set(self, store: RunStore, agent_id: int, kind: str, profile: str) -> None:
        self.of[agent_id] = profile
        store.update_agent(agent_id, profile=profile, model=self.model(kind, profile))

    def plan(self, run: RunContext) -> None:
        """With several profiles: escalate a plateaued problem (every tick), and move one agent to the profile
        that pays (every profile_switch_s); ``core.planner.profiles`` decides. A held agent is out of ``plan``'s
        sight until its escalated turn ends, so the plateau does not free it."""
        several = {kind: profiles for kind, profiles in self.by_kind.items() if len(profiles) >= 2}
        if not several:
            return
        cfg = run.config.planner
        if cfg.escalate_plateaued:
            for kind, profiles in several.items():
                self._escalate(run, kind, profiles)
        if time.monotonic() - self._judged_at < cfg.profile_switch_s:
            return
        self._judged_at = time.monotonic()
        for kind, profiles in several.items():
            switch = choose_switch(profile_specs(tuple(profiles.values())), self._free(run, kind),
                                   run.store.profile_usage(), min_attempts=cfg.profile_min_attempts,
                                   floor=cfg.profile_floor)
            if switch is not None:
                self.set(run.store, switch.agent_id, kind, switch.new)
                run.event("decision", f"agent {run.names[switch.agent_id]}: {switch.reason}",
                          agent_id=switch.agent_id)

    def _free(self, run: RunContext, kind: str) -> tuple:
        return tuple(a for a in run.store.agents() if a.kind == kind and a.id not in self.holds)

    def _escalate(self, run: RunContext, kind: str, profiles: dict[str, ModelProfile]) -> None:
        up = choose_escalation(tuple(run.store.problems()), self._free(run, kind),
                               profile_specs(tuple(profiles.values())), frozenset(self.escalated), run.config.planner,
                               run.config.budgets)
        if up is None:
            return
        self.escalated.add(up.problem_id)
        self.holds[up.agent_id] = up.problem_id
        self.set(run.store, up.agent_id, kind, up.profile)
        run.assignment[up.agent_id] = up.problem_id
        run.store.update_agent(up.agent_id, problem_id=up.problem_id, state="working")
        run.event("decision", up.reason, agent_id=up.agent_id, problem_id=up.problem_id)
