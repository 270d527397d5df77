"""Calls timed by their CUPTI kernel span (core.evaluate.cupti_span, used by core.evaluate.timing.time_cuda): the
span computation on plain records, the tracer on a scripted CUPTI, the fallback to events, and on a GPU the real
thing."""

from __future__ import annotations

import enum
import statistics
import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest

from core.evaluate import cupti_span, timing, timing_policy
from core.evaluate.cupti_span import (CLOSE_MARK, CLOSES, OPEN_MARK, OPENS, GpuRecord, KernelSpanTracer,
                                     call_spans_ms)
from core.evaluate.timing import (EVENTS_METHOD, HOST_BOUND_NOTE, SPAN_METHOD, SPANS_HIDDEN_NOTE, TimedCall,
                                  counted_calls, spans_hold, timing_method)

REAL_LOAD_CUPY = cupti_span._load_cupy

# ------------------------------------------------------------------ spans from plain records (ns)


def opens(correlation: int) -> GpuRecord:
    return GpuRecord(1, 2, correlation, OPENS)


def closes(correlation: int) -> GpuRecord:
    return GpuRecord(1, 2, correlation, CLOSES)


def test_a_call_spans_the_work_launched_between_its_markers():
    records = [opens(6), GpuRecord(10_000, 14_000, 7), GpuRecord(14_500, 20_000, 8), closes(9)]
    assert call_spans_ms(records, 1) == [pytest.approx(0.010)]  # 10_000 .. 20_000 ns


def test_work_launched_before_the_opening_marker_is_not_the_calls_however_it_overlaps():
    # The flush (1), launched before the marker, runs on past the call's kernel (3) on the GPU.
    records = [GpuRecord(3_000, 90_000, 1), opens(2), GpuRecord(83_500, 85_500, 3), closes(4)]
    assert call_spans_ms(records, 1) == [pytest.approx(0.002)]


def test_work_on_other_streams_and_a_graphs_kernels_are_the_calls():
    records = [opens(1), GpuRecord(1_000, 5_000, 2), GpuRecord(2_000, 9_000, 3),  # another stream, overlapping
               GpuRecord(9_500, 9_600, 4), GpuRecord(9_700, 11_000, 4), closes(5)]  # one launch (a graph), 2 kernels
    assert call_spans_ms(records, 1) == [pytest.approx(0.010)]  # 1_000 .. 11_000


def test_records_are_matched_in_launch_order_whatever_order_cupti_hands_them_over():
    records = [GpuRecord(8_000, 9_000, 7), closes(8), opens(1), GpuRecord(1_000, 2_000, 2), closes(3),
               GpuRecord(50, 60, 4), opens(5), opens(9), GpuRecord(3_000, 7_000, 6), closes(10)]
    # 4 is staging between calls (outside every pair); the third call launched nothing.
    assert call_spans_ms(sorted(records, key=lambda r: -r.start), 3) == [
        pytest.approx(0.001), pytest.approx(0.006), None]


def test_a_record_without_both_timestamps_times_nothing():
    records = [opens(1), GpuRecord(1_000, 3_000, 2), GpuRecord(500, 0, 3), closes(4)]  # 3: no end yet
    assert call_spans_ms(records, 1) == [pytest.approx(0.002)]


@pytest.mark.parametrize("records", [
    [opens(1), GpuRecord(1_000, 2_000, 2), opens(3), GpuRecord(3_000, 4_000, 4), closes(5)],  # a second opening
    [opens(1), GpuRecord(1_000, 2_000, 2), closes(3), GpuRecord(3_000, 9_000, 4), closes(5)],  # a second closing
    [opens(1), GpuRecord(1_000, 2_000, 2)],  # never closed
    [opens(1), closes(2), opens(3), closes(4), opens(5), closes(6)],  # one pair more than the calls timed
    [],
])
def test_markers_that_do_not_delimit_the_calls_timed_give_no_spans(records):
    """A call's own memset of a marker's size and value (to hide work after it) cannot shorten a span: the
    markers no longer pair up into the calls timed, and the timing keeps its events."""
    assert call_spans_ms(records, 2) is None


