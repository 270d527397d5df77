"""Context spent where it counts (core.llm.context): requests counted by the server's own usage figures, tool schemas
included; old steps dropped for a bounded record of what they tried and measured; the head (system prompt, brief)
a stable prefix; and an evaluation's compact per-workload rows. Then one long turn end to end: 60 model calls of
kernel-sized writes and evaluations against a scripted server that counts tokens its own way and refuses a request
over the window."""

from __future__ import annotations

import json
import math
import re

import pytest
from llm_fleet_helpers import GOOD_MAIN, agent_attempts, run_fleet
from llm_scripted_server import ScriptedServer, Step, call, completion, text

from core.llm.context import (ESTIMATE_MARGIN, MAX_LINE_CHARS, RECORD_INTRO, REFILL, TRIM_NOTE, History, StepRecord,
                              TokenMeter, action_line, attempt_summary, render_record, request_parts, step_record)
from core.llm.toolkit import ToolResult
from core.llm.tools import progress_table, tool_schemas
from core.store import RunReader
from core.store.model import AttemptRow, WorkloadInfo

SERVER_CHARS_PER_TOKEN = 2.9  # the scripted server's own tokenizer: code in JSON


def server_tokens(messages: list[dict], tool_list: list[dict] | None) -> int:
    return math.ceil(len(json.dumps(messages + list(tool_list or []))) / SERVER_CHARS_PER_TOKEN)


def attempt(i: int, status: str = "PASSED", speedup: float | None = 1.5, times: dict | None = None,
            reason: str = "") -> AttemptRow:
    return AttemptRow(i, 1, 2, None, "done", 0.0, 1.0, "cuda_cpp", {}, "", {}, "", None, None, None, status, reason,
                      speedup=speedup, times_ms=times if times is not None else {0: 0.5, 1: 2.0})


def kernel(n: int, lines: int = 150) -> str:
    """About 9,000 characters of kernel-like source, different for each ``n``."""
    body = "\n".join(f"    acc[{i % 8}] = fmaf(a[{i} * stride + {n}], b[{i}], acc[{i % 8}]);  // unrolled {i}"
                     for i in range(lines))
    return f"// variant {n}\n__global__ void k(const float* a, const float* b, float* acc, int stride) {{\n{body}\n}}\n"


# ---------------------------------------------------------------- the meter


def test_the_meter_is_exact_on_what_the_server_counted_and_estimates_the_rest():
    head = [{"role": "system", "content": "protocol " * 500}, {"role": "user", "content": "brief " * 300}]
    schemas = tool_schemas()
    parts = request_parts(head, schemas)
    assert parts[0] == json.dumps(schemas) and len(parts) == 3  # the tool schemas are counted
    fresh = TokenMeter()
    assert fresh.count(parts) == math.ceil(sum(map(len, parts)) / 3.0 * ESTIMATE_MARGIN)
    meter = fresh.observe(parts, 4000)
    assert meter.count(parts) == 4000 and meter.chars_per_token == pytest.approx(sum(map(len, parts)) / 4000)
    grown = request_parts([*head, {"role": "assistant", "content": "x" * 1000}], schemas)
    appended = len(grown[-1])
    assert meter.count(grown) == 4000 + math.ceil(appended / meter.chars_per_token * ESTIMATE_MARGIN)
    changed = request_parts([head[0], {"role": "user", "content": "another brief"}], schemas)
    # Not an extension of the counted request: estimated whole, at the ratio the server's count gave.
    assert meter.count(changed) == math.ceil(sum(map(len, changed)) / meter.chars_per_token * ESTIMATE_MARGIN)
    assert meter.observe(parts, 0) is meter  # a server that reports nothing teaches nothing
    assert fresh.observe(parts, 1).chars_per_token == 6.0  # odd usage figures: new text is still counted


# ---------------------------------------------------------------- trimming and the record


