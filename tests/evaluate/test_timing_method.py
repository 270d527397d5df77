"""A timing's method as a structured value (core.evaluate.timing_method): its sentence is today's, and code asks
its flags; records from before the flags read them from the sentence."""

import json
from dataclasses import asdict

from core.cluster.wire import verdict_from_dict
from core.evaluate.baseline.record import WorkloadBaseline
from core.evaluate.timing_method import (CUDA_EVENTS, CUPTI_SPAN, DEVICE_SYNC, EVENTS_METHOD, HOST_BOUND_NOTE,
                                         SPAN_METHOD, SPANS_HIDDEN_NOTE, WALL, TimingMethod)
from core.evaluate.verdict import ReasonCode, Status, Timing, Verdict, WorkloadVerdict
from core.store.model import WorkloadInfo


def test_describe_renders_the_sentences_of_before():
    assert TimingMethod(WALL).describe() == "wall clock per call (cpu)"
    assert TimingMethod(CUDA_EVENTS).describe() == EVENTS_METHOD
    assert TimingMethod(CUDA_EVENTS, host_bound=True, spans_dropped="hidden").describe() == \
        EVENTS_METHOD + HOST_BOUND_NOTE + SPANS_HIDDEN_NOTE
    assert TimingMethod(CUPTI_SPAN, notes=("cuda events for the calls that launched no GPU work",)).describe() == \
        SPAN_METHOD + "; cuda events for the calls that launched no GPU work"
    assert TimingMethod(CUDA_EVENTS, spans_dropped="unchecked", lead_cap_ms=1.0).describe().endswith(
        "(no call launched within a lead of 1 ms)")
    assert "its median wait beyond an idle one was 40 and 45 us in 2 passes" in \
        TimingMethod(DEVICE_SYNC, waits_us=("40", "45")).describe()


def test_a_method_round_trips_and_refuses_what_is_not_one():
    method = TimingMethod(CUDA_EVENTS, True, ("a",), "unchecked", 1.0)
    assert TimingMethod.from_dict(json.loads(json.dumps(method.to_dict()))) == method
    assert TimingMethod.from_dict({"clock": "sundial"}) is None
    assert TimingMethod.from_dict("cuda-events") is None


def test_an_old_store_row_reads_host_bound_from_its_sentence():
    old_row = {"index": 0, "axes": "n=1", "t_b_ms": 0.01,
               "timing_method": "cuda events per call, L2 flushed, device-wide check" + HOST_BOUND_NOTE}
    assert WorkloadInfo(**old_row).timing_host_bound is True
    assert WorkloadInfo(**{**old_row, "timing_method": EVENTS_METHOD}).timing_host_bound is False
    # A new row keeps the flag it was written with, whatever its sentence says.
    info = WorkloadInfo(**{**old_row, "timing_host_bound": False})
    assert info.timing_host_bound is False
    assert WorkloadInfo(**json.loads(json.dumps(asdict(info)))).timing_host_bound is False


def test_an_old_baseline_cache_entry_reads_host_bound_from_its_sentence():
    assert WorkloadBaseline.from_dict({"index": 1, "timing_method": EVENTS_METHOD + HOST_BOUND_NOTE}).timing_host_bound
    fresh = WorkloadBaseline(index=1, timing_method=EVENTS_METHOD, timing_host_bound=False)
    assert WorkloadBaseline.from_dict(fresh.to_dict()).timing_host_bound is False


def test_a_verdict_keeps_its_codes_and_structured_timing_across_the_wire():
    how = TimingMethod(CUDA_EVENTS, host_bound=True)
    verdict = Verdict(Status.RUNTIME_ERROR, "workload 0: could not load", (
        WorkloadVerdict(0, Status.RUNTIME_ERROR, "could not load the solution: x", code=ReasonCode.LOAD_FAILED),
        WorkloadVerdict(1, Status.PASSED, timing=Timing(1.0, 0.1, 10, how.describe(), how))))
    back = verdict_from_dict(json.loads(json.dumps(verdict.to_dict())))
    assert back == verdict
    assert back.workloads[1].timing.how.host_bound