# ------------------------------------------------------------------ the tracer, on a scripted CUPTI


class Kind(enum.IntEnum):
    MEMCPY = 1
    MEMSET = 2
    DRIVER = 6
    RUNTIME = 5
    CONCURRENT_KERNEL = 10
    CUDA_EVENT = 36


class Activity(types.SimpleNamespace):
    pass


class ScriptedCupti:
    """Enough of ``cupti.cupti`` for the tracer: records queued with ``emit`` reach the registered callback at the
    next flush, as CUPTI hands over its buffers. ``launch`` numbers an API call as CUPTI does (one counter for every
    API and thread); the tracer's markers go through it too, as memsets of their (bytes, value)."""

    ActivityKind = Kind

    def __init__(self, refuse: Kind | None = None, mark_fails: bool = False):
        self.refuse, self.mark_fails = refuse, mark_fails
        self.enabled: set[Kind] = set()
        self.pending: list[Activity] = []
        self.completed = None
        self.finalized = 0
        self.correlation = 0

    def activity_enable(self, kind):
        if kind == self.refuse:
            raise RuntimeError("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")
        self.enabled.add(kind)

    def activity_disable(self, kind):
        self.enabled.discard(kind)

    def activity_register_callbacks(self, requested, completed):
        assert requested()[0] > 0
        self.completed = completed

    def activity_flush_all(self, _flag):
        pending, self.pending = self.pending, []
        if pending and self.completed is not None:
            self.completed(pending)

    def finalize(self):
        self.finalized += 1

    def launch(self, kind, start, end, nbytes=0, value=0):
        """One API call launching one activity; returns its correlation id."""
        self.correlation += 1
        self.emit(kind, self.correlation, start, end, nbytes, value)
        return self.correlation

    def emit(self, kind, correlation_id, start, end=0, nbytes=0, value=0):
        self.pending.append(Activity(kind=kind, correlation_id=correlation_id, start=start, end=end, bytes=nbytes,
                                     value=value))

    def mark(self, mark):
        if self.mark_fails:
            raise RuntimeError("cudaErrorInvalidValue")
        self.launch(Kind.MEMSET, 1, 2, *mark)


@pytest.fixture(autouse=True)
def no_tracer_left_on():
    """Every test leaves CUPTI free for the next: a tracer never stopped would hold the process's one slot."""
    yield
    assert cupti_span._active.acquire(blocking=False), "a tracer was left holding CUPTI"
    cupti_span._active.release()


@pytest.fixture
def scripted(monkeypatch):
    def install(**kwargs):
        fake = ScriptedCupti(**kwargs)
        monkeypatch.setattr(cupti_span, "_load_cupti", lambda: fake)
        monkeypatch.setattr(cupti_span, "_load_cupy", lambda: types.SimpleNamespace())
        monkeypatch.setattr(cupti_span, "_marker_launcher", lambda device: fake.mark)
        return fake
    return install


def test_the_tracer_spans_kernels_copies_and_memsets_between_its_markers_and_nothing_else(scripted):
    fake = scripted()
    tracer, why = KernelSpanTracer.start()
    assert tracer is not None and why == "", why
    assert fake.enabled == {Kind.CONCURRENT_KERNEL, Kind.MEMCPY, Kind.MEMSET}  # no RUNTIME, no DRIVER: costly
    fake.launch(Kind.CONCURRENT_KERNEL, 1_000, 90_000)  # the flush, before the call
    tracer.open()
    fake.launch(Kind.MEMCPY, 5_000, 6_000)
    fake.launch(Kind.CONCURRENT_KERNEL, 6_500, 9_000)  # cuLaunchKernel (Triton) or cudaLaunchKernel: one counter
    fake.launch(Kind.MEMSET, 9_100, 10_000, 4096, 0)  # the call's own memset
    fake.launch(Kind.CUDA_EVENT, 1_000, 20_000)  # not GPU work of the call's: never spanned
    tracer.close()
    fake.launch(Kind.CONCURRENT_KERNEL, 95_000, 99_000)  # the next call's staging
    assert tracer.spans_ms(1) == [pytest.approx(0.005)]
    tracer.stop()
    assert fake.enabled == set() and fake.finalized == 1