def _turn(history: History, n: int, content: str) -> AttemptRow:
    """One model answer as the agent records it: a whole-file write and an evaluation, with their results."""
    step = history.answer({"role": "assistant", "content": f"Try {n}: unroll more", "tool_calls": [
        {"id": f"w{n}", "type": "function",
         "function": {"name": "write_file", "arguments": json.dumps({"path": "k.cu", "content": content})}},
        {"id": f"e{n}", "type": "function", "function": {"name": "evaluate", "arguments": "{}"}}]})
    done = attempt(100 + n, times={0: 1.0 / n, 1: 4.0 / n}, speedup=0.1 * n)
    history.add({"role": "tool", "tool_call_id": f"w{n}", "content": f"wrote k.cu ({len(content)} characters)"})
    history.add({"role": "tool", "tool_call_id": f"e{n}", "content": f"attempt {done.id}: PASSED\n" + "row\n" * 50})
    history.note(step_record(step, f"Try {n}: unroll more", [
        action_line("write_file", {"path": "k.cu", "content": content}),
        action_line("evaluate", {}, ToolResult("", attempt=done))], [done]))
    return done


def test_a_long_turn_stays_within_the_window_by_the_servers_count_and_records_every_attempt():
    budget = 20_000
    head = [{"role": "system", "content": "protocol " * 2000}, {"role": "user", "content": "brief " * 1000}]
    history, meter, schemas = History(list(head)), TokenMeter(), tool_schemas()
    counts, evaluated, sent = [], [], []
    for n in range(1, 61):
        history.fit(meter, schemas, budget)
        messages = history.messages()
        counts.append(server_tokens(messages, schemas))
        sent.append(messages)
        meter = meter.observe(request_parts(messages, schemas), counts[-1])  # the answer's usage
        evaluated.append(_turn(history, n, kernel(n)))
    assert max(counts) <= budget and history.dropped > 30, (max(counts), history.dropped)
    assert all(m[:2] == head for m in sent)  # system prompt and brief: the same bytes in every request
    # A trim leaves room (REFILL): a good share of the requests extend the one before whole, for prompt caching.
    assert min(counts[10:]) < REFILL * budget
    assert sum(b[:len(a)] == a for a, b in zip(sent, sent[1:])) >= 12
    record = history.messages()[2]
    assert record["role"] == "user" and record["content"].startswith(TRIM_NOTE + "\n" + RECORD_INTRO)
    shown = "\n".join(m["content"] or "" for m in history.messages())
    for done in evaluated:
        assert f"attempt {done.id}" in shown, done.id
    assert "- step 1: " in record["content"] and "attempt 101 (cuda_cpp): PASSED, 2 ms geomean, 0.1x over T_b" \
        in record["content"]


def test_whole_file_writes_replaced_later_lose_their_content_before_any_step_is_dropped():
    history = History([{"role": "system", "content": "s"}, {"role": "user", "content": "b"}])
    for n in (1, 2, 3):
        _turn(history, n, kernel(n))
    whole = history.count(TokenMeter(), None)
    assert history.fit(TokenMeter(), None, int(whole * 0.9))
    assert history.dropped == 0 and len(history.exchanges) == 3  # the superseded contents were enough
    writes = [json.loads(m["tool_calls"][0]["function"]["arguments"]) for e in history.exchanges
              for m in e.messages if m.get("tool_calls")]
    assert writes[0] == {"path": "k.cu", "content_omitted": f"{len(kernel(1))} characters, replaced by a later "
                                                            "write_file of k.cu"}
    assert "content_omitted" in writes[1] and writes[2]["content"] == kernel(3)


def test_a_latest_answer_too_large_on_its_own_is_cut():
    history = History([{"role": "system", "content": "s"}, {"role": "user", "content": "b"}])
    _turn(history, 1, "x" * 100_000)
    assert history.fit(TokenMeter(), None, 5_000)
    assert history.count(TokenMeter(), None) <= 5_000
    (assistant, *_) = history.exchanges[-1].messages
    assert "cut from the history" in assistant["tool_calls"][0]["function"]["arguments"]


