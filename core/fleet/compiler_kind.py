"""The compiler kind (``core.fleet.compiler_agent``): ``[compiler] agents`` agents (on the CPU device only with
``[compiler] cpu``; none where ``[fleet] languages`` leaves pytorch out), listed as using torch.compile; no LLM."""

from __future__ import annotations

from core.config import FleetConfig
from core.fleet.agent import Agent
from core.fleet.kinds import AgentKind


def _compiler(config: FleetConfig) -> Agent:
    from core.fleet.compiler_agent import CompilerAgent  # optuna is imported only by runs that have these agents

    return CompilerAgent(config.compiler)


KIND = AgentKind("compiler", _compiler, lambda c: c.compiler.agents_in(c.fleet), lambda c: "torch.compile",
                 does="search torch.compile modes, CUDA graphs and precisions of the reference")