def test_a_call_that_fakes_a_closing_marker_to_hide_its_work_gets_no_span(scripted):
    fake = scripted()
    tracer, _ = KernelSpanTracer.start()
    tracer.open()
    fake.launch(Kind.CONCURRENT_KERNEL, 1_000, 2_000)
    fake.launch(Kind.MEMSET, 2_100, 2_200, *CLOSE_MARK)  # the candidate's own "close"
    fake.launch(Kind.CONCURRENT_KERNEL, 2_300, 900_000)  # the real work
    fake.launch(Kind.MEMSET, 900_100, 900_200, *OPEN_MARK)  # and an "open" to pair with the real close
    tracer.close()
    assert tracer.spans_ms(1) is None
    tracer.stop()


def test_unmarked_calls_are_ignored_and_each_take_spans_the_calls_marked_since_the_last(scripted):
    fake = scripted()
    tracer, _ = KernelSpanTracer.start()
    fake.launch(Kind.CONCURRENT_KERNEL, 1_000, 2_000)  # a warm-up call: never marked
    tracer.open()
    fake.launch(Kind.CONCURRENT_KERNEL, 3_000, 3_500)
    tracer.close()
    assert tracer.spans_ms(1) == [pytest.approx(0.0005)]
    for length in (700, 900):  # the next batch
        tracer.open()
        fake.launch(Kind.CONCURRENT_KERNEL, 10_000, 10_000 + length)
        tracer.close()
    assert tracer.spans_ms(2) == [pytest.approx(0.0007), pytest.approx(0.0009)]
    tracer.stop()


def test_markers_that_do_not_pair_up_turn_the_tracer_off_for_the_rest_of_the_timing(scripted):
    fake = scripted()
    tracer, _ = KernelSpanTracer.start()
    tracer.open()
    fake.launch(Kind.CONCURRENT_KERNEL, 3_000, 3_500)
    tracer.close()
    assert tracer.spans_ms(2) is None  # one call marked, two timed
    assert not tracer.on and "do not delimit" in tracer.failed
    tracer.open()
    tracer.close()
    assert tracer.spans_ms(1) is None
    tracer.stop()


def test_one_tracer_per_process(scripted):
    scripted()
    first, _ = KernelSpanTracer.start()
    second, why = KernelSpanTracer.start()
    assert first is not None and second is None and "holds CUPTI" in why
    first.stop()
    third, _ = KernelSpanTracer.start()  # the slot is free again once the first stops
    assert third is not None
    third.stop()


def test_cupti_already_in_use_gives_no_tracer_and_does_not_detach_the_other_client(scripted):
    fake = scripted(refuse=Kind.CONCURRENT_KERNEL)  # the first kind enabled
    tracer, why = KernelSpanTracer.start()
    assert tracer is None and "MULTIPLE_SUBSCRIBERS" in why
    assert fake.finalized == 0
    fake.refuse = None
    again, _ = KernelSpanTracer.start()  # the process slot was released
    assert again is not None
    again.stop()


def test_a_kind_refused_after_others_were_enabled_undoes_them(scripted):
    fake = scripted(refuse=Kind.MEMSET)
    tracer, why = KernelSpanTracer.start()
    assert tracer is None and why
    assert fake.enabled == set() and fake.finalized == 1


def test_a_failing_marker_turns_the_tracer_off_instead_of_raising(scripted):
    scripted(mark_fails=True)
    tracer, _ = KernelSpanTracer.start()
    tracer.open()
    assert tracer.spans_ms(1) is None and not tracer.on and "cudaErrorInvalidValue" in tracer.failed
    tracer.close()  # off: does nothing
    tracer.stop()
    again, _ = KernelSpanTracer.start()
    assert again is not None  # released by the failure
    again.stop()


