"""The LLM agent kind, as the run sees it (``core.fleet.kinds.AgentKind``): ``[fleet] llm_agents`` agents spread over
the model profiles of ``[llm]``, the endpoints' keys taken from the environment at the start, the reviewer's gate
(``[review] enabled``), the planner model's loop (``[planner] mode = "llm"``), and the shared client closed at the
end. Listed in ``core.agents``; loading this module imports no openai client."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable

from core.config import FleetConfig
from core.config.schema import model_profiles
from core.fleet.agent import Agent
from core.fleet.context import RunContext
from core.fleet.kinds import AgentKind
from core.llm.review import review_gate

PLANNER_MODE = "llm"  # [planner] mode that adds the planner model's loop


def _agent(config: FleetConfig) -> Agent:
    from core.llm.agent import LlmAgent  # the openai client is imported only by runs that have LLM agents

    return LlmAgent(config)


def _secrets(config: FleetConfig) -> tuple[str, ...]:
    return (config.llm.api_key_env, *(p.llm.api_key_env for p in model_profiles(config.llm)),
            *config.llm.secret_env)


def _loops(run: RunContext) -> tuple[Callable[[], Awaitable[None]], ...]:
    if run.config.planner.mode != PLANNER_MODE:
        return ()
    from core.llm.planner_loop import planner_model_loop

    return (lambda: planner_model_loop(run),)


async def _close() -> None:
    client = sys.modules.get("core.llm.client")  # only runs that made a model call imported it
    if client is not None:
        await client.LlmClient.close_shared()


KIND = AgentKind("llm", _agent, lambda c: c.fleet.llm_agents, profiles=lambda c: model_profiles(c.llm),
                 secrets=_secrets, review=review_gate, loops=_loops, close=_close)
