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
from core.evaluate.cupti_span import ApiRecord, GpuRecord, KernelSpanTracer, call_spans_ms
from core.evaluate.timing import (EVENTS_METHOD, HOST_BOUND_NOTE, SPAN_METHOD, SPANS_HIDDEN_NOTE, TimedCall,
                                  counted_calls, spans_hold, timing_method)

# ------------------------------------------------------------------ spans from plain records (ns)


def test_a_call_spans_its_kernels_launched_inside_its_window():
    api = [ApiRecord(1_000, 7), ApiRecord(1_500, 8)]
    gpu = [GpuRecord(10_000, 14_000, 7), GpuRecord(14_500, 20_000, 8)]
    assert call_spans_ms([(900, 2_000)], api, gpu) == [pytest.approx(0.010)]  # 10_000 .. 20_000 ns


def test_the_lead_launched_before_the_window_is_not_the_calls_even_where_it_runs_inside_it():
    # The flush is launched before the window opens but runs on the GPU long after: it must not stretch the span.
    api = [ApiRecord(500, 1), ApiRecord(1_200, 2), ApiRecord(2_100, 3)]  # flush, the call's kernel, the end event
    gpu = [GpuRecord(3_000, 83_000, 1), GpuRecord(83_500, 85_500, 2), GpuRecord(85_600, 85_700, 3)]
    assert call_spans_ms([(1_000, 2_000)], api, gpu) == [pytest.approx(0.002)]


def test_the_span_is_the_union_of_overlapping_and_separate_activities():
    api = [ApiRecord(100, 1), ApiRecord(110, 2), ApiRecord(120, 3)]
    gpu = [GpuRecord(1_000, 5_000, 1), GpuRecord(2_000, 9_000, 2),  # another stream, overlapping
           GpuRecord(9_500, 9_600, 3), GpuRecord(9_700, 11_000, 3)]  # one launch (a graph) with two kernels
    assert call_spans_ms([(100, 120)], api, gpu) == [pytest.approx(0.010)]  # 1_000 .. 11_000


def test_each_window_gets_only_its_own_calls_and_an_empty_one_gets_none():
    api = [ApiRecord(100, 1), ApiRecord(300, 2), ApiRecord(500, 3), ApiRecord(700, 4)]
    gpu = [GpuRecord(1_000, 2_000, 1), GpuRecord(3_000, 7_000, 3), GpuRecord(8_000, 9_000, 4)]
    # Window 2 holds an API call (say, a synchronisation) without GPU work; window 4 holds no API call at all.
    windows = [(50, 150), (450, 550), (250, 350), (800, 900)]
    assert call_spans_ms(windows, api, gpu) == [pytest.approx(0.001), pytest.approx(0.004), None, None]


def test_window_bounds_are_inclusive_and_records_without_timestamps_are_ignored():
    api = [ApiRecord(100, 1), ApiRecord(200, 2), ApiRecord(201, 3)]
    gpu = [GpuRecord(1_000, 3_000, 1), GpuRecord(500, 0, 2), GpuRecord(4_000, 9_000, 3)]  # 2: no end yet
    assert call_spans_ms([(100, 200)], api, gpu) == [pytest.approx(0.002)]