def test_unreadable_records_turn_the_tracer_off(scripted):
    fake = scripted()
    tracer, _ = KernelSpanTracer.start()
    fake.pending.append(Activity(kind=Kind.MEMSET))  # no start, no correlation id, no size
    assert tracer.spans_ms(0) is None and not tracer.on and "reading CUPTI records" in tracer.failed
    tracer.stop()


def test_without_cupy_there_is_no_tracer(monkeypatch, scripted):
    scripted()
    monkeypatch.setattr(cupti_span, "_load_cupy", REAL_LOAD_CUPY)
    monkeypatch.setitem(sys.modules, "cupy", None)
    tracer, why = KernelSpanTracer.start()
    assert tracer is None and why.startswith("cupy does not import:")


def test_without_the_cupti_package_there_is_no_tracer(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupti", None)  # import cupti raises ImportError
    tracer, why = KernelSpanTracer.start()
    assert tracer is None and why.startswith("cupti does not import:")


# ------------------------------------------------------------------ what a timing reports


def test_a_call_is_timed_by_its_span_led_or_not_and_by_its_events_without_one():
    assert TimedCall(0.0039, 0.0016, led=True).time_ms == 0.0016  # what the H200 showed: the events' 2.3 us out
    assert TimedCall(0.3395, 0.3369, led=True).time_ms == 0.3369
    assert TimedCall(0.0040, None, led=True).time_ms == 0.0040  # no GPU work seen: never 0
    # Not led: the events have the host's launch in them, the span is the GPU's from first start to last end.
    slow_host = TimedCall(0.3000, 0.0016, led=False)
    assert slow_host.time_ms == 0.0016 and not slow_host.span_short


@pytest.mark.parametrize("event_ms, span_ms", [
    (0.100, 0.020),  # 80 us of the call's GPU time not in its span: hidden from CUPTI
    (1.000, 0.900),  # 10% short of a long call
])
def test_a_span_well_short_of_the_events_leaves_the_event_time(event_ms, span_ms):
    call = TimedCall(event_ms, span_ms, led=True)
    assert call.span_short and call.time_ms == event_ms


E, S = 0.0039, 0.0016  # one small call's event interval and span, ms


@pytest.mark.parametrize("calls, traced, bound, method", [
    ([TimedCall(E, S, True)] * 3, True, False, SPAN_METHOD),
    ([TimedCall(E, None, True)] * 3, False, False, EVENTS_METHOD),
    ([TimedCall(E, S, True), TimedCall(E, None, True)], True, False,
     SPAN_METHOD + "; cuda events for the calls that launched no GPU work"),
    ([TimedCall(E, None, True)] * 3, True, False, EVENTS_METHOD + "; CUPTI saw no GPU work launched by the calls"),
    ([TimedCall(E, S, True), TimedCall(0.100, 0.020, True)], True, False,
     SPAN_METHOD + "; cuda events for the calls whose kernel span fell short of them"),
    ([TimedCall(E, S, True), TimedCall(0.3, S, False), TimedCall(0.3, S, False)], True, False, SPAN_METHOD),
    ([TimedCall(0.3, None, False)] * 3, False, True, EVENTS_METHOD + HOST_BOUND_NOTE),
])
def test_the_method_says_how_the_counted_calls_were_timed(calls, traced, bound, method):
    assert timing_method(calls, traced, bound) == method


LED, SLOW = TimedCall(E, S, True), TimedCall(0.3, S, False)  # a call led by the flush, one whose host was slow


def test_once_the_check_pass_agrees_every_call_counts_by_its_span_however_slow_its_host():
    counted, method = counted_calls([SLOW] * 20 + [LED] * 2, [LED] * 10, True, 10)
    assert method == SPAN_METHOD and len(counted) == 22
    assert {c.time_ms for c in counted} == {S}


def test_spans_short_of_the_check_pass_events_leave_the_events_for_the_whole_timing():
    hidden = TimedCall(0.100, 0.020, True)  # led behind the spin: 80 us of GPU work CUPTI did not see
    assert spans_hold([hidden] * 6 + [LED] * 4) is False
    counted, method = counted_calls([LED] * 20, [hidden] * 10, True, 10)
    assert method == EVENTS_METHOD + SPANS_HIDDEN_NOTE and {c.time_ms for c in counted} == {E}
    counted, method = counted_calls([SLOW] * 20, [hidden] * 10, True, 10)  # and the host-bound rule again
    assert method == EVENTS_METHOD + HOST_BOUND_NOTE + SPANS_HIDDEN_NOTE and {c.time_ms for c in counted} == {0.3}


def test_spans_that_could_not_be_checked_are_not_used():
    assert spans_hold([SLOW] * 10) is None
    counted, method = counted_calls([LED] * 20, [SLOW] * 10, True, 10)
    assert method.startswith(EVENTS_METHOD + "; cuda events: the kernel spans could not be checked"), method
    assert {c.time_ms for c in counted} == {E}


def test_without_tracing_the_led_calls_count_by_their_events():
    counted, method = counted_calls([TimedCall(E, None, True)] * 20 + [TimedCall(0.3, None, False)], [], False, 10)
    assert method == EVENTS_METHOD and len(counted) == 20


def test_old_method_matches_still_hold():
    """What other code and tests match on: the events text is unchanged, host-bound still says so."""
    assert EVENTS_METHOD == "cuda events per call, L2 flushed, device-wide check"
    assert "host-bound" in timing_method([TimedCall(0.3, None, False)], False, True)


# ------------------------------------------------------------------ time_cuda on a simulated GPU


class SimulatedGpu:
    """torch.cuda as time_cuda uses it, on a clock of its own: each call takes ``event_ms`` between its events and
    launches (through the scripted CUPTI) one kernel of ``span_ms``; the L2 flush takes ``flush_ms`` (a second by
    default, so every call is led; 0: no call is). A call queued behind a spin (the check pass's lead) takes
    ``spun_event_ms`` (default ``event_ms``): what its events read once the host's launch is out of them. The
    flush's own kernel is launched before the call's opening marker and overlaps the call's kernel on the GPU."""

    def __init__(self, monkeypatch, cupti: ScriptedCupti | None, event_ms=0.0039, span_ms=0.0016, flush_ms=1000.0,
                 spun_event_ms=None, event_jitter=0.0):
        import torch

        self.cupti, self.event_ms, self.span_ms, self.flush_ms = cupti, event_ms, span_ms, flush_ms
        self.spun_event_ms = event_ms if spun_event_ms is None else spun_event_ms
        self.event_jitter, self.calls = event_jitter, 0  # events off by up to this share, call by call
        self.now_ms = 0.0
        self.spun = False
        gpu = self

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self, stream=None):
                self.at = gpu.now_ms

            def elapsed_time(self, other):
                return other.at - self.at

            def synchronize(self):
                pass

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: types.SimpleNamespace(
            synchronize=lambda: None))
        monkeypatch.setattr(torch.cuda, "_sleep", self.sleep)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(L2_cache_size=1024))
        monkeypatch.setattr(timing, "FLUSH_FLOOR_BYTES", 1024)
        monkeypatch.setattr(timing.L2Flush, "__call__", lambda flush: self.flush())

    def advance(self, ms):
        self.now_ms += ms

    def sleep(self, cycles):
        self.spun = True
        self.advance(cycles / 1e6)

    def _launch(self, start_ns, length_ns):
        if self.cupti is not None:
            self.cupti.launch(Kind.CONCURRENT_KERNEL, start_ns, start_ns + length_ns)

    def flush(self):
        self.spun = False
        self._launch(int(self.now_ms * 1e6), int(self.flush_ms * 1e6) + 10**6)  # runs on past the call's kernel
        self.advance(self.flush_ms)

    def call(self, _i):
        self._launch(int(self.now_ms * 1e6) + 500, int(self.span_ms * 1e6))
        self.calls += 1
        off = self.event_jitter * ((self.calls * 7919) % 11 - 5) / 5
        self.advance((self.spun_event_ms if self.spun else self.event_ms) * (1 + off))
        self.spun = False


