"""The planner model's rounds in a run (``[planner] mode = "llm"``), a loop the LLM kind adds beside the agents: every
``llm_interval_s`` once every problem is prepared, the model reads the fleet's figures and each problem's details
from the store, its controls are applied as a person's are (``core.fleet.controls``) and its directives recorded as
``directive`` events for the agents' next briefs (``core.fleet.directives``); the rules planner goes on every tick."""

from __future__ import annotations

import time

import anyio

from core.config.schema import profile_llm
from core.fleet.budget import BudgetSpent
from core.fleet.context import IDLE_POLL_S, RunContext
from core.fleet.controls import apply_control
from core.fleet.directives import DIRECTIVE, directive_message
from core.fleet.similar import op_family
from core.llm.gaps import workload_gaps
from core.llm.planner import DIRECT, MAX_BOARD_NOTES, MAX_DIRECTIVES_SHOWN, LlmPlanner, ProblemDetail, Proposal, \
    fleet_state
from core.planner.model import CLOSED_STATUSES
from core.store.model import NoteRow, ProblemRow, device_word

MAX_FAILURES_SHOWN = 2  # the newest failed attempts of each problem the model reads


async def planner_model_loop(run: RunContext) -> None:
    from core.llm.client import LlmDown, LlmUnavailable  # the openai client is imported only in llm mode

    planner = LlmPlanner(profile_llm(run.config.llm, run.config.planner.llm_profile),
                         run.config.planner.llm_max_actions)
    while not run.prepared_all:
        await anyio.sleep(IDLE_POLL_S)
    while True:
        await anyio.sleep(run.config.planner.llm_interval_s)
        try:
            await planner_round(run, planner)
        except LlmDown as exc:
            run.event("log", f"planner model: stopped for the rest of the run: {exc}")
            return
        except LlmUnavailable as exc:
            run.event("log", f"planner model unavailable this round: {exc}")
        except BudgetSpent as exc:
            run.event("log", f"planner model: no call this round: {exc}")


async def planner_round(run: RunContext, planner: LlmPlanner) -> None:
    """One round: the model reads the fleet, its controls are applied and its directives recorded, with events."""
    usage = run.usage()
    problems = run.store.problems()
    details = problem_details(run, problems)
    state = fleet_state(problems, run.store.agents(), run.store.totals(),
                        elapsed_s=time.time() - run.started, gpu_busy=usage.busy_fraction() if usage else None,
                        planner=run.config.planner, budgets=run.config.budgets, device_word=device_word(run.device),
                        details=details, boards=family_boards(run, problems, details),
                        directives=run.store.events(kind=DIRECTIVE, limit=MAX_DIRECTIVES_SHOWN))
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
            if proposal.command == DIRECT:
                _direct(run, proposal)
                continue
            result = apply_control(run, proposal.command, proposal.target, value)
        except ValueError as exc:
            run.event("log", f"planner model: refused {proposal.describe()}: {exc}")
            continue
        kind = proposal.target_kind
        run.event("decision", f"planner model: {proposal.reason} ({proposal.describe()}: {result})",
                  problem_id=run.problem_id(proposal.target) if kind == "problem" else None,
                  agent_id=run.agent_id(proposal.target) if kind == "agent" else None)


def _direct(run: RunContext, proposal: Proposal) -> None:
    """Record a directive: to an agent (on the problem it is on now, if any) or to every agent on a problem."""
    if proposal.to_agent:
        agent_id = run.agent_id(proposal.target)
        problem_id = run.assignment.get(agent_id)
    else:
        agent_id, problem_id = None, run.problem_id(proposal.target)
    run.event(DIRECTIVE, directive_message(proposal.instruction, proposal.reason), agent_id=agent_id,
              problem_id=problem_id)


def problem_details(run: RunContext, problems: list[ProblemRow]) -> dict[int, ProblemDetail]:
    """Per problem what the model reads beyond its figures: its op family, its workloads' gaps (the fastest passing
    time on each), the languages tried and its newest failures."""
    tried = run.store.languages_tried()
    failures = run.store.newest_failures(MAX_FAILURES_SHOWN)
    details = {}
    for p in problems:
        loaded = run.problems.get(p.id)
        bests: dict[int, float] = {}
        for passing in run.store.passing_times(p.id):
            for index, ms in passing.times_ms.items():
                bests[index] = min(ms, bests.get(index, ms))
        details[p.id] = ProblemDetail(op_family(p, loaded.definition.reference if loaded else ""),
                                      workload_gaps(p.workloads, bests), tuple(tried.get(p.id, ())),
                                      tuple(failures.get(p.id, ())))
    return details


def family_boards(run: RunContext, problems: list[ProblemRow],
                  details: dict[int, ProblemDetail]) -> dict[str, list[NoteRow]]:
    """The newest notes of the board of each open problem's op family."""
    families = dict.fromkeys(details[p.id].family for p in problems if p.status not in CLOSED_STATUSES)
    return {family: run.store.notes(family, limit=MAX_BOARD_NOTES) for family in families if family}
