"""The planner model in a real fleet run on the CPU device: the real openai client asks a scripted server, whose
planner answers become the controls a person gives, applied in the store with their reasons as decision events;
a garbage answer changes nothing and the log says why."""

from __future__ import annotations

import json

import pytest
from llm_fleet_helpers import drive, write_config, write_problem
from llm_scripted_server import ScriptedServer, Step, text

from core.config import load_config
from core.fleet.orchestrator import Fleet
from core.llm.planner import MARKER
from core.store import RunReader

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("KF_TEST_LLM_KEY", "sk-test-planner-0123456789")


class RoutedServer(ScriptedServer):
    """A ScriptedServer whose requests with a system prompt starting with a route's marker take that route's
    steps (then wait, as an exhausted script does); every other request takes the main script."""

    def __init__(self, script: list[Step], routes: dict[str, list[Step]]):
        super().__init__(script)
        self.routes = {marker: list(steps) for marker, steps in routes.items()}
        self.routed: dict[str, list[dict]] = {marker: [] for marker in routes}

    def _take(self, body, size, authorization):
        messages = body.get("messages") or [{}]
        system = messages[0].get("content") if isinstance(messages[0], dict) else ""
        for marker, steps in self.routes.items():
            if isinstance(system, str) and system.startswith(marker):
                with self._lock:
                    self.routed[marker].append(body)
                    return steps.pop(0) if steps else None
        return super()._take(body, size, authorization)


def _run(tmp_path, server, until, **sections):
    problems = tmp_path / "problems"
    write_problem(problems, "alpha")
    write_problem(problems, "beta")
    config = load_config(write_config(tmp_path / "fleet.toml", llm={"base_url": server.base_url}, **sections))
    return drive(Fleet(tmp_path / "run", config, [str(problems)]), until, 60.0)


def _planner_events(store) -> list:
    return [e for e in store.events() if "planner model" in e.message]


def test_planner_model_sets_priority_and_pin_through_controls_and_garbage_changes_nothing(tmp_path):
    cut_off = '{"actions": [{"command": "pin_problem", "target": "cpu/alpha", "reason": "cut o'
    plan = json.dumps({"actions": [
        {"command": "set_priority", "target": "cpu/alpha", "value": 4, "reason": "alpha has the largest SOL gap"},
        {"command": "pin_problem", "target": "beta", "reason": "beta gains fastest per GPU-second"},
        {"command": "pin_problem", "target": "cpu/gamma", "reason": "no such problem"},
        {"command": "stop_run", "target": "", "reason": "enough"},
    ]})
    planner_script = [text(cut_off, usage=(900, 30)), text("Here is my plan:\n" + plan, usage=(1000, 80))]

    def applied(store) -> bool:
        rows = {p.key: p for p in store.problems()}
        agent = store.agents()[0]
        return rows["cpu/beta"].pinned and agent.problem_id == rows["cpu/beta"].id

    # The LLM agent's own requests get no answer: only the planner's are scripted.
    with RoutedServer([], {MARKER: planner_script}) as server:
        run_dir = _run(tmp_path, server, applied, planner={"tick_s": 0.1, "mode": "llm", "llm_interval_s": 0.3,
                                                           "llm_max_actions": 3})
    with RunReader(run_dir) as reader:
        rows = {p.key: p for p in reader.problems()}
        alpha, beta = rows["cpu/alpha"], rows["cpu/beta"]
        assert alpha.priority == 4 and not alpha.pinned  # the cut-off answer's pin of alpha was never applied
        assert beta.pinned and beta.priority == 0
        events = _planner_events(reader)
        garbage = next(e for e in events if e.message.startswith("planner model: nothing applied"))
        assert garbage.message.startswith("planner model: nothing applied: no JSON actions in the answer: "
                                          "'{\"actions\": [{\"command\": \"pin_problem\"")
        decisions = [e for e in events if e.kind == "decision"]
        assert all(e.id > garbage.id for e in decisions)
        assert [(e.problem_id, e.message) for e in decisions] == [
            (alpha.id, "planner model: alpha has the largest SOL gap (set_priority cpu/alpha 4: priority 0 -> 4)"),
            (beta.id, "planner model: beta gains fastest per GPU-second (pin_problem cpu/beta: pinned)")]
        refused = [e.message for e in events if e.kind == "log" and "refused" in e.message]
        assert refused == ["planner model: refused pin_problem cpu/gamma: no problem 'cpu/gamma' in this run",
                           "planner model: refused stop_run: not a planner command (a person's)"]
        # The run ended because the test stopped it, not by the model's stop_run.
        assert [e.message for e in reader.events(kind="run")][-1] == "stopped: test: condition met"
        # The rules planner, steered by the pin, put the agent on beta, with its own reason.
        agent = reader.agents()[0]
        assert agent.problem_id == beta.id
        assert any(e.kind == "decision" and e.agent_id == agent.id and e.problem_id == beta.id
                   for e in reader.events())
        # Both planner calls are recorded on no agent and no problem, and counted in the run's totals.
        calls = [c for c in reader.llm_calls() if c.agent_id is None]
        assert [(c.problem_id, c.call.outcome, c.call.tokens) for c in calls] == [(None, "garbage", 930),
                                                                                (None, "answer", 1080)]
        assert calls[0].call.detail.startswith("planner: no JSON actions")
        assert reader.totals()["tokens"] >= 2010
    # The planner read the grid: both problems with their figures, and the agent.
    prompt = server.routed[MARKER][0]["messages"][1]["content"]
    assert "cpu/alpha | " in prompt and "cpu/beta | " in prompt and "llm-1 | llm |" in prompt
    assert server.routed[MARKER][0]["model"] == "scripted-model"
