"""What an LLM run costs and how its turns end, end to end: the real openai client against the scripted server, a
real Fleet on the CPU device. Every model call is recorded when it returns; budgets hold before each call and each
evaluation; loops without progress, oversized answers, duplicate candidates and a dead endpoint all end by
themselves."""

from __future__ import annotations

import time

import pytest
from llm_fleet_helpers import GOOD_MAIN, agent_attempts, log_events, resume_fleet, run_fleet
from llm_scripted_server import ScriptedServer, call, error, text, tools

from core.store import RunReader

pytestmark = pytest.mark.slow

READ_LOOP = tools(call("read_file", {"path": "solution.json"}), usage=(20000, 100))
SPEC = call("set_spec", {"language": "pytorch", "entry_point": "main.py::run", "destination_passing_style": True})


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("KF_TEST_LLM_KEY", "sk-test-limits-0123456789")
    monkeypatch.setattr("core.llm.client.BACKOFF_BASE_S", 0.05)


def _last_run_event(reader) -> str:
    return [e.message for e in reader.events(kind="run")][-1]


def _variant(n: int) -> str:
    return GOOD_MAIN + f"# variant {n}\n"


def test_a_read_loop_stops_at_the_run_token_budget(tmp_path):
    budget = 150_000
    with ScriptedServer([], forever=READ_LOOP) as server:
        run_dir = run_fleet(tmp_path, server.base_url, None, budgets={"run_tokens": budget},
                            llm={"no_progress_calls": 1000})
        counted = server.usage_sent()
    with RunReader(run_dir) as reader:
        calls = [c.call for c in reader.llm_calls()]
        recorded = reader.totals()["tokens"]
        events = [e.message for e in reader.events()]
        print(f"\nread loop: {len(calls)} calls, {recorded} tokens recorded, {counted} counted by the server, "
              f"budget {budget}; {_last_run_event(reader)}")
        assert all(c.outcome == "tool_calls" and not c.tokens_estimated for c in calls)
        assert recorded >= counted and recorded <= budget + 20_100
        assert reader.problems()[0].tokens == recorded == sum(c.tokens for c in calls)
    assert any(m.startswith("stopping: the next model call would pass the run's token budget") for m in events) \
        or any("run budget spent" in m for m in events), events


def test_a_read_loop_without_budget_ends_as_no_progress(tmp_path):
    with ScriptedServer([], forever=READ_LOOP) as server:
        run_dir = run_fleet(tmp_path, server.base_url, None)
        requests = len(server.requests)
    with RunReader(run_dir) as reader:
        assert len(reader.llm_calls()) == requests == 8  # no_progress_calls, the default
        assert _last_run_event(reader).startswith("finished: nothing left to do")
        logs = [e.message for e in reader.events(kind="log")]
    assert "llm: ending the turn, no progress: 8 model calls in a row without a new candidate" in logs, logs


def test_oversized_arguments_are_failures_that_end_the_turn(tmp_path):
    huge = tools(call("write_file", {"path": "main.py", "content": "x" * 5_000_000}))
    with ScriptedServer([], forever=huge) as server:
        run_dir = run_fleet(tmp_path, server.base_url, None)
        sizes = [r["bytes"] for r in server.requests]
    logs = log_events_of(run_dir)
    assert len(sizes) == 4 and max(sizes[1:]) < 100_000  # max_failures_in_row; the 5 MB never sent back
    assert sum(m.startswith("malformed tool call: write_file: 5000") for m in logs) == 4, logs
    assert "llm: ending the turn after 4 failed answers in a row" in logs


def test_many_writes_just_under_the_limit_cannot_make_a_request_huge(tmp_path):
    # 10 files of 190,000 characters in one answer: 1.9 MB, each call within the 200,000 limit.
    flood = tools(*[call("write_file", {"path": f"f{i}.py", "content": "x" * 190_000}) for i in range(10)])
    with ScriptedServer([flood], forever=tools(call("read_file", {"path": "f0.py"}))) as server:
        run_fleet(tmp_path, server.base_url, None)
        sizes = [r["bytes"] for r in server.requests]
        answered = server.requests[1]["body"]["messages"]
    assert sizes[0] < 100_000 and max(sizes[1:]) < 1_000_000, sizes
    results = [m["content"] for m in answered if m["role"] == "tool"]
    assert sum(r.startswith("wrote ") for r in results) == 2  # 400,000 characters in all, then refused
    assert sum("not run" in r for r in results) == 8


