"""Two model profiles in a real fleet run on the CPU device: two scripted OpenAI-compatible servers, one whose
candidates never beat the best (always the same slow candidate) and one whose candidates keep halving the time.
The planner measures each profile's SOL gain per dollar from the store and moves agents to the one that pays."""

from __future__ import annotations

import os

import pytest
from llm_fleet_helpers import drive, write_config
from llm_scripted_server import ScriptedServer, call, slow, text, tools
from rows_problem import write_rows_problem

from core.config import load_config
from core.fleet.orchestrator import Fleet
from core.store import RunReader

pytestmark = pytest.mark.slow

CHEAP_KEY, STRONG_KEY = "sk-test-cheap-0123456789abcdef", "sk-test-strong-0123456789abcdef"

# The reference sleeps, so a candidate's time is set by its own sleep: every halving is a real, measured gain.
REFERENCE = '''import time

import torch


def run(x, w):
    time.sleep(0.016)
    return torch.relu(x * w)
'''


def candidate(sleep_s: float, tag: str) -> str:
    return (f"import time\n\nimport torch\n\n# {tag}\n\n\ndef run(x, w):\n    time.sleep({sleep_s})\n"
            "    return torch.relu(x * w)\n")


def evaluate_step(sleep_s: float, tag: str):
    return slow(tools(call("set_spec", {"language": "pytorch", "entry_point": "main.py::run",
                                        "destination_passing_style": False}),
                      call("write_file", {"path": "main.py", "content": candidate(sleep_s, tag)}),
                      call("evaluate"), usage=(1000, 200)), 0.05)


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    monkeypatch.setenv("KF_CHEAP_KEY", CHEAP_KEY)
    monkeypatch.setenv("KF_STRONG_KEY", STRONG_KEY)


def _calls_by_profile(reader, since_ts: float = 0.0) -> dict[str, int]:
    counts: dict[str, int] = {}
    for c in reader.llm_calls():
        if c.ts > since_ts:
            counts[c.profile] = counts.get(c.profile, 0) + 1
    return counts


def _add_two_profiles(path, cheap, strong) -> None:
    """'cheap' and 'strong' (rank 1) at their scripted servers, prices left at their defaults."""
    path.write_text(path.read_text() + f"""
[llm.profiles.cheap]
base_url = "{cheap.base_url}"
model = "cheap-model"
api_key_env = "KF_CHEAP_KEY"

[llm.profiles.strong]
base_url = "{strong.base_url}"
model = "strong-model"
api_key_env = "KF_STRONG_KEY"
rank = 1
""")


def _switches(store) -> list:
    return [e for e in store.events(kind="decision") if "profile 'cheap' → 'strong': SOL gain per $" in e.message]


