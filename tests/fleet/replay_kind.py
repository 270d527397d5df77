"""A small agent kind of its own, to show that a new kind is one module plus one registry line: each agent replays
one fixed solution of a bundled CPU test problem (``fleet_problems``: scaled_relu with CHUNK 64) through the
Workbench, once per problem, and is done there. No engine module names it."""

from __future__ import annotations

from fleet_problems import seed_solution

from core.config import FleetConfig
from core.fleet.agent import Agent, WorkOutcome, Workbench
from core.fleet.kinds import AgentKind
from core.solution.io import parse_solution
from core.store.model import AttemptRow

NOTE = "replay: CHUNK 64"
CHUNK = 64


class ReplayAgent:
    kind = "replay"

    def __init__(self, solution: dict):
        self.solution = parse_solution(solution, "the replayed solution")

    def can_work_on(self, best: AttemptRow | None, members=(), seed=None) -> bool:
        return best is not None  # after the seed, like the tuner

    async def work(self, bench: Workbench) -> WorkOutcome:
        if bench.equal_attempt(self.solution) is None and not bench.should_stop():
            attempt = await bench.evaluate(self.solution, parent_id=bench.best().id, note=NOTE)
            bench.log(f"replayed: attempt {attempt.id} {attempt.status}")
        return WorkOutcome.EXHAUSTED


def _make(config: FleetConfig) -> Agent:
    return ReplayAgent(seed_solution("scaled_relu", chunk=CHUNK))


KIND = AgentKind("replay", _make, count=lambda config: 1, model=lambda config: "replayed scaled_relu")
