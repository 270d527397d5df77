"""The planner model's rounds in a run (``[planner] mode = "llm"``), a loop the LLM kind adds beside the agents: every
``llm_interval_s`` once every problem is prepared, its proposals are applied as a person's controls are
(``core.fleet.controls``); the rules planner goes on every tick."""

from __future__ import annotations

import time

import anyio

from core.config.schema import profile_llm
from core.fleet.budget import BudgetSpent
from core.fleet.context import IDLE_POLL_S, RunContext
from core.fleet.controls import apply_control
from core.llm.planner import LlmPlanner, fleet_state
from core.store.controls import COMMANDS
from core.store.model import device_word


async def planner_model_loop(run: RunContext) -> None:
    from core.llm.client import LlmDown, LlmUnavailable  # the openai client is imported only in llm mode

    planner = LlmPlanner(profile_llm(run.config.llm, run.config.planner.llm_profile),
                         run.config.planner.llm_max_actions)
    while not run.prepared_all:
        await anyio.sleep(IDLE_POLL_S)
    while True:
        await anyio.sleep(run.config.planner.llm_interval_s)
        try:
            await _round(run, planner)
        except LlmDown as exc:
            run.event("log", f"planner model: stopped for the rest of the run: {exc}")
            return
        except LlmUnavailable as exc:
            run.event("log", f"planner model unavailable this round: {exc}")
        except BudgetSpent as exc:
            run.event("log", f"planner model: no call this round: {exc}")


async def _round(run: RunContext, planner: LlmPlanner) -> None:
    usage = run.usage()
    state = fleet_state(run.store.problems(), run.store.agents(), run.store.totals(),
                        elapsed_s=time.time() - run.started, gpu_busy=usage.busy_fraction() if usage else None,
                        planner=run.config.planner, budgets=run.config.budgets, device_word=device_word(run.device))
    answer = await planner.propose(state, reserve=lambda tokens, dollars: run.budgets.model_call(
        None, tokens, dollars), record=lambda call: run.store.add_llm_call(
            None, None, call, profile=run.config.planner.llm_profile, model=planner.cfg.model),
        log=lambda line: run.event("log", f"planner model: {line}"))
    if answer.unusable:
        run.event("log", f"planner model: nothing applied: {answer.unusable}")
    for refusal in answer.refusals:
        run.event("log", f"planner model: refused {refusal.what}: {refusal.why}")
    if not answer.proposals and not answer.unusable:
        run.event("log", "planner model: no change proposed")
    for proposal in answer.proposals:
        value = "" if proposal.value is None else str(proposal.value)
        try:
            result = apply_control(run, proposal.command, proposal.target, value)
        except ValueError as exc:
            run.event("log", f"planner model: refused {proposal.describe()}: {exc}")
            continue
        kind = COMMANDS[proposal.command][0]
        run.event("decision", f"planner model: {proposal.reason} ({proposal.describe()}: {result})",
                  problem_id=run.problem_id(proposal.target) if kind == "problem" else None,
                  agent_id=run.agent_id(proposal.target) if kind == "agent" else None)
