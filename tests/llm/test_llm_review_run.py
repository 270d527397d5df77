"""Cheap checks before the GPU in a real fleet run on the CPU device: a static fault and a reviewer's reject are
recorded as attempts with their reason, never built or evaluated, and the reason goes back to the model; a reviewer
whose answer cannot be read approves (fails open)."""

from __future__ import annotations

import pytest
from llm_fleet_helpers import GOOD_MAIN, WRONG_MAIN, agent_attempts, log_events, run_fleet
from llm_scripted_server import call, text, tools
from test_llm_planner_run import RoutedServer

from core.llm.review import MARKER, parse_review
from core.store import RunReader

pytestmark = pytest.mark.slow

WRONG_ARITY_MAIN = '''import torch


def run(x, w):
    return torch.relu(x * w)
'''
SPEC = {"language": "pytorch", "entry_point": "main.py::run", "destination_passing_style": True}


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("KF_TEST_LLM_KEY", "sk-test-review-0123456789")


def _tool_results(request) -> list[str]:
    return [m["content"] for m in request["body"]["messages"] if m["role"] == "tool"]


def test_wrong_entry_arity_is_refused_before_the_gpu_with_the_reason_back_to_the_model(tmp_path):
    script = [
        tools(call("set_spec", SPEC), call("write_file", {"path": "main.py", "content": WRONG_ARITY_MAIN}),
              call("build"), call("evaluate", {"workloads": [0]})),
        tools(call("write_file", {"path": "main.py", "content": GOOD_MAIN}), call("evaluate", {"workloads": [0]})),
    ]
    with RoutedServer(script, {}) as server:
        run_dir = run_fleet(tmp_path, server.base_url, lambda s: len(agent_attempts(s)) >= 2)
    with RunReader(run_dir) as reader:
        refused, fixed = [a for a in reader.attempts() if a.agent_id is not None][:2]
    expected = ("static check: main.py:4: error: run() takes 2 positional arguments; the evaluator calls it with 3 "
                "positional arguments: x, w, then the outputs out (destination passing style)")
    assert refused.status == "COMPILE_ERROR" and refused.reason == expected
    # Never built nor evaluated: no build report, no device time, no timing or phases from a worker.
    assert refused.build is None and refused.gpu_seconds == 0
    assert [(w["status"], w["timing"], w["phase_s"]) for w in refused.verdict["workloads"]] == [
        ("COMPILE_ERROR", None, {})]
    assert fixed.status == "PASSED"
    build_result, evaluate_result = _tool_results(server.requests[1])[-2:]
    assert build_result.startswith("build failed:\nmain.py:4: error: run() takes 2 positional arguments")
    assert evaluate_result.startswith(f"attempt {refused.id}: COMPILE_ERROR: {expected}")


def test_reviewer_rejects_with_a_reason_the_agent_sees_and_fails_open_on_garbage(tmp_path):
    script = [
        tools(call("set_spec", SPEC), call("write_file", {"path": "main.py", "content": WRONG_MAIN}),
              call("evaluate", {"workloads": [0]})),
        tools(call("write_file", {"path": "main.py", "content": GOOD_MAIN}), call("evaluate", {"workloads": [0]})),
        tools(call("finish", {"note": "mul then relu"})),
    ]
    reviews = [text('{"verdict": "reject", "reason": "the ReLU of the reference is never applied"}', usage=(300, 20)),
               text("Looks fine to me, ship it!", usage=(310, 10)),
               text('```json\n{"verdict": "approve", "reason": "same math as the reference"}\n```', usage=(320, 15))]
    with RoutedServer(script, {MARKER: reviews}) as server:
        run_dir = run_fleet(tmp_path, server.base_url, lambda s: len(agent_attempts(s)) >= 3,
                            review={"enabled": True, "max_tokens": 64})
    with RunReader(run_dir) as reader:
        rejected, partial, full = [a for a in reader.attempts() if a.agent_id is not None][:3]
        problem = reader.problems()[0]
        review_calls = [c for c in reader.llm_calls() if c.agent_id is None]
        agent_tokens = reader.agents()[0].tokens
    assert rejected.status == "REJECTED" and rejected.reason == "review: the ReLU of the reference is never applied"
    assert rejected.build is None and rejected.gpu_seconds == 0 and rejected.times_ms == {}
    assert (partial.status, full.status, full.full) == ("PASSED", "PASSED", True)
    # The reason went back to the agent in the evaluate result.
    result = _tool_results(server.requests[1])[-1]
    assert result.startswith(f"attempt {rejected.id}: REJECTED: review: the ReLU of the reference is never applied")
    logs = log_events_of(run_dir)
    assert "candidate rejected by the reviewer before evaluation: the ReLU of the reference is never applied" in logs
    assert any(m.startswith("review unreadable, approved by default: no JSON verdict in the answer: 'Looks fine")
               for m in logs)
    # The reviewer's calls are recorded on the problem, not the agent, and counted in the problem's totals.
    assert [(c.problem_id, c.call.outcome, c.call.tokens) for c in review_calls] == [
        (problem.id, "answer", 320), (problem.id, "garbage", 320), (problem.id, "answer", 335)]
    assert problem.tokens == agent_tokens + 975
    # The reviewer read the reference and the candidate's change, and answered with max_tokens of its own.
    first = server.routed[MARKER][0]
    assert first["max_tokens"] == 64 and first["temperature"] == 0
    assert "torch.relu(x * w)" in first["messages"][1]["content"]
    assert "forgot the ReLU" in first["messages"][1]["content"]


def log_events_of(run_dir) -> list[str]:
    with RunReader(run_dir) as reader:
        return log_events(reader)


@pytest.mark.parametrize("answer, approved, reason, unusable", [
    ('{"verdict": "reject", "reason": "writes only half of out"}', False, "writes only half of out", None),
    ('Verdict below.\n```json\n{"decision": "Approve", "reason": "fine"}\n```', True, "fine", None),
    ('{"verdict": "reject"}', True, "", "a reject without a reason"),
    ('{"verdict": "maybe", "reason": "unsure"}', True, "", "no verdict approve or reject"),
    ("[1, 2, 3]", True, "", "no JSON verdict in the answer"),
    ('{"verdict": "reject", "reason": "' + "x" * 5000 + '"}', True, "", "oversized answer"),
])
def test_review_answers_are_read_strictly_and_fail_open(answer, approved, reason, unusable):
    review = parse_review(answer)
    assert (review.approved, review.reason) == (approved, reason)
    assert (review.unusable or "").startswith(unusable or "") and (review.unusable is None) == (unusable is None)
