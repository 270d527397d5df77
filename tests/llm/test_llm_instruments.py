"""The instruments as an LLM agent calls them in a real CPU fleet run (scripted model, real pool, real
confinement): each answers with its reason or its fallback, is recorded as a tool event with its time, and the
turn's cap on device instruments holds."""

from __future__ import annotations

import pytest
from llm_fleet_helpers import GOOD_MAIN, agent_attempts, run_fleet
from llm_scripted_server import ScriptedServer, call, tools

from core.store import RunReader

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("KF_TEST_LLM_KEY", "sk-test")


def tool_answers(server: ScriptedServer) -> dict[str, str]:
    """Each tool call's answer, by the call's id, from the messages the agent sent next."""
    answers = {}
    for request in server.requests:
        for message in request["body"].get("messages", []):
            if message.get("role") == "tool":
                answers[message["tool_call_id"]] = message["content"]
    return answers


def test_each_instrument_answers_with_its_reason_or_fallback_on_the_cpu(tmp_path):
    calls = [call("profile", {"workload": 1}), call("sanitize", {}), call("assembly", {}),
             call("profile", {"workload": 7}), call("assembly", {"form": "bad"}), call("docs", {"query": "relu"})]
    script = [tools(call("set_spec", {"language": "pytorch", "entry_point": "main.py::run"}),
                    call("write_file", {"path": "main.py", "content": GOOD_MAIN})),
              *[tools(c) for c in calls],
              tools(call("finish", {"note": "looked"}))]
    with ScriptedServer(script) as server:
        run_dir = run_fleet(tmp_path, server.base_url, lambda s: len(agent_attempts(s)) >= 1)
    answers = tool_answers(server)
    profile, sanitize, assembly, bad_workload, bad_form, docs = (answers[c["id"]] for c in calls)
    assert profile.startswith("profile: ncu needs a CUDA GPU and this run's device is the CPU; fallback: per-op CPU "
                              "times from the torch profiler, workload 1")
    assert "aten::mul" in profile and "aten::relu_" in profile
    assert "aten::fill_" not in profile  # the poisoned outputs are made before the profiled calls
    assert sanitize == "sanitize: compute-sanitizer needs a CUDA GPU and this run's device is the CPU"
    assert assembly.startswith("assembly: a Python candidate's kernels are compiled when it first runs on a GPU")
    assert bad_workload.startswith("error: no runnable workload 7; valid: [0, 1]")
    assert bad_form == "error: form must be 'sass' or 'ptx'"
    with RunReader(run_dir) as reader:
        events = [e.message for e in reader.events() if e.kind == "tool"]
    assert "relu" in docs.lower()
    assert len(events) == 4, events
    assert events[0].startswith("profile (workload 1): torch profiler, no figures, ") and "on the device" in events[0]
    assert events[1].startswith("sanitize (workload 0, tool memcheck): no instrument")
    assert events[3].startswith("docs (query relu): ") and events[3].endswith(f"{len(docs)} characters")


def test_a_turn_runs_at_most_its_device_instruments(tmp_path):
    calls = [call("profile", {}), call("profile", {})]
    script = [tools(call("set_spec", {"language": "pytorch", "entry_point": "main.py::run"}),
                    call("write_file", {"path": "main.py", "content": GOOD_MAIN})),
              tools(*calls), tools(call("finish", {"note": "done"}))]
    with ScriptedServer(script) as server:
        run_fleet(tmp_path, server.base_url, lambda s: len(agent_attempts(s)) >= 1,
                  llm={"device_tools_per_turn": 1})
    first, second = (tool_answers(server)[c["id"]] for c in calls)
    assert "fallback" in first
    assert second == ("error: profile: this turn has run its 1 instruments that hold a device "
                      "([llm] device_tools_per_turn); evaluate or finish")