def test_no_records_give_no_span():
    assert call_spans_ms([(0, 10), (20, 30)], [], []) == [None, None]


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
    next flush, as CUPTI hands over its buffers."""

    ActivityKind = Kind

    def __init__(self, refuse: Kind | None = None, clock_fails: bool = False):
        self.refuse, self.clock_fails = refuse, clock_fails
        self.enabled: set[Kind] = set()
        self.pending: list[Activity] = []
        self.completed = None
        self.finalized = 0
        self.clock = 0

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

    def get_timestamp(self):
        if self.clock_fails:
            raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")
        self.clock += 100
        return self.clock

    def emit(self, kind, correlation_id, start, end=0):
        self.pending.append(Activity(kind=kind, correlation_id=correlation_id, start=start, end=end))


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
        return fake
    return install


def test_the_tracer_spans_kernels_copies_and_memsets_and_ignores_other_kinds(scripted):
    fake = scripted()
    tracer, why = KernelSpanTracer.start()
    assert tracer is not None and why == "", why
    assert {Kind.RUNTIME, Kind.DRIVER, Kind.CONCURRENT_KERNEL, Kind.MEMCPY, Kind.MEMSET} <= fake.enabled
    opened = tracer.now()
    fake.emit(Kind.RUNTIME, 1, opened + 10)  # cudaMemcpyAsync
    fake.emit(Kind.DRIVER, 2, opened + 20)  # cuLaunchKernel (Triton)
    fake.emit(Kind.RUNTIME, 3, opened + 30)  # cudaMemsetAsync
    closed = tracer.now()
    fake.emit(Kind.MEMCPY, 1, 5_000, 6_000)
    fake.emit(Kind.CONCURRENT_KERNEL, 2, 6_500, 9_000)
    fake.emit(Kind.MEMSET, 3, 9_100, 10_000)
    fake.emit(Kind.CUDA_EVENT, 3, 1_000, 20_000)  # not GPU work of the call's: never spanned
    assert tracer.spans_ms([(opened, closed)]) == [pytest.approx(0.005)]
    tracer.stop()
    assert fake.enabled == set() and fake.finalized == 1


def test_discarded_records_are_not_spanned_later(scripted):
    fake = scripted()
    tracer, _ = KernelSpanTracer.start()
    opened = tracer.now()
    fake.emit(Kind.RUNTIME, 1, opened + 1)  # a warm-up call's launch
    fake.emit(Kind.CONCURRENT_KERNEL, 1, 1_000, 2_000)
    tracer.discard()
    fake.emit(Kind.RUNTIME, 2, opened + 2)  # a timed call's: whatever the window, only it is left
    fake.emit(Kind.CONCURRENT_KERNEL, 2, 3_000, 3_500)
    assert tracer.spans_ms([(opened, opened + 50)]) == [pytest.approx(0.0005)]
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
    fake = scripted(refuse=Kind.RUNTIME)  # the first kind enabled
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


def test_a_failing_clock_turns_the_tracer_off_instead_of_raising(scripted):
    scripted(clock_fails=True)
    tracer, _ = KernelSpanTracer.start()
    assert tracer.now() == 0
    assert tracer.spans_ms([(0, 0)]) is None and not tracer.on and "NOT_INITIALIZED" in tracer.failed
    tracer.stop()
    again, _ = KernelSpanTracer.start()
    assert again is not None  # released by the failure
    again.stop()


def test_unreadable_records_turn_the_tracer_off(scripted):
    fake = scripted()
    tracer, _ = KernelSpanTracer.start()
    fake.pending.append(Activity(kind=Kind.RUNTIME))  # no start, no correlation id
    assert tracer.spans_ms([(0, 10)]) is None and not tracer.on and "reading CUPTI records" in tracer.failed
    tracer.stop()


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
    flush's own kernel is launched before the call's window and overlaps the call's kernel on the GPU."""

    def __init__(self, monkeypatch, cupti: ScriptedCupti | None, event_ms=0.0039, span_ms=0.0016, flush_ms=1000.0,
                 spun_event_ms=None):
        import torch

        self.cupti, self.event_ms, self.span_ms, self.flush_ms = cupti, event_ms, span_ms, flush_ms
        self.spun_event_ms = event_ms if spun_event_ms is None else spun_event_ms
        self.now_ms = 0.0
        self.correlation = 0
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
            self.correlation += 1
            self.cupti.emit(Kind.RUNTIME, self.correlation, self.cupti.get_timestamp())
            self.cupti.emit(Kind.CONCURRENT_KERNEL, self.correlation, start_ns, start_ns + length_ns)

    def flush(self):
        self.spun = False
        self._launch(int(self.now_ms * 1e6), int(self.flush_ms * 1e6) + 10**6)  # runs on past the call's kernel
        self.advance(self.flush_ms)

    def call(self, _i):
        self._launch(int(self.now_ms * 1e6) + 500, int(self.span_ms * 1e6))
        self.advance(self.spun_event_ms if self.spun else self.event_ms)
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
            fake.clock_fails, gpu.cupti = True, None
        calls(i)

    policy = timing.TimingPolicy(warmup_calls=2, min_calls=10, max_calls=250, target_seconds=1.0,
                                 stable_min_calls=1000, kernel_spans=True)
    result = timing.time_cuda(failing_in_the_second_batch, lambda _i: None, "cpu", policy)
    assert result.method == EVENTS_METHOD, result
    assert result.median_ms == pytest.approx(0.0039) and result.calls == 250  # the first batch's too
    assert [c.span_ms for c in captured[-1]] == [None] * 250
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
    original = timing.counted_calls

    def capturing(timed, *args, **kwargs):
        runs.append(timed)
        return original(timed, *args, **kwargs)

    monkeypatch.setattr(timing, "counted_calls", capturing)
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
    # In a process of its own: once a tracer has run, CUPTI stays attached to the process (see
    # core.evaluate.cupti_span), which slows every launch, and this test's calls would be timed host-bound.
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