def log_events_of(run_dir) -> list[str]:
    with RunReader(run_dir) as reader:
        return log_events(reader)


def test_an_endpoint_failing_forever_stops_the_llm_agents_and_the_run(tmp_path):
    unavailable_s = 3.0
    started = time.monotonic()
    with ScriptedServer([], forever=error(500, "upstream exploded")) as server:
        run_dir = run_fleet(tmp_path, server.base_url, None, timeout_s=unavailable_s + 60,
                            llm={"unavailable_s": unavailable_s, "max_retries": 2},
                            fleet={"llm_agents": 2})
    took = time.monotonic() - started
    with RunReader(run_dir) as reader:
        (down,) = reader.events(kind="llm")
        calls = [c.call for c in reader.llm_calls()]
        last = _last_run_event(reader)
        print(f"\n500 forever: the run ended by itself after {took:.1f} s ({len(calls)} tries recorded): {last}")
        assert down.message.startswith(f"llm endpoint {server.base_url} unavailable for 3 s (last error: HTTP 500")
        assert down.message.endswith("upstream exploded): LLM agents stopped")
        assert {a.state for a in reader.agents()} == {"stopped"}
        assert last.startswith("finished: nothing left to do")
        assert calls and {c.outcome for c in calls} == {"retry", "error"} and not any(c.tokens for c in calls)
        assert calls[0].detail == "HTTP 500: upstream exploded; retry 1/2"
    assert took < unavailable_s + 60


def test_no_request_after_a_5_mb_answer_exceeds_1_mb(tmp_path):
    script = [text("x" * 5_000_000),
              tools(SPEC, call("write_file", {"path": "main.py", "content": GOOD_MAIN})),
              tools(call("evaluate", {"workloads": [0]})),
              tools(call("finish", {"note": "after the flood"}))]
    with ScriptedServer(script) as server:
        run_dir = run_fleet(tmp_path, server.base_url, lambda s: len(agent_attempts(s)) >= 2)
        sizes = [r["bytes"] for r in server.requests]
        history = server.requests[1]["body"]["messages"]
    print(f"\nafter a 5 MB answer: the largest later request is {max(sizes[1:])} bytes")
    assert len(sizes) >= 4 and max(sizes[1:]) < 1_000_000
    cut = next(m for m in history if m["role"] == "assistant")
    assert len(cut["content"]) < 65_536 + 100 and "more characters cut" in cut["content"]
    logs = log_events_of(run_dir)
    assert any(m.startswith("oversized answer: 5000000 characters (max_answer_chars 65536)") for m in logs), logs
    with RunReader(run_dir) as reader:
        assert [c.call.outcome for c in reader.llm_calls()][:1] == ["garbage"]
        assert [a.status for a in agent_attempts(reader)] == ["PASSED", "PASSED"]


def test_a_duplicate_candidate_is_not_evaluated_again(tmp_path):
    script = [tools(SPEC, call("write_file", {"path": "main.py", "content": GOOD_MAIN}),
                    call("evaluate", {"workloads": [0]})),
              tools(call("evaluate", {"workloads": [0]})),  # the same candidate, the same workloads
              tools(call("evaluate")),  # every workload: not covered by the partial one
              tools(call("read_file", {"path": "main.py"}), call("evaluate", {"workloads": [1]})),
              tools(call("finish", {"note": "nothing new"}))]  # equals the full one: the turn just ends
    with ScriptedServer(script) as server:
        run_dir = run_fleet(tmp_path, server.base_url,
                            lambda s: any(m.startswith("llm: turn finished, the candidate equals") for m in
                                          log_events(s)))
        results = [[m["content"] for m in r["body"]["messages"] if m["role"] == "tool"] for r in server.requests]
    with RunReader(run_dir) as reader:
        partial, full = agent_attempts(reader)
        assert not partial.full and full.full and partial.content_hash == full.content_hash != ""
        assert len(agent_attempts(reader)) == 2
        logs = log_events(reader)
    assert results[2][-1].startswith(f"equals attempt {partial.id}: PASSED")
    assert "not evaluated again" in results[2][-1]
    assert results[4][-1].startswith(f"equals attempt {full.id}: PASSED")
    assert f"llm: turn finished, the candidate equals attempt {full.id}: nothing new" in logs, logs


