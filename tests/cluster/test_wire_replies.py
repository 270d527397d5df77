"""The node actor's replies are typed on both sides of the wire (core.cluster.wire): what the node writes with
``to_wire`` survives JSON (content bytes aside) and reads back field for field with ``from_wire``; a reply missing
what every reply carries is refused."""

from __future__ import annotations

import json

import pytest

from core.cluster.wire import BaselineReply, ConfinedReply, EvaluateReply
from core.evaluate.baseline import WorkloadBaseline
from core.evaluate.evaluator import Placement
from core.evaluate.timing_method import TimingMethod
from core.evaluate.verdict import ReasonCode, Status, Timing, Verdict, WorkloadVerdict

USAGE = {"devices": 1, "busy_s": 2.5, "jobs": 3}
WHERE = Placement("node-a/1f2e3d4c", 0, "NVIDIA H200")


def test_an_evaluation_reply_reads_back_whole():
    timing = Timing(0.125, 0.01, 40, "CUDA events", TimingMethod(clock="cuda-events", host_bound=True))
    verdict = Verdict(Status.INCORRECT_NUMERICAL, "workload 1 wrong", (
        WorkloadVerdict(0, Status.PASSED, timing=timing, phase_s={"timing": 0.4}),
        WorkloadVerdict(1, Status.INCORRECT_NUMERICAL, "max abs error 3", code=ReasonCode.TIMED_OUTPUT_WRONG)),
        ("own PID namespace",), 1.5)
    reply = EvaluateReply(verdict, {"ok": True, "seconds": 3.0}, WHERE, USAGE, 1_700_000_000.5, 2.25)
    back = EvaluateReply.from_wire(json.loads(json.dumps(reply.to_wire())))
    assert back == reply
    assert back.verdict.workloads[0].timing.how.host_bound and back.verdict.workloads[1].code is \
        ReasonCode.TIMED_OUTPUT_WRONG
    assert EvaluateReply.from_wire({**reply.to_wire(), "placement": None}).placement is None


def test_a_baseline_reply_and_a_confined_reply_read_back_whole():
    baseline = BaselineReply((WorkloadBaseline(0, "u0", 0.5, "eager", 0.5, None, "skipped", timing_method="CUDA events"),
                              WorkloadBaseline(1, "u1", error="the reference failed")), WHERE, USAGE, 10.0, 1.0)
    assert BaselineReply.from_wire(json.loads(json.dumps(baseline.to_wire()))) == baseline
    confined = ConfinedReply(None, "stopped at 8 s", {"profile.json": b"{}", "triton/k.cubin": b"\x7fELF"},
                             ("huge.bin",), USAGE, 11.0, 8.5)
    assert ConfinedReply.from_wire(confined.to_wire()) == confined  # bytes travel as they are (Ray pickles them)


def test_a_reply_without_its_times_is_refused():
    wire = ConfinedReply(0, "", {}, (), USAGE, 1.0, 1.0).to_wire()
    del wire["elapsed_s"]
    with pytest.raises(KeyError):
        ConfinedReply.from_wire(wire)