def test_the_record_is_bounded_and_keeps_a_line_for_every_attempt():
    def measured(n: int) -> str:
        return f"attempt {n}: PASSED, 0.5 ms geomean"

    # Odd steps write and evaluate, even ones only read.
    records = [StepRecord(n, f"write_file(path=k.cu, content=<9000 chars>); evaluate() -> {measured(n)} " + "x" * 150,
                          (measured(n),)) if n % 2 else StepRecord(n, "read_file(path=k.cu) " + "x" * 150)
               for n in range(1, 201)]
    text = render_record(records, limit=6000)
    lines = text.splitlines()
    assert lines[:2] == [TRIM_NOTE, RECORD_INTRO]
    quiet = re.fullmatch(r"- (\d+) steps up to step (\d+) that evaluated nothing \(reads, writes, builds\) are not "
                         r"listed", lines[2])
    whole = [line for line in lines if "x" * 150 in line]  # the newest steps keep their whole line
    shrunk = 200 - len(whole)  # the steps before shrank: the even ones, which evaluated nothing, to the count
    assert whole == [r.line() for r in records[shrunk:]] and 150 < shrunk < 200
    assert int(quiet.group(1)) == shrunk // 2 and int(quiet.group(2)) in (shrunk, shrunk - 1)
    for n in range(1, 201, 2):
        assert measured(n) in text, n
    assert len(text) < 6000 + 100 * 45  # the limit, plus the short lines of the attempts it cannot drop
    short = render_record(records[:3], limit=6000)
    assert short.splitlines()[2:] == [r.line() for r in records[:3]]  # under the limit: every step whole
    assert render_record([]) == TRIM_NOTE
    # A step of three evaluations: its line is cut, and the attempts the cut lost get a line each.
    evaluated = [attempt(n) for n in (1, 2, 3)]
    busy = step_record(7, "Three tile sizes", [action_line("evaluate", {"workloads": list(range(60))},
                                                           ToolResult("", attempt=a)) for a in evaluated], evaluated)
    lines = busy.line().splitlines()
    assert len(lines[0]) == MAX_LINE_CHARS and lines[1:] == [f"- step 7: {attempt_summary(a)}" for a in evaluated[1:]]


def test_history_rebuilt_from_a_message_list_carries_its_record():
    history = History([{"role": "system", "content": "s"}, {"role": "user", "content": "b"}])
    for n in (1, 2, 3, 4):
        _turn(history, n, "short")
    history.fit(TokenMeter(), None, history.count(TokenMeter(), None) - 1)
    again = History.of(history.messages())
    assert again.messages() == history.messages()


# ---------------------------------------------------------------- what an evaluation shows


def test_an_evaluation_shows_one_compact_row_per_workload():
    verdict = {"workloads": [
        {"index": 0, "status": "PASSED", "timing": {"median_ms": 0.01}},
        {"index": 1, "status": "PASSED", "timing": {"median_ms": 0.06}},
        {"index": 2, "status": "INCORRECT_NUMERICAL", "reason": "mismatch",
         "errors": {"max_abs_error": 0.5, "max_rel_error": 1.0, "matched_ratio": 0.5}}]}
    done = AttemptRow(9, 1, 2, None, "done", 0.0, 1.0, "pytorch", {}, "", {}, "", None, None, verdict,
                      "INCORRECT_NUMERICAL", "workload 2: mismatch")
    infos = (WorkloadInfo(0, "rows=64", 0.02, 0.004), WorkloadInfo(1, "rows=256", 0.05, None),
             WorkloadInfo(2, "rows=1024", 0.2, 0.05))
    lines = progress_table(done, infos, bests={0: (0.0125, 4), 1: (0.05, 7)}).splitlines()
    assert lines[0] == "attempt 9: INCORRECT_NUMERICAL: workload 2: mismatch"
    assert lines[1].startswith("workload | axes | time | vs best so far")
    assert lines[2] == "0 | rows=64 | 0.01 ms | -20.0% vs 0.0125 ms (attempt 4), new best | 2x | 40%"
    assert lines[3] == "1 | rows=256 | 0.06 ms | +20.0% vs 0.05 ms (attempt 7) | 0.833x | -"
    assert lines[4] == ("2 | rows=1024 | INCORRECT_NUMERICAL: mismatch max_abs 0.5, max_rel 1, matched 0.5")
    first = progress_table(done, infos).splitlines()
    assert first[2] == "0 | rows=64 | 0.01 ms | first pass | 2x | 40%"