def test_finish_line_ends_the_turn_in_tools_mode(tmp_path):
    script = [tools(SPEC, call("write_file", {"path": "main.py", "content": GOOD_MAIN}), call("evaluate")),
              text("FINISH: the in-place version is as fast as it gets")]
    with ScriptedServer(script) as server:
        run_dir = run_fleet(tmp_path, server.base_url,
                            lambda s: any(m.startswith("llm: turn finished") for m in log_events(s)))
        assert "tools" in server.requests[1]["body"]
    logs = log_events_of(run_dir)
    assert "llm: turn finished: the in-place version is as fast as it gets" in logs
    assert not any(m.startswith("garbage answer") for m in logs), logs
    with RunReader(run_dir) as reader:
        assert [c.call.outcome for c in reader.llm_calls()][:2] == ["tool_calls", "answer"]


def test_totals_and_budgets_survive_a_resume(tmp_path):
    budget, usage = 40_000, (10_000, 200)
    flow = [tools(SPEC, call("write_file", {"path": "main.py", "content": GOOD_MAIN}), usage=usage),
            tools(call("finish", {"note": "first start"}), usage=usage)]
    with ScriptedServer(flow) as server:
        run_dir = run_fleet(tmp_path, server.base_url, lambda s: len(agent_attempts(s)) >= 1,
                            budgets={"run_tokens": budget}, llm={"max_tokens": 1000, "no_progress_calls": 100})
        with RunReader(run_dir) as reader:
            before = reader.llm_calls()
            spent = reader.totals()["tokens"]
        server.forever = tools(call("read_file", {"path": "solution.json"}), usage=usage)
        resume_fleet(run_dir, None)
        counted = server.usage_sent()
    with RunReader(run_dir) as reader:
        calls = reader.llm_calls()
        total = reader.totals()["tokens"]
        print(f"\nresume: {spent} tokens before, {total} after (budget {budget}, the server counted {counted})")
        assert spent == 20_400 and calls[:len(before)] == before and len(calls) > len(before)
        assert reader.problems()[0].tokens == total == sum(c.call.tokens for c in calls) == counted
        # Had the resumed run counted from zero, it would have spent up to the budget on its own.
        assert total <= budget + 10_200
        assert any(m.startswith("stopping: the next model call would pass the run's token budget")
                   for m in log_events(reader)) or "run budget spent" in _last_run_event(reader)


def test_an_attempt_budget_is_never_overshot(tmp_path):
    writes = []
    for n in range(5):
        writes += [call("write_file", {"path": "main.py", "content": _variant(n)}), call("evaluate")]
    with ScriptedServer([tools(SPEC, *writes)]) as server:
        run_dir = run_fleet(tmp_path, server.base_url, None, budgets={"run_attempts": 3})
        assert server.consumed == 1
    with RunReader(run_dir) as reader:
        assert len(reader.attempts()) == reader.totals()["attempts"] == 3  # the seed and two of the five
        assert reader.problems()[0].attempts == 3
        logs = log_events(reader)
    assert any(m.startswith("stopping: the run's attempt budget is reached (3 of 3 attempts") for m in logs), logs


def test_a_model_that_ends_every_turn_at_once_is_rested_not_spun(tmp_path):
    """Every answer is FINISH alone: each turn begins no attempt, so the agent rests before the next, doubling the
    rest each time (tick 0.1 s: 0.2, 0.4, 0.8, 1.6, 3.2 s): a handful of calls in the 6 s after the first, not
    hundreds."""
    with ScriptedServer([], forever=text("FINISH: nothing to try")) as server:
        def six_seconds_after_the_first_call(store) -> bool:
            return bool(server.requests) and time.monotonic() - server.requests[0]["at"] > 6.0

        run_fleet(tmp_path, server.base_url, six_seconds_after_the_first_call, timeout_s=60)
    calls = [r for r in server.requests if r["at"] - server.requests[0]["at"] <= 6.0]
    assert 3 <= len(calls) <= 8, [round(r["at"] - server.requests[0]["at"], 2) for r in server.requests]
