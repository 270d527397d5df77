"""The registry of agent kinds. A kind is a name, a factory from the run's config, and how many agents of it the
config asks for; adding one is a module with its ``Agent`` and a ``register`` call (or an entry passed to the
``Fleet``). The run asks every kind's ``can_work_on`` which problems it has anything to do on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from core.config import FleetConfig
from core.fleet.agent import Agent


@dataclass(frozen=True)
class AgentKind:
    name: str
    make: Callable[[FleetConfig], Agent]
    count: Callable[[FleetConfig], int]  # agents of this kind the config asks for
    model: Callable[[FleetConfig], str] = lambda config: ""  # what its agents are listed as using, if not a profile


def _tuner(config: FleetConfig) -> Agent:
    from core.fleet.tuner import TunerAgent

    return TunerAgent(config.tuner.trials_per_problem, config.tuner.seed, config.tuner.startup_trials)


def _llm(config: FleetConfig) -> Agent:
    from core.llm import LlmAgent  # the openai client is imported only by runs that have LLM agents

    return LlmAgent(config)


_KINDS: dict[str, AgentKind] = {}


def register(kind: AgentKind) -> None:
    _KINDS[kind.name] = kind


def registered() -> dict[str, AgentKind]:
    return dict(_KINDS)


register(AgentKind("tuner", _tuner, lambda c: c.fleet.tuner_agents, lambda c: "optuna-tpe"))
register(AgentKind("llm", _llm, lambda c: c.fleet.llm_agents))  # the model is its profile's (core.planner.profiles)
