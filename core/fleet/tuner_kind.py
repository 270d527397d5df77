"""The tuner kind (``core.fleet.tuner``): as many agents as ``[fleet] tuner_agents``, listed as using optuna's TPE."""

from __future__ import annotations

from core.config import FleetConfig
from core.fleet.agent import Agent
from core.fleet.kinds import AgentKind


def _tuner(config: FleetConfig) -> Agent:
    from core.fleet.tuner import TunerAgent  # optuna is imported only by runs that have tuner agents

    return TunerAgent(config.tuner.trials_per_problem, config.tuner.seed, config.tuner.startup_trials)


KIND = AgentKind("tuner", _tuner, lambda c: c.fleet.tuner_agents, lambda c: "optuna-tpe")
