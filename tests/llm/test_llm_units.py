"""The LLM package's pieces on their own: the client against the scripted server (retries, cost, the shared
concurrency limit, the key), history trimming, the text protocol parser, the workspace and the brief."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from llm_fleet_helpers import GOOD_MAIN, write_problem
from llm_scripted_server import ScriptedServer, call, error, slow, text, tools

from core.config.schema import LlmConfig
from core.llm import LlmClient, LlmDown, LlmUnavailable
from core.llm.agent import TRIM_NOTE, trim_history
from core.llm.brief import problem_brief, system_prompt
from core.llm.client import backoff_s, retry_after_s
from core.llm.tools import Workspace, WorkspaceError, parse_text_reply, verdict_table
from core.problem import load_problems
from core.store.model import AttemptRow, ProblemRow, WorkloadInfo

SECRET = "sk-unit-SECRET-abcdef0123456789"


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("KF_UNIT_KEY", SECRET)
    monkeypatch.setattr("core.llm.client.BACKOFF_BASE_S", 0.01)


async def _chat_once(cfg, *args, **kwargs):
    """One chat on a client of its own, closed before the event loop ends."""
    client = LlmClient(cfg)
    try:
        return await client.chat(*args, **kwargs)
    finally:
        await client.aclose()


def _cfg(server, **kw) -> LlmConfig:
    return LlmConfig(base_url=server.base_url, model="m", api_key_env="KF_UNIT_KEY",
                     **{"timeout_s": 5.0, "max_retries": 2, **kw})


def test_usage_becomes_dollars_and_tool_calls_come_back_raw():
    script = [tools(call("evaluate", '{"workloads": [0'), usage=(2_000_000, 500_000))]
    with ScriptedServer(script) as server:
        cfg = _cfg(server, price_input_per_mtok=1.5, price_output_per_mtok=6.0)
        reply = anyio.run(lambda: _chat_once(cfg, [{"role": "user", "content": "hi"}]))
    assert reply.tokens == 2_500_000 and not reply.call.tokens_estimated
    assert reply.call.dollars == pytest.approx(2 * 1.5 + 0.5 * 6.0)
    assert reply.tool_calls[0].name == "evaluate" and reply.tool_calls[0].arguments == '{"workloads": [0'
    assert reply.message["tool_calls"][0]["function"]["arguments"] == '{"workloads": [0'


def test_missing_usage_is_estimated():
    with ScriptedServer([text("x" * 400, usage=None)]) as server:
        reply = anyio.run(lambda: _chat_once(_cfg(server), [{"role": "user", "content": "y" * 800}]))
    assert reply.call.tokens_estimated and reply.call.completion_tokens == 100 and reply.call.prompt_tokens > 200


def test_a_refused_request_is_not_retried_and_never_shows_the_key():
    with ScriptedServer([error(401, "invalid api key")] * 3) as server:
        with pytest.raises(LlmUnavailable) as caught:
            anyio.run(lambda: _chat_once(_cfg(server), [{"role": "user", "content": "hi"}]))
        assert len(server.requests) == 1 and server.requests[0]["authorization"] == f"Bearer {SECRET}"
    assert "401" in str(caught.value) or "invalid api key" in str(caught.value)
    assert SECRET not in str(caught.value) and SECRET not in repr(LlmClient(_cfg(server)))


def test_retries_are_capped_and_reported():
    seen = []
    with ScriptedServer([error(503)] * 5) as server:
        with pytest.raises(LlmUnavailable, match="HTTP 503 after 3 tries"):
            anyio.run(lambda: _chat_once(_cfg(server), [{"role": "user", "content": "hi"}], on_retry=seen.append))
        assert len(server.requests) == 3
    assert [s.split(" in ")[0] for s in seen] == ["llm: HTTP 503; retry 1/2", "llm: HTTP 503; retry 2/2"]


def test_every_try_is_a_call_record():
    records = []
    script = [error(503, "busy"), tools(call("read_file", {"path": "main.py"}), usage=(300, 20))]
    with ScriptedServer(script) as server:
        reply = anyio.run(lambda: _chat_once(_cfg(server, price_input_per_mtok=1.0),
                                             [{"role": "user", "content": "hi"}], on_call=records.append))
    (retry,) = records  # the failed try, as it failed; the answer's record comes back with the reply
    assert retry.outcome == "retry" and retry.detail == "HTTP 503: busy; retry 1/2" and retry.tokens == 0
    assert retry.latency_s > 0 and not retry.answered
    answer = reply.call
    assert (answer.outcome, answer.prompt_tokens, answer.completion_tokens, answer.tokens_estimated) == \
        ("tool_calls", 300, 20, False)
    assert answer.detail == "read_file" and answer.dollars == pytest.approx(300 / 1e6) and answer.answered
    with ScriptedServer([text("x" * 400, usage=None)]) as server:
        estimated = anyio.run(lambda: _chat_once(_cfg(server), [{"role": "user", "content": "y"}])).call
    assert estimated.outcome == "answer" and estimated.tokens_estimated and estimated.completion_tokens == 100


def test_an_endpoint_failing_for_unavailable_s_is_down_for_good():
    records = []
    with ScriptedServer([], forever=error(500, "upstream exploded")) as server:
        cfg = _cfg(server, max_retries=1, unavailable_s=0.3)

        async def main():
            client = LlmClient(cfg)
            try:
                with pytest.raises(LlmUnavailable) as first:
                    await client.chat([{"role": "user", "content": "hi"}], on_call=records.append)
                assert not isinstance(first.value, LlmDown) and 0 < client.seconds_until_down() <= 0.3
                await anyio.sleep(0.3)
                with pytest.raises(LlmDown) as down:
                    await client.chat([{"role": "user", "content": "hi"}], on_call=records.append)
                tried = len(server.requests)
                with pytest.raises(LlmDown):  # no more tries
                    await client.chat([{"role": "user", "content": "hi"}], on_call=records.append)
                assert len(server.requests) == tried
                assert client.announce_down() and not client.announce_down()
                return str(down.value)
            finally:
                await client.aclose()

        message = anyio.run(main)
    assert message == (f"llm endpoint {server.base_url} unavailable for 0.3 s (last error: HTTP 500: "
                       "upstream exploded)")
    assert [r.outcome for r in records] == ["retry", "error", "error"]


def test_an_answer_ends_the_failing_streak():
    with ScriptedServer([error(500), text("ok")]) as server:
        async def main():
            client = LlmClient(_cfg(server, max_retries=0, unavailable_s=60))
            try:
                with pytest.raises(LlmUnavailable):
                    await client.chat([{"role": "user", "content": "hi"}])
                assert client.seconds_until_down() is not None
                await client.chat([{"role": "user", "content": "hi"}])
                return client.seconds_until_down(), client.down_reason
            finally:
                await client.aclose()

        assert anyio.run(main) == (None, "")


def test_connection_refused_is_unavailable():
    with ScriptedServer([]) as server:
        cfg = _cfg(server, max_retries=1)
    with pytest.raises(LlmUnavailable, match="connection error after 2 tries"):
        anyio.run(lambda: _chat_once(cfg, [{"role": "user", "content": "hi"}]))


def test_one_concurrency_limit_shared_by_the_run():
    script = [slow(text("ok"), 0.3) for _ in range(3)]
    with ScriptedServer(script) as server:
        cfg = _cfg(server, concurrency=1)

        async def main():
            first, second = LlmClient.shared(cfg), LlmClient.shared(cfg)
            assert first is second
            async with anyio.create_task_group() as tg:
                for client in (first, second, LlmClient.shared(cfg)):
                    tg.start_soon(client.chat, [{"role": "user", "content": "hi"}])
            await LlmClient.close_shared()
            return first

        shared = anyio.run(main)
        assert server.max_in_flight == 1 and server.consumed == 3
        assert anyio.run(lambda: _shared_in_new_run(cfg)) is not shared  # a new run (event loop), a new client


async def _shared_in_new_run(cfg):
    client = LlmClient.shared(cfg)
    await LlmClient.close_shared()
    return client


def test_retry_after_and_backoff():
    class Response:
        def __init__(self, headers):
            self.headers = headers

    class Err(Exception):
        def __init__(self, headers):
            self.response = Response(headers)

    assert retry_after_s(Err({"retry-after": "2"})) == 2.0
    assert retry_after_s(Err({"retry-after-ms": "250"})) == 0.25
    assert retry_after_s(Err({})) is None and retry_after_s(ValueError()) is None
    assert 0 <= retry_after_s(Err({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})) < 1
    delays = [backoff_s(n) for n in range(1, 30)]
    assert all(d <= 30.0 for d in delays) and delays[0] < delays[5]


def test_trim_history_keeps_system_brief_and_whole_latest_turns():
    head = [{"role": "system", "content": "s" * 400}, {"role": "user", "content": "b" * 400}]
    turns = []
    for i in range(10):
        turns.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]})
        turns.append({"role": "tool", "tool_call_id": f"c{i}", "content": "x" * 2000})
    kept = trim_history(head + turns, budget_tokens=1800)
    assert kept[:2] == head and kept[2]["content"] == TRIM_NOTE
    rest = kept[3:]
    assert rest == turns[-len(rest):] and rest[0]["role"] == "assistant" and 2 <= len(rest) < len(turns)
    assert trim_history(head + turns, budget_tokens=10**6) == head + turns
    again = trim_history(kept, budget_tokens=1800)
    assert again == kept


def test_parse_text_reply():
    reply = parse_text_reply("Plan.\n```python path=main.py\nA = 1\n```\n```cuda file=\"k/x.cu\"\n__global__\n```\n"
                             "```\nno path\n```\nFINISH: done it\n")
    assert reply.files == (("main.py", "A = 1\n"), ("k/x.cu", "__global__\n")) and reply.blocks == 3
    assert reply.finish_note == "done it"
    assert parse_text_reply("```python\nFINISH: inside code\n```").finish_note is None
    assert parse_text_reply("just words").files == () and parse_text_reply("").blocks == 0


def test_workspace_paths_and_spec():
    ws = Workspace()
    for bad in ("../x.py", "/etc/passwd", "a/../../b.py", "", "kernelfleet_tunables.py", "a\\b.py"):
        with pytest.raises(WorkspaceError):
            ws.write(bad, "x = 1")
    with pytest.raises(WorkspaceError, match="no files"):
        ws.solution("n", "d", "a")
    ws.write("./main.py", GOOD_MAIN)
    assert list(ws.files) == ["main.py"]
    ws.write("solution.json", json.dumps({"spec": {"languages": ["triton"], "entry_point": "main.py::run"},
                                          "sources": [{"path": "util.py", "content": "B = 2\n"}]}))
    solution = ws.solution("n", "d", "a")
    assert solution.spec.languages[0].value == "triton" and solution.paths == ("main.py", "util.py")
    ws.set_spec("pytorch", "main.py::run", False)
    assert ws.solution("n", "d", "a").spec.destination_passing_style is False
    assert "util.py" in ws.read("solution.json")


def test_brief_and_system_prompt(tmp_path):
    problem = load_problems([str(write_problem(tmp_path))]).problems[0]
    row = ProblemRow(1, "cpu/scaled_relu", "scaled_relu", "cpu", str(problem.path), "", 0, False, False, "active",
                     3, 2.5, None, 1, 1.0, None, 3, 0, 0, 0, 0.0, 0.0, 0.0, None,
                     (WorkloadInfo(0, "rows=64", 0.0123, None), WorkloadInfo(1, "rows=256", 0.05, 0.001)))

    def attempt(i, agent, status, speedup=None, note="", reason="", diff=""):
        return AttemptRow(i, 1, agent, None, "done", 0.0, 1.0, "pytorch", {}, diff, {}, note, None, None, None,
                          status, reason, speedup=speedup)

    best = attempt(3, 7, "PASSED", 2.5, "vectorized", diff="+" + "y" * 5000)
    history = [attempt(1, None, "PASSED", 1.0, "seed"), attempt(2, 8, "INCORRECT_NUMERICAL", reason="bad\nrow"), best]
    brief = problem_brief(problem, row, best, history, agent_id=7, spec={"languages": ["pytorch"]},
                          files=["main.py"], sources={"main.py": GOOD_MAIN})
    assert "torch.relu(x * w)" in brief and "rows: var" in brief and "width: const = 64" in brief
    assert "| w | rows | T_b | T_sol | bound | best | T_b/best |" in brief
    assert "| 0 | 64 | 0.0123 | - | - | - | - |" in brief and "| 1 | 256 | 0.05 | 0.001 | - | - | - |" in brief
    assert "speedup 2.5x" in brief and "more characters" in brief and len(brief) < 12000
    assert "- 2 by agent 8: INCORRECT_NUMERICAL (bad row)" in brief
    assert "- 3 by you: PASSED 2.5x; note: vectorized" in brief
    assert "path=main.py" in brief
    protocol = (Path(__file__).resolve().parents[2] / "protocol.md").read_text()
    assert system_prompt("tools").startswith(protocol.rstrip()) and "finish" in system_prompt("tools")
    assert "FINISH:" in system_prompt("text")
    limits = system_prompt("tools", LlmConfig(max_steps=12, no_progress_calls=5))
    assert limits.startswith(system_prompt("tools")) and "after 12 model calls" in limits
    assert "after 5 model calls in a row without a new distinct candidate" in limits


def test_verdict_table():
    attempt = AttemptRow(5, 1, 2, None, "done", 0.0, 1.0, "pytorch", {}, "", {}, "", None, None,
                         {"workloads": [{"index": 0, "status": "PASSED", "timing": {"median_ms": 0.01}},
                                        {"index": 1, "status": "INCORRECT_NUMERICAL", "reason": "mismatch",
                                         "errors": {"max_abs_error": 0.5, "max_rel_error": 1.0,
                                                    "matched_ratio": 0.5}}]},
                         "INCORRECT_NUMERICAL", "workload 1: mismatch")
    table = verdict_table(attempt, (WorkloadInfo(0, "rows=64", 0.02, None), WorkloadInfo(1, "rows=256", 0.05, None)))
    lines = table.splitlines()
    assert lines[0] == "attempt 5: INCORRECT_NUMERICAL: workload 1: mismatch"
    assert lines[2] == "0 | rows=64 | PASSED | 0.01 ms | 0.02 ms | - | "
    assert lines[3].startswith("1 | rows=256 | INCORRECT_NUMERICAL | - | 0.05 ms | - | mismatch max_abs 0.5")