# ---------------------------------------------------------------- a 60-call turn, end to end

WINDOW, MAX_TOKENS, CALLS = 32768, 4096, 60


class LongTurn:
    """The scripted model of a 60-call turn: a kernel-sized write and an evaluation, an edit, a read, and again;
    then finish. It counts each request's tokens its own way and refuses one over the window."""

    def __init__(self):
        self.answered = 0
        self.refused: list[int] = []
        self.counts: list[int] = []

    def __call__(self, body: dict) -> Step:
        tokens = server_tokens(body["messages"], body.get("tools"))
        if tokens > WINDOW - MAX_TOKENS:
            self.refused.append(tokens)
            return Step(status=400, body={"error": {
                "message": f"This model's maximum context length is {WINDOW} tokens. However, you requested "
                           f"{tokens + MAX_TOKENS} tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error", "code": "context_length_exceeded"}})
        self.counts.append(tokens)
        self.answered += 1
        n = self.answered
        if n > CALLS:
            return text("FINISH: nothing more")
        if n == CALLS:
            calls = [call("finish", {"note": "long turn done"})]
        elif n % 3 == 1:
            calls = [call("write_file", {"path": "main.py", "content": GOOD_MAIN + _commented(kernel(n))}),
                     call("evaluate", {"workloads": [0]})]
            if n == 1:
                calls.insert(0, call("set_spec", {"language": "pytorch", "entry_point": "main.py::run"}))
        elif n % 3 == 2:
            calls = [call("edit_file", {"path": "main.py", "old": f"# // variant {n - 1}\n",
                                        "new": f"# // variant {n - 1}, edited\n"})]
        else:
            calls = [call("read_file", {"path": "main.py"})]
        return Step(body=completion(f"Step {n}: trying a variant.", calls, usage=(tokens, 50)))


def _commented(source: str) -> str:
    return "".join(f"# {line}\n" for line in source.splitlines())


@pytest.mark.slow
def test_a_60_call_turn_never_passes_the_window_and_keeps_every_attempt_in_view(tmp_path, monkeypatch):
    monkeypatch.setenv("KF_TEST_LLM_KEY", "sk-test-context-0123456789")
    model = LongTurn()
    with ScriptedServer([], forever=model) as server:
        run_dir = run_fleet(tmp_path, server.base_url,
                            lambda store: any(a.note == "long turn done" for a in agent_attempts(store)),
                            llm={"context_tokens": WINDOW, "max_tokens": MAX_TOKENS, "max_steps": CALLS,
                                 "no_progress_calls": 1000}, evaluation={"verify_rounds": 0})
        requests = [r["body"] for r in server.requests[:CALLS]]
    with RunReader(run_dir) as reader:
        attempts = agent_attempts(reader)
        prompt_tokens = sum(c.call.prompt_tokens for c in reader.llm_calls()[:CALLS])
    print(f"\n60-call turn: {len(attempts)} attempts, requests of {min(model.counts)}..{max(model.counts)} tokens "
          f"(budget {WINDOW - MAX_TOKENS}), {prompt_tokens} prompt tokens in all")
    assert not model.refused and len(model.counts) >= CALLS
    assert len(attempts) == CALLS // 3 + 1 and attempts[-1].note == "long turn done"
    last = requests[CALLS - 1]["messages"]
    assert all(r["messages"][:2] == requests[0]["messages"][:2] for r in requests)  # a stable prefix
    record = last[2]["content"]
    assert record.startswith(TRIM_NOTE) and "- step 1: " in record
    shown = "\n".join(m.get("content") or "" for m in last)
    for a in attempts[:-1]:  # the last is the finish this request asked for
        assert f"attempt {a.id}" in shown, (a.id, record)
    in_record = [a for a in attempts[:-1] if f"attempt {a.id} (pytorch): {a.status}" in record]
    assert len(in_record) >= len(attempts) // 2, record
    assert "edit_file(path=main.py, old=# // variant" in record  # recent steps: their whole line