SIMULATED = timing.TimingPolicy(warmup_calls=2, min_calls=10, max_calls=50, target_seconds=1.0,
                                 kernel_spans=True)


def test_time_cuda_reports_the_span_of_each_call_without_the_lead(monkeypatch, scripted):
    gpu = SimulatedGpu(monkeypatch, scripted())
    result = timing.time_cuda(gpu.call, lambda _i: None, "cpu", SIMULATED)
    assert result.method == SPAN_METHOD, result
    assert result.median_ms == pytest.approx(0.0016) and result.calls == 50
    again, _ = KernelSpanTracer.start()  # released: the next timing can trace
    assert again is not None
    again.stop()


def test_a_timing_by_spans_stops_once_the_spans_are_steady_however_the_events_scatter(monkeypatch, scripted):
    policy = timing.TimingPolicy(warmup_calls=2, min_calls=10, max_calls=1000, target_seconds=1.0,
                                 kernel_spans=True)
    spans = timing.time_cuda(SimulatedGpu(monkeypatch, scripted(), event_jitter=0.5).call, lambda _i: None, "cpu",
                             policy)
    assert spans.method == SPAN_METHOD and spans.calls == 100, spans  # stable at stable_min_calls
    events = timing.time_cuda(SimulatedGpu(monkeypatch, None, event_jitter=0.5).call, lambda _i: None, "cpu",
                              replace(policy, kernel_spans=False))
    assert events.method == EVENTS_METHOD and events.calls > 300, events


