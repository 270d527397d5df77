"""The planner model directs: it reads each problem's worst workloads, languages tried, newest failures and its op
family's notes board, and may answer with a directive (an instruction and a reason, to an agent or to every agent on
a problem). A directive is a ``directive`` event, shown as such in the TUI's log lines, and reaches the next brief
of the agents it names, once (a real run's store and context, the real openai client, a scripted server)."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import anyio
import pytest
from llm_fleet_helpers import write_config, write_problem
from llm_scripted_server import ScriptedServer, call, text, tools

from core.config import load_config, parse_config
from core.config.schema import profile_llm
from core.fleet.agent import AgentIdentity
from core.fleet.directives import DIRECTIVE
from core.fleet.orchestrator import Fleet
from core.fleet.workbench import Workbench
from core.llm.agent import LlmAgent
from core.llm.gaps import WorkloadGap
from core.llm.planner import (MARKER, MAX_DETAILS_CHARS, MAX_STATE_CHARS, LlmPlanner, ProblemDetail, Proposal,
                              fleet_state, parse_answer, planner_messages)
from core.llm.planner_loop import planner_round
from core.store.model import AgentRow, EventRow, NoteRow, ProblemRow, WorkloadInfo
from tui.logs.model import event_line
from tui.snapshot import Snapshot

TO_AGENT = "Vectorise the loads of w1: it is 12x T_sol"
TO_PROBLEM = "Try triton for the large rows"
REASON = "the largest gap of the run"


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("KF_TEST_LLM_KEY", "sk-test-directives-0123456789")


def test_a_directive_is_parsed_from_text_and_tool_calls_to_an_agent_or_a_problem():
    problems, agents = ("norm/rmsnorm", "gemm/matmul"), ("llm-1",)
    answer = parse_answer(json.dumps({"actions": [
        {"command": "direct", "target": "llm-1", "instruction": "fuse  the\nresidual", "reason": "two passes"},
        {"command": "direct", "target": "rmsnorm", "instruction": "x" * 400, "reason": "r"},
        {"command": "direct", "target": "gemm/matmul", "reason": "no instruction"},
        {"command": "direct", "target": "llm-9", "instruction": "i", "reason": "no such target"},
        {"command": "direct", "target": "gemm/matmul", "instruction": "i"}]}),
        problems=problems, agents=agents, max_actions=5)
    first, second = answer.proposals
    assert first == Proposal("direct", "llm-1", None, "two passes", "fuse the residual", True)
    assert first.target_kind == "agent" and second.target_kind == "problem" and second.target == "norm/rmsnorm"
    assert len(second.instruction) == 300 and second.instruction.endswith("...")
    assert [r.why for r in answer.refusals] == ["no instruction given", "no agent or problem 'llm-9' in this run",
                                                "no reason given"]
    calls = [("control", json.dumps({"command": "direct", "target": "gemm/matmul", "instruction": "tile 128",
                                     "reason": "r"})),
             ("direct", json.dumps({"target": "llm-1", "instruction": "read the notes", "reason": "r"}))]
    answer = parse_answer("", calls, problems=problems, agents=agents, max_actions=5)
    assert [(p.target, p.instruction, p.to_agent) for p in answer.proposals] == [
        ("gemm/matmul", "tile 128", False), ("llm-1", "read the notes", True)]


def test_the_planner_reads_gaps_languages_failures_notes_and_the_directives_it_gave():
    cfg = parse_config({})
    row = ProblemRow(1, "norm/rmsnorm", "rmsnorm", "norm", "/p", "", 0, False, False, "active", 5, 1.2, 0.1, 1, 1.0,
                     None, 6, 2, 3, 0, 0.0, 0.0, 0.0, None,
                     (WorkloadInfo(0, "n=1", 1.0, 0.1), WorkloadInfo(1, "n=2", 1.0, 0.05), WorkloadInfo(2, "n=3", 1.0)))
    agent = AgentRow(1, "llm-1", "llm", "m", "working", 1, False, 0, 0, 0, 0.0, 0.0)
    detail = ProblemDetail("norm", (WorkloadGap(0, 0.5, 1.0, 0.1), WorkloadGap(1, 1.25, 1.0, 0.05),
                                    WorkloadGap(2, None, 1.0, None)),
                           (("pytorch", 4, 3), ("triton", 2, 0)), ((6, "INCORRECT_NUMERICAL", "out: 97% matched"),
                                                                    (5, "COMPILE_ERROR", "")))
    note = NoteRow(1, 0.0, "norm", 1, 1, "one pass with a warp per row", "llm-1", "norm/rmsnorm")
    given = EventRow(9, 0.0, DIRECTIVE, 1, 1, f"{TO_AGENT} (why: {REASON})")
    state = fleet_state([row], [agent], {}, elapsed_s=60.0, gpu_busy=None, planner=cfg.planner, budgets=cfg.budgets,
                        details={1: detail}, boards={"norm": [note]}, directives=[given])
    system, user = planner_messages(state, max_actions=3)
    assert "- direct: target an agent or a problem, with an instruction" in system["content"]
    assert ("- norm/rmsnorm: family norm; workloads: w1 25x T_sol, w0 5x; slower than T_b: w1 0.8x; "
            "no passing time: w2; tried pytorch 4 (3 passed), triton 2 (0 passed); newest failures: "
            "#6 INCORRECT_NUMERICAL: out: 97% matched | #5 COMPILE_ERROR") in user["content"]
    assert "- norm: llm-1 on norm/rmsnorm: one pass with a warp per row" in user["content"]
    assert f"- to llm-1 (on norm/rmsnorm): {TO_AGENT} (why: {REASON})" in user["content"]
    # However many problems and however long their failures, what the model reads stays bounded.
    rows = [replace(row, id=i, key=f"set/p{i}") for i in range(1, 201)]
    long = ProblemDetail("norm", detail.gaps, detail.languages,
                         tuple((j, "RUNTIME_ERROR", "x" * 2000) for j in range(9)))
    state = fleet_state(rows, [agent], {}, elapsed_s=60.0, gpu_busy=None, planner=cfg.planner, budgets=cfg.budgets,
                        details={i: long for i in range(1, 201)}, boards={"norm": [note] * 50}, directives=[given] * 50)
    text = planner_messages(state, max_actions=3)[1]["content"]
    assert len(text) <= MAX_STATE_CHARS + MAX_DETAILS_CHARS + 100 and text.count("\n- set/p") == 16


def _agent_briefs(server) -> list[str]:
    return [r["body"]["messages"][1]["content"] for r in list(server.requests)
            if not r["body"]["messages"][0]["content"].startswith(MARKER)]


def _planner_prompts(server) -> list[dict]:
    return [r["body"] for r in list(server.requests) if r["body"]["messages"][0]["content"].startswith(MARKER)]


def _answer(body):
    """The planner's first round directs the agent and its problem, its later rounds change nothing; every agent
    turn ends at once (one brief a turn)."""
    if not body["messages"][0]["content"].startswith(MARKER):
        return text("FINISH: nothing to try yet")
    if any(TO_AGENT in m.get("content") or "" for m in body["messages"]):
        return text('{"actions": []}')
    return tools(call("control", {"command": "direct", "target": "llm-1", "instruction": TO_AGENT, "reason": REASON}),
                 call("direct", {"target": "cpu/scaled_relu", "instruction": TO_PROBLEM, "reason": REASON}))


def test_a_directive_reaches_the_next_brief_of_the_agents_it_names_once_and_is_an_event(tmp_path):
    """The run's own parts without its device work: its store and context (``Fleet.open``), the planner model's
    round as its loop runs it, and the agent's turns each through a Workbench of its own, as the agent loop makes
    them."""
    write_problem(tmp_path / "problems")
    with ScriptedServer([], forever=_answer) as server:
        config = load_config(write_config(tmp_path / "fleet.toml", llm={"base_url": server.base_url},
                                          planner={"mode": "llm", "llm_max_actions": 3}))
        fleet = Fleet(tmp_path / "run", config, [str(tmp_path / "problems")])
        fleet.open()
        try:
            run = fleet.run_context
            (pid,), (agent_id,) = list(run.problems), list(run.names)
            run.assignment[agent_id] = pid
            run.services = fleet.bench_services()  # once a run start, as the run makes them
            store = run.store  # what the planner reads: the workloads' bounds, a passing and a failed attempt
            store.set_problem_workloads(pid, [asdict(WorkloadInfo(0, "rows=64", 0.02, 0.002)),
                                              asdict(WorkloadInfo(1, "rows=256", 0.05, 0.005))])
            store.finish_attempt(store.begin_attempt(pid, agent_id, {}, language="pytorch"), status="PASSED",
                                 times_ms={0: 0.01, 1: 0.1}, speedup=1.0)
            store.finish_attempt(store.begin_attempt(pid, agent_id, {}, language="triton"), status="COMPILE_ERROR",
                                 reason="triton: tile\ntoo large")
            planner = LlmPlanner(profile_llm(config.llm, config.planner.llm_profile), config.planner.llm_max_actions)

            async def turn() -> None:
                bench = Workbench(run.services, AgentIdentity(agent_id, "llm-1", "llm"), run.problems[pid], pid,
                                  lambda: False)
                await LlmAgent(config).work(bench)

            async def scenario() -> None:  # one event loop, as in a run: the model client is the run's
                await turn()
                await planner_round(run, planner)
                await turn()
                await turn()
                await planner_round(run, planner)

            anyio.run(scenario)
            events = run.store.events(kind=DIRECTIVE)
            snapshot = Snapshot("run", run.store.run_info(), problems=tuple(run.store.problems()),
                                agents=tuple(run.store.agents()))
        finally:
            fleet.close()
        briefs, prompts = _agent_briefs(server), _planner_prompts(server)
    # The brief after the directives holds both, the agent's and its problem's; not the one before, nor the next.
    assert len(briefs) == 3 and [TO_AGENT in b for b in briefs] == [False, True, False]
    assert [TO_PROBLEM in b for b in briefs] == [False, True, False]
    assert "## Directives from the planner since your last turn (oldest first)" in briefs[1]
    assert f"- to you: {TO_AGENT} (why: {REASON})" in briefs[1]
    assert f"- to every agent on this problem: {TO_PROBLEM} (why: {REASON})" in briefs[1]
    # The planner was offered the action, read the problem's details, then the directives it gave.
    assert "direct" in prompts[0]["tools"][0]["function"]["parameters"]["properties"]["command"]["enum"]
    assert ("- cpu/scaled_relu: family elementwise; workloads: w1 20x T_sol, w0 5x; slower than T_b: "
            "w1 0.5x; tried pytorch 1 (1 passed), triton 1 (0 passed); newest failures: #2 COMPILE_ERROR: triton: "
            "tile too large") in prompts[0]["messages"][1]["content"]
    assert f"- to llm-1 (on cpu/scaled_relu): {TO_AGENT} (why: {REASON})" in prompts[1]["messages"][1]["content"]
    # Each is an event, addressed as the planner named it, and shown in the TUI's log as a directive.
    assert [(e.agent_id, e.problem_id, e.message) for e in events] == [
        (agent_id, pid, f"{TO_AGENT} (why: {REASON})"), (None, pid, f"{TO_PROBLEM} (why: {REASON})")]
    lines = [event_line(e, snapshot) for e in events]
    assert lines[0].endswith(f" directive to llm-1 cpu/scaled_relu: {TO_AGENT} (why: {REASON})")
    assert lines[1].endswith(f" directive to every agent on cpu/scaled_relu: {TO_PROBLEM} (why: {REASON})")
    assert event_line(events[1], snapshot, with_problem=False).endswith(
        f" directive to every agent here: {TO_PROBLEM} (why: {REASON})")