def test_agents_shift_to_the_profile_that_pays(tmp_path):
    # 'cheap': the same 32 ms candidate (a comment apart, so each is evaluated) forever: passing, never a gain.
    never = [evaluate_step(0.032, f"try {i}") for i in range(400)]
    # 'strong': 8, 4, 2, 1, 0.5 ms: each a new best; then finishing turns at a model's pace.
    better = [evaluate_step(0.008 / 2 ** i, f"halved {i}") for i in range(5)]
    finish = slow(tools(call("finish", {"note": "as fast as it gets"}), usage=(1000, 200)), 0.2)
    problems = tmp_path / "problems"
    write_rows_problem(problems / "cpu" / "sleepy_relu", "sleepy_relu", "x * w, then ReLU, after a nap", REFERENCE,
                       rows=(64, 256))
    with ScriptedServer(never, forever=never[-1]) as cheap, ScriptedServer(better, forever=finish) as strong:
        path = write_config(tmp_path / "fleet.toml",
                            llm={"model": "unused", "api_key_env": "KF_UNUSED_KEY"},
                            fleet={"llm_agents": 4},
                            planner={"max_agents_per_problem": 4, "profile_switch_s": 0.3,
                                     "profile_min_attempts": 3, "profile_floor": 1, "plateau_attempts": 500})
        path.write_text(path.read_text() + f"""
[llm.profiles.cheap]
base_url = "{cheap.base_url}"
model = "cheap-model"
api_key_env = "KF_CHEAP_KEY"
price_input_per_mtok = 0.5
price_output_per_mtok = 2.0

[llm.profiles.strong]
base_url = "{strong.base_url}"
model = "strong-model"
api_key_env = "KF_STRONG_KEY"
price_input_per_mtok = 2.0
price_output_per_mtok = 8.0
rank = 1
""")
        fleet = Fleet(tmp_path / "run", load_config(path), [str(problems)])

        def shifted(store) -> bool:
            found = _switches(store)
            if not found:
                return False
            return _calls_by_profile(store, found[0].ts).get("strong", 0) >= 12

        run_dir = drive(fleet, shifted, timeout_s=75)
        # Both keys were taken out of the environment at the start, and each server got its own.
        assert "KF_CHEAP_KEY" not in os.environ and "KF_STRONG_KEY" not in os.environ
        assert {r["authorization"] for r in cheap.requests} == {f"Bearer {CHEAP_KEY}"}
        assert {r["authorization"] for r in strong.requests} == {f"Bearer {STRONG_KEY}"}
        assert {r["body"]["model"] for r in cheap.requests} == {"cheap-model"}
        assert {r["body"]["model"] for r in strong.requests} == {"strong-model"}

    with RunReader(run_dir) as reader:
        agents = {a.name: a for a in reader.agents()}
        # One switch, down to the floor: three agents on 'strong', one left measuring 'cheap'.
        switches = _switches(reader)
        assert len(switches) == 1, [e.message for e in reader.events(kind="decision")]
        moved = switches[0].message.split(":")[0].removeprefix("agent ")
        assert moved in ("llm-1", "llm-3")  # started on 'cheap' (round-robin: llm-1 cheap, llm-2 strong, ...)
        assert sorted(a.profile for a in agents.values()) == ["cheap", "strong", "strong", "strong"]
        assert agents[moved].profile == "strong" and agents[moved].model == "strong-model"
        assert agents["llm-2"].profile == agents["llm-4"].profile == "strong"
        # The reason names the figures, and they are the store's: zero gain for 'cheap' against a positive one.
        reason = switches[0].message
        assert "SOL gain per $ 0.00 (" in reason and "(UCB1)" in reason, reason
        calls = reader.llm_calls()
        attempts = [a for a in reader.attempts() if a.agent_id is not None and a.state == "done"]
        cheap_attempts = [a for a in attempts if a.profile == "cheap"]
        strong_attempts = [a for a in attempts if a.profile == "strong"]
        assert len(cheap_attempts) >= 3 and all(a.gain == 0 for a in cheap_attempts)
        assert all(a.passed for a in cheap_attempts)
        assert sum(a.gain for a in strong_attempts) > 0.5  # at least one real halving (log 2 = 0.69)
        # Each model call is recorded with its profile and model, and costs that profile's prices.
        assert {(c.profile, c.model) for c in calls} == {("cheap", "cheap-model"), ("strong", "strong-model")}
        cheap_call = next(c for c in calls if c.profile == "cheap")
        strong_call = next(c for c in calls if c.profile == "strong")
        assert cheap_call.call.dollars == pytest.approx((1000 * 0.5 + 200 * 2.0) / 1e6)
        assert strong_call.call.dollars == pytest.approx((1000 * 2.0 + 200 * 8.0) / 1e6)
        # After the switch, most of the agents' model calls go to 'strong'. Not three to one: the moved agent may
        # finish its turn on 'cheap' first, and how long that takes depends on the machine's load.
        after = _calls_by_profile(reader, switches[0].ts)
        assert after.get("strong", 0) > after.get("cheap", 0), after


