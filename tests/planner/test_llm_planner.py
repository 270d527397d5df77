"""The planner model's prompt and answer parsing (pure): what the model reads is the fleet's figures, bounded; what
it answers is kept only where it is a known command on a known target with a reason, at most the round's cap."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from planner_testkit import Budgets, Cfg, agent, problem

from core.config import parse_config
from core.config.schema import BudgetConfig, profile_llm
from core.fleet.budget import Budgets as RunBudgets
from core.fleet.budget import BudgetSpent
from core.llm.review import reviewer_config

from core.llm.planner import (
    MAX_ANSWER_CHARS,
    MAX_PROBLEMS_SHOWN,
    MAX_STATE_CHARS,
    MARKER,
    Proposal,
    fleet_state,
    parse_answer,
    planner_messages,
)
from core.store.model import FrontierMember, LlmCall
from core.store.writer import RunStore

PROBLEMS = ("gemm/matmul_fp16", "norm/rmsnorm", "norm/layernorm")
AGENTS = ("llm-1", "tuner-1")


def parse(content: str, tool_calls=(), max_actions: int = 5):
    return parse_answer(content, tool_calls, problems=PROBLEMS, agents=AGENTS, max_actions=max_actions)


def _state(problems, agents, **kw):
    return fleet_state(problems, agents, {"attempts": 31, "tokens": 120_000, "dollars": 1.5, "gpu_seconds": 42.0},
                       elapsed_s=600.0, gpu_busy=0.75, planner=Cfg(), budgets=kw.pop("budgets", Budgets()), **kw)


def test_the_prompt_of_a_cpu_run_speaks_of_cpu_seconds_not_gpu_seconds():
    state = _state([problem(1, key="norm/rmsnorm", status="active")], [agent(1, 1)], device_word="CPU")
    system, user = planner_messages(state, max_actions=3)
    assert "per CPU-second" in system["content"] and "optimise CPU kernels" in system["content"]
    assert "42.0 CPU-seconds in attempts" in user["content"] and "CPU busy 75%" in user["content"]
    assert "| CPU s |" in user["content"]
    assert "GPU" not in system["content"] + user["content"]


def test_prompt_carries_each_problems_figures_agents_and_spend():
    rows = [replace(problem(1, key="norm/rmsnorm", priority=2, attempts=14, since_improvement=5, failures_in_row=1,
                            status="active", tokens=9000, dollars=0.25), best_speedup=1.87, best_sol=0.41),
            problem(2, key="gemm/matmul_fp16", pinned=True, status="plateaued", best_sol=None)]
    rows[0] = replace(rows[0], frontier=(FrontierMember(12, (0, 2), (0.1, 0.2), 1.9, True),
                                         FrontierMember(15, (1,), (0.3,), 1.7, False)))
    state = _state(rows, [agent(1, 1)], budgets=Budgets(run_tokens=500_000))
    system, user = planner_messages(state, max_actions=3)
    assert system["role"] == "system" and system["content"].startswith(MARKER)
    assert "At most 3 actions" in system["content"] and "stop_run" not in system["content"]
    text = user["content"]
    assert "600 s, 31 attempts, 42.0 GPU-seconds in attempts, 120000 tokens, $1.50, GPU busy 75%" in text
    assert "run tokens: 120000 of 500000" in text
    assert "a1 | llm | working | norm/rmsnorm" in text
    line = next(l for l in text.splitlines() if l.startswith("norm/rmsnorm |"))
    assert line == "norm/rmsnorm | active | +2 | no | 1.87x | 0.41 | 14 | 5 | 1 | a1 | 0.0 | 9000 | 0.25 | #12 w0,2; #15 w1"
    assert "gemm/matmul_fp16 | plateaued | +0 | yes | - | - |" in text
    # Open problems come before closed ones.
    assert text.index("norm/rmsnorm |") < text.index("gemm/matmul_fp16 |")


def test_prompt_is_bounded_for_a_large_fleet():
    rows = [problem(i, key=f"set/p{i}_" + "x" * 40, attempts=i) for i in range(1, 1001)]
    text = planner_messages(_state(rows, [agent(i, i) for i in range(1, 300)]), 5)[1]["content"]
    assert len(text) <= MAX_STATE_CHARS + 100
    assert f"... and {1000 - MAX_PROBLEMS_SHOWN} more problems (940 waiting)" in text
    assert "... and 259 more agents" in text
    lines = [line for line in text.splitlines() if line.startswith("set/")]
    # The most-worked open problems are the ones shown.
    assert len(lines) == MAX_PROBLEMS_SHOWN and lines[0].startswith("set/p1000_")
    huge = [problem(i, key=f"set/p{i}_" + "x" * 400) for i in range(1, 1001)]
    text = planner_messages(_state(huge, []), 5)[1]["content"]
    assert len(text) <= MAX_STATE_CHARS + 100 and "(cut)" in text
    assert all(len(line) <= 300 for line in text.splitlines() if line.startswith("set/"))


def test_json_list_in_text_with_prose_and_a_fence():
    answer = parse("Here is my plan:\n```json\n" + json.dumps([
        {"command": "set_priority", "target": "norm/rmsnorm", "value": 3, "reason": "SOL 0.4, gaining fast"},
        {"command": "pin_problem", "target": "matmul_fp16", "reason": "largest gap under SOL"},
    ]) + "\n```\nThat should help.")
    assert answer.unusable is None and answer.refusals == ()
    assert answer.proposals == (Proposal("set_priority", "norm/rmsnorm", 3, "SOL 0.4, gaining fast"),
                                Proposal("pin_problem", "gemm/matmul_fp16", None, "largest gap under SOL"))


def test_actions_object_and_tool_calls():
    answer = parse('{"actions": [{"command": "bump_priority", "target": "norm/layernorm", "value": "-2", '
                   '"reason": "stalled for 10 attempts"}]}')
    assert answer.proposals == (Proposal("bump_priority", "norm/layernorm", -2, "stalled for 10 attempts"),)
    assert answer.proposals[0].describe() == "bump_priority norm/layernorm -2"
    calls = [("control", json.dumps({"command": "pause_agent", "target": "tuner-1", "reason": "no space left"})),
             ("pin_problem", json.dumps({"target": "norm/rmsnorm", "reason": "close to SOL"})),
             ("control", '{"command": "pin_problem", '),  # cut off
             ("rm_rf", "{}")]
    answer = parse("", calls)
    assert [p.describe() for p in answer.proposals] == ["pause_agent tuner-1", "pin_problem norm/rmsnorm"]
    assert [r.why for r in answer.refusals] == ["tool-call arguments are not JSON", "unknown tool; call control"]


def test_garbage_answers_change_nothing_and_say_why():
    for content in ("", "I think the fleet is doing great, keep going!", "{not json at all]", "null", "42"):
        answer = parse(content)
        assert answer.proposals == () and answer.garbage, content
        assert answer.unusable.startswith("no JSON actions in the answer")
    nothing = parse('{"actions": []}')
    assert nothing.proposals == () and not nothing.garbage and nothing.refusals == ()


def test_oversized_answer_is_refused_whole():
    item = {"command": "pin_problem", "target": "norm/rmsnorm", "reason": "x" * 100}
    huge = json.dumps([item] * (MAX_ANSWER_CHARS // 100))
    answer = parse(huge)
    assert answer.proposals == () and answer.unusable.startswith(f"oversized answer: {len(huge)} characters")
    answer = parse("", [("control", json.dumps({**item, "reason": "y" * MAX_ANSWER_CHARS}))])
    assert answer.proposals == () and answer.unusable.startswith("oversized answer")


def test_unknown_commands_targets_values_and_missing_reasons_are_refused():
    answer = parse(json.dumps([
        {"command": "stop_run", "target": "", "reason": "done"},
        {"command": "delete_everything", "target": "norm/rmsnorm", "reason": "why not"},
        {"command": "pin_problem", "target": "norm/softmax", "reason": "no such problem"},
        {"command": "pause_agent", "target": "llm-9", "reason": "no such agent"},
        {"command": "pause_agent", "target": "norm/rmsnorm", "reason": "a problem is not an agent"},
        {"command": "set_priority", "target": "norm/rmsnorm", "value": 10 ** 12, "reason": "huge"},
        {"command": "set_priority", "target": "norm/rmsnorm", "value": True, "reason": "a bool"},
        {"command": "bump_priority", "target": "norm/rmsnorm", "reason": "no value"},
        {"command": "pin_problem", "target": "norm/rmsnorm"},
        {"command": "pin_problem", "target": "norm/rmsnorm", "reason": "   "},
        "pin everything",
        {"command": "unpin_problem", "target": "norm/layernorm", "reason": "the one valid item"},
    ]))
    assert answer.proposals == (Proposal("unpin_problem", "norm/layernorm", None, "the one valid item"),)
    whys = [r.why for r in answer.refusals]
    assert whys[0] == "not a planner command (a person's)"
    assert whys[1].startswith("unknown command; known: set_priority")
    assert whys[2:5] == ["no problem 'norm/softmax' in this run", "no agent 'llm-9' in this run",
                         "no agent 'norm/rmsnorm' in this run"]
    assert all(w.startswith("value must be an integer from -100 to 100") for w in whys[5:8])
    assert whys[8:11] == ["no reason given", "no reason given", "not an action object"]


def test_actions_past_the_cap_and_duplicates_are_refused():
    items = [{"command": "set_priority", "target": key, "value": i, "reason": f"r{i}"}
             for i, key in enumerate(PROBLEMS)]
    answer = parse(json.dumps(items[:1] + items), max_actions=2)
    assert [p.target for p in answer.proposals] == ["gemm/matmul_fp16", "norm/rmsnorm"]
    assert [(r.what, r.why) for r in answer.refusals] == [
        ("set_priority gemm/matmul_fp16 0", "the same command on the same target twice"),
        ("set_priority norm/layernorm 2", "over the round's cap of 2 actions")]


def test_an_ambiguous_short_name_is_refused_and_reasons_are_one_bounded_line():
    answer = parse_answer(json.dumps([{"command": "pin_problem", "target": "rmsnorm", "reason": "a"},
                                      {"command": "pin_problem", "target": "b/other",
                                       "reason": "line one\nline two " + "z" * 500}]),
                          problems=("a/rmsnorm", "b/rmsnorm", "b/other"), agents=(), max_actions=5)
    assert [r.why for r in answer.refusals] == ["no problem 'rmsnorm' in this run"]
    (proposal,) = answer.proposals
    assert proposal.reason.startswith("line one line two z") and len(proposal.reason) == 200


def test_a_planner_call_is_held_against_the_run_budgets(tmp_path):
    store = RunStore(tmp_path / "run", create=True)
    store.add_llm_call(None, None, LlmCall("answer", 800, 100))
    budgets = RunBudgets(store, BudgetConfig(run_tokens=1000, problem_tokens=10))
    with budgets.model_call(None, 50, 0.0):  # on no problem: only the run's budgets count
        with pytest.raises(BudgetSpent, match="the run's token budget .900 spent, 50 in flight, about 60 more"):
            budgets.check_model_call(None, 60, 0.0)
    store.close()


def test_the_planner_and_the_reviewer_take_their_model_profiles():
    cfg = parse_config({"llm": {"model": "big", "max_tokens": 4096,
                                "profiles": {"large": {"model": "big"}, "cheap": {"model": "small",
                                                                                  "price_input_per_mtok": 0.1}}},
                        "planner": {"mode": "llm", "llm_profile": "cheap"},
                        "review": {"enabled": True, "profile": "cheap", "max_tokens": 100}})
    assert profile_llm(cfg.llm, cfg.planner.llm_profile).model == "small"
    assert profile_llm(cfg.llm, "").model == "big"
    reviewer = reviewer_config(cfg)
    assert (reviewer.model, reviewer.price_input_per_mtok, reviewer.max_tokens, reviewer.temperature) == (
        "small", 0.1, 100, 0.0)
