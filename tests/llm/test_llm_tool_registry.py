"""LLM tools are a registry (core.llm.toolkit.register): a new tool is one module (tests/support/llm_tool_example.py)
plus one ``register`` line; the model is offered it and its answers reach the model in a real run against a local
scripted OpenAI-compatible server."""

from __future__ import annotations

import pytest
from llm_fleet_helpers import run_fleet
from llm_scripted_server import ScriptedServer, call, tools
from llm_tool_example import WORKLOAD_TABLE

from core.llm import toolkit
from core.llm.tools import registry

pytestmark = pytest.mark.slow


@pytest.fixture
def workload_table():
    toolkit.register(WORKLOAD_TABLE)
    yield
    toolkit.unregister(WORKLOAD_TABLE.name)


def test_a_registered_tool_is_offered_and_answers_in_a_run(tmp_path, workload_table):
    script = [tools(call("workload_table", {"limit": 1}), call("workload_table", {"limit": "all"})),
              tools(call("finish", {"note": "read the workloads"}))]
    with ScriptedServer(script) as server:
        run_fleet(tmp_path, server.base_url, lambda store: len(server.requests) >= 2)
        offered = [t["function"]["name"] for t in server.requests[0]["body"]["tools"]]
        assert "workload_table" in offered and "write_file" in offered
        messages = server.requests[1]["body"]["messages"]
        answers = [m["content"] for m in messages if m["role"] == "tool"]
    assert answers[0] == "2 workloads of scaled_relu; best attempt 1:\n- workload 0: rows=64", answers
    assert answers[1].startswith("error: limit must be a positive integer"), answers


def test_unregistered_it_is_gone():
    assert "workload_table" not in registry() and "evaluate" in registry()