def test_a_plateaued_problem_gets_one_turn_on_the_strongest_profile(tmp_path):
    # One agent, on 'cheap' (the first profile): its slow candidates plateau the problem after 3 attempts; the
    # planner then gives it one turn on 'strong' (rank 1), whose candidate breaks the plateau.
    never = [evaluate_step(0.032, f"try {i}") for i in range(3)]
    rescue = [evaluate_step(0.004, "rescued")]
    finish = slow(tools(call("finish", {"note": "done"}), usage=(1000, 200)), 0.2)
    problems = tmp_path / "problems"
    write_rows_problem(problems / "cpu" / "sleepy_relu", "sleepy_relu", "x * w, then ReLU, after a nap", REFERENCE,
                       rows=(64,))
    with ScriptedServer(never, forever=finish) as cheap, ScriptedServer(rescue, forever=finish) as strong:
        path = write_config(tmp_path / "fleet.toml", llm={"model": "unused", "api_key_env": "KF_UNUSED_KEY"},
                            planner={"plateau_attempts": 3, "profile_min_attempts": 50})
        _add_two_profiles(path, cheap, strong)
        run_dir = drive(Fleet(tmp_path / "run", load_config(path), [str(problems)]),
                        lambda s: any(e.message.startswith("escalated turn ended") for e in s.events(kind="decision")),
                        timeout_s=60)
        assert cheap.consumed == 3 and strong.consumed == 1
    with RunReader(run_dir) as reader:
        decisions = [e.message for e in reader.events(kind="decision")]
        escalations = [m for m in decisions if m.startswith("escalated to profile")]
        assert escalations == ["escalated to profile 'strong' (rank 1, the strongest): plateaued after 3 attempts "
                               "without a 0.01 SOL gain (limit 3); llm-1 (profile 'cheap' → 'strong') gets one "
                               "turn on cpu/sleepy_relu"], decisions
        assert "escalated turn ended: the plateau is broken" in decisions
        assert decisions.index(escalations[0]) > next(i for i, m in enumerate(decisions)
                                                      if m.startswith("plateaued"))
        attempts = [a for a in reader.attempts() if a.agent_id is not None and a.state == "done"]
        assert [a.profile for a in attempts] == ["cheap"] * 3 + ["strong"]
        assert attempts[-1].gain > 0.5 and reader.problems()[0].best_attempt_id == attempts[-1].id
        (agent,) = reader.agents()
        assert agent.profile == "strong" and agent.model == "strong-model"


def test_what_one_profile_exhausted_stays_open_to_the_other(tmp_path):
    """'cheap' talks without ever writing a candidate, so its turn ends with nothing more to try; that closes the
    problem to 'cheap' agents only: the 'strong' agent, slower to start, keeps improving it in the same best."""
    chatter = text("I would need to think about this more.", usage=(1000, 200))
    better = [slow(evaluate_step(0.008 / 2 ** i, f"halved {i}"), 0.6 if i == 0 else 0.05) for i in range(4)]
    finish = slow(tools(call("finish", {"note": "as fast as it gets"}), usage=(1000, 200)), 0.2)
    problems = tmp_path / "problems"
    write_rows_problem(problems / "cpu" / "sleepy_relu", "sleepy_relu", "x * w, then ReLU, after a nap", REFERENCE,
                       rows=(64,))
    with ScriptedServer([], forever=chatter) as cheap, ScriptedServer(better, forever=finish) as strong:
        path = write_config(tmp_path / "fleet.toml", llm={"model": "unused", "api_key_env": "KF_UNUSED_KEY",
                                                          "no_progress_calls": 3},
                            fleet={"llm_agents": 2},
                            planner={"max_agents_per_problem": 2, "profile_min_attempts": 500,
                                     "plateau_attempts": 500, "escalate_plateaued": False})
        _add_two_profiles(path, cheap, strong)
        fleet = Fleet(tmp_path / "run", load_config(path), [str(problems)])
        run_dir = drive(fleet, lambda store: sum(a.profile == "strong" and a.state == "done"
                                                 for a in store.attempts()) >= 4, timeout_s=60)
    with RunReader(run_dir) as reader:
        agents = {a.name: a for a in reader.agents()}
        assert agents["llm-1"].profile == "cheap" and agents["llm-2"].profile == "strong"
        exhausted = [e for e in reader.events(kind="log") if e.message == "nothing more to try here"
                     and e.agent_id == agents["llm-1"].id]
        assert exhausted, [e.message for e in reader.events()]
        strong_attempts = [a for a in reader.attempts() if a.profile == "strong" and a.state == "done"]
        assert len(strong_attempts) >= 4 and all(a.passed for a in strong_attempts)
        # The strong agent went on after 'cheap' had exhausted the problem, and was never moved off it for that.
        assert any(a.created_at > exhausted[0].ts for a in strong_attempts)
        moved = [e.message for e in reader.events(kind="decision") if e.agent_id == agents["llm-2"].id
                 and "no longer eligible" in e.message]
        assert not moved, moved
        # 'cheap' made no attempt at all, and after it was closed to it, it was not handed the problem again.
        assert not [a for a in reader.attempts() if a.profile == "cheap"]
        assert reader.problems()[0].best_attempt_id in {a.id for a in strong_attempts}