def test_kernel_spans_are_off_by_default_even_where_cupti_traces(monkeypatch, scripted):
    assert not timing.TimingPolicy().kernel_spans
    gpu = SimulatedGpu(monkeypatch, scripted())
    result = timing.time_cuda(gpu.call, lambda _i: None, "cpu", replace(SIMULATED, kernel_spans=False))
    assert result.method == EVENTS_METHOD, result
    assert result.median_ms == pytest.approx(0.0039)


def test_the_run_log_line_says_how_calls_are_timed_and_what_is_missing(monkeypatch, scripted):
    scripted()
    spans = replace(timing.TimingPolicy(), kernel_spans=True)
    assert timing_policy.describe(spans, "cuda") == "timing: each call's CUPTI kernel span, as upstream SOL-ExecBench times it"
    assert "kernel_spans = true" in timing_policy.describe(timing.TimingPolicy(), "cuda")
    assert timing_policy.describe(spans, "cpu") == "timing: wall clock per call (cpu)"
    monkeypatch.setattr(cupti_span, "_load_cupti", lambda: __import__("no_such_cupti_module"))
    line = timing_policy.describe(spans, "cuda")
    assert line.startswith("timing: CUDA events per call") and "ModuleNotFoundError" in line, line
    assert "pip install cupti-python" in line


def test_time_cuda_without_cupti_reports_the_events(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupti", None)
    gpu = SimulatedGpu(monkeypatch, None)
    result = timing.time_cuda(gpu.call, lambda _i: None, "cpu", SIMULATED)
    assert result.method == EVENTS_METHOD, result
    assert result.median_ms == pytest.approx(0.0039)


def test_time_cuda_falls_back_to_the_events_when_cupti_fails_midway(monkeypatch, scripted, captured):
    fake = scripted()
    gpu = SimulatedGpu(monkeypatch, fake)
    calls = gpu.call

    def failing_in_the_second_batch(i):
        if i >= 150:
            fake.mark_fails, gpu.cupti = True, None
        calls(i)

    policy = timing.TimingPolicy(warmup_calls=2, min_calls=10, max_calls=250, target_seconds=1.0,
                                 stable_min_calls=1000, kernel_spans=True)
    result = timing.time_cuda(failing_in_the_second_batch, lambda _i: None, "cpu", policy)
    assert result.method == EVENTS_METHOD, result
    assert result.median_ms == pytest.approx(0.0039) and result.calls == 250  # the first batch's too
    timed = captured[-1]
    assert [c.span_ms for c in timed[:100]] == [pytest.approx(0.0016)] * 100  # spanned before the failure
    assert [c.span_ms for c in timed[150:]] == [None] * 100
    again, _ = KernelSpanTracer.start()  # released by the failure
    assert again is not None
    again.stop()


def test_a_host_slower_than_the_flush_is_timed_by_the_spans_once_the_spin_pass_agrees(monkeypatch, scripted):
    gpu = SimulatedGpu(monkeypatch, scripted(), event_ms=0.3, flush_ms=0.0, spun_event_ms=0.0039)
    result = timing.time_cuda(gpu.call, lambda _i: None, "cpu", SIMULATED)
    assert result.method == SPAN_METHOD, result
    assert result.median_ms == pytest.approx(0.0016) and result.calls == 50


def test_gpu_work_hidden_from_cupti_leaves_the_events(monkeypatch, scripted):
    # CUPTI sees 1.6 us of the call's work; behind the spin its events read 100 us of GPU work.
    gpu = SimulatedGpu(monkeypatch, scripted(), event_ms=0.3, flush_ms=0.0, spun_event_ms=0.100)
    result = timing.time_cuda(gpu.call, lambda _i: None, "cpu", SIMULATED)
    assert result.method == EVENTS_METHOD + HOST_BOUND_NOTE + SPANS_HIDDEN_NOTE, result
    assert result.median_ms == pytest.approx(0.3)


def test_time_cuda_keeps_the_event_time_of_a_call_that_launched_no_gpu_work(monkeypatch, scripted):
    fake = scripted()
    gpu = SimulatedGpu(monkeypatch, fake)

    def cpu_only(_i):
        gpu.advance(0.002)

    result = timing.time_cuda(cpu_only, lambda _i: None, "cpu", SIMULATED)
    assert result.method == EVENTS_METHOD + "; CUPTI saw no GPU work launched by the calls", result
    assert result.median_ms == pytest.approx(0.002)


# ------------------------------------------------------------------ on a GPU


@pytest.fixture
def cuda():
    import torch

    return torch.device("cuda")


@pytest.fixture
def captured(monkeypatch):
    """The TimedCalls (spans in) of the time_cuda calls of a test, as it chose among them."""
    runs: list[list[TimedCall]] = []
    original = timing.counted_calls_method

    def capturing(timed, *args, **kwargs):
        runs.append(timed)
        return original(timed, *args, **kwargs)

    monkeypatch.setattr(timing, "counted_calls_method", capturing)
    return runs


POLICY = timing.TimingPolicy(warmup_calls=3, min_calls=20, max_calls=200, target_seconds=0.02, kernel_spans=True)


def _needs_cupti():
    tracer, why = KernelSpanTracer.start()
    if tracer is None:
        pytest.skip(f"no CUPTI here: {why}")
    tracer.stop()


@pytest.mark.gpu
def test_a_small_torch_op_is_timed_by_its_span_shorter_than_its_events(cuda, captured):
    import torch

    _needs_cupti()
    x = torch.randn(4096, device=cuda)
    result = timing.time_cuda(lambda _i: x.mul_(1.0001), lambda _i: None, cuda, POLICY)
    assert result.method == SPAN_METHOD, result
    counted = captured[-1]
    assert counted and all(c.spanned and c.span_ms > 0 for c in counted), counted[:5]
    spans, events = [c.span_ms for c in counted], [c.event_ms for c in counted]
    assert statistics.median(spans) < statistics.median(events), (spans[:5], events[:5])
    assert sum(s < e for s, e in zip(spans, events)) >= 0.9 * len(counted), (spans[:5], events[:5])
    assert result.median_ms == pytest.approx(statistics.median(spans))
    # The 256 MiB flush queued ahead of each call (about 80 us) would show in the span, were it counted.
    assert result.median_ms < 0.02, result


@pytest.mark.gpu
def test_a_call_slower_on_the_host_than_the_flush_is_timed_by_its_span(cuda, captured):
    import time

    import torch

    _needs_cupti()
    x = torch.randn(4096, device=cuda)

    def slow_host(_i):
        until = time.perf_counter() + 300e-6  # past the 256 MiB flush (about 80 us): the GPU waits for the host
        while time.perf_counter() < until:
            pass
        x.mul_(1.0001)

    result = timing.time_cuda(slow_host, lambda _i: None, cuda, POLICY)
    assert result.method == SPAN_METHOD, result
    assert sum(c.led for c in captured[-1]) < len(captured[-1]) / 2, captured[-1][:5]
    assert result.median_ms < 0.02, result  # the kernel's span, not the host's 300 us


@pytest.mark.gpu
def test_a_call_without_gpu_work_keeps_its_event_time(cuda, captured):
    _needs_cupti()
    result = timing.time_cuda(lambda _i: None, lambda _i: None, cuda, POLICY)
    assert result.method.startswith(EVENTS_METHOD) and "CUPTI saw no GPU work" in result.method, result
    assert result.median_ms > 0, result


@pytest.mark.gpu
def test_without_cupti_the_events_time_the_calls():
    # In a process of its own, where CUPTI was never attached (session 13 saw an events timing after traced ones
    # in the same process timed host-bound).
    code = (
        "import sys; sys.modules['cupti'] = None\n"
        "import torch\n"
        "from core.evaluate import timing\n"
        "x = torch.randn(4096, device='cuda')\n"
        "policy = timing.TimingPolicy(warmup_calls=3, min_calls=20, max_calls=200, target_seconds=0.02,"
        " kernel_spans=True)\n"
        "result = timing.time_cuda(lambda _i: x.mul_(1.0001), lambda _i: None, torch.device('cuda'), policy)\n"
        "print(result.method); print(result.median_ms)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    method, median = done.stdout.strip().splitlines()[-2:]
    assert method == EVENTS_METHOD and float(median) > 0, done.stdout


@pytest.mark.gpu
def test_a_kernel_launched_through_the_driver_api_is_timed_by_its_span(cuda, captured):
    """The fast path launches with cupy (cuLaunchKernel), torch with cudaLaunchKernel: one correlation counter."""
    import cupy
    import torch

    _needs_cupti()
    x = torch.randn(1 << 16, device=cuda)
    scale = cupy.RawKernel(r'''extern "C" __global__ void scale(float* x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 1.0001f; }''', "scale")
    view = cupy.from_dlpack(x)

    def call(_i):
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            scale((64,), (1024,), (view, cupy.int32(x.numel())))

    result = timing.time_cuda(call, lambda _i: None, cuda, POLICY)
    assert result.method == SPAN_METHOD, result
    assert all(c.spanned for c in captured[-1]), captured[-1][:5]
    assert result.median_ms < 0.02, result


@pytest.mark.gpu
def test_a_call_that_launches_a_fake_marker_is_timed_by_its_events(cuda):
    import cupy
    import torch

    _needs_cupti()
    x = torch.randn(1 << 20, device=cuda)
    scratch = torch.empty(cupti_span.MARKER_BYTES, dtype=torch.uint8, device=cuda)

    def hiding(_i):
        stream = torch.cuda.current_stream().cuda_stream
        cupy.cuda.runtime.memsetAsync(scratch.data_ptr(), cupti_span.CLOSE_MARK[1], cupti_span.CLOSE_MARK[0], stream)
        for _ in range(20):
            x.mul_(1.0001)  # the work it would hide after its own "close"

    result = timing.time_cuda(hiding, lambda _i: None, cuda, POLICY)
    assert result.method.startswith(EVENTS_METHOD), result
    assert result.median_ms > 0.02, result  # 20 passes over 4 MiB: the work is in the time


def test_the_protocol_names_the_markers_the_tracer_launches():
    """Candidates are told which memsets would cost them their spans: the protocol must name the real ones."""
    protocol = " ".join((Path(__file__).resolve().parents[2] / "protocol.md").read_text().split())
    for nbytes, value in (OPEN_MARK, CLOSE_MARK):
        assert f"{nbytes:,} bytes of 0x{value:02X}" in protocol, (nbytes, value)
