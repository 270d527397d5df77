"""Calls timed by their CUPTI kernel span (core.evaluate.cupti_span, used by core.evaluate.timing.time_cuda): the
span computation on plain records, the tracer on a scripted CUPTI, the fallback to events, and on a GPU the real
thing."""

from __future__ import annotations

import enum
import statistics
import sys
import types
from dataclasses import replace

import pytest

from core.evaluate import cupti_span, timing
from core.evaluate.cupti_span import ApiRecord, GpuRecord, KernelSpanTracer, call_spans_ms
from core.evaluate.timing import EVENTS_METHOD, HOST_BOUND_NOTE, SPAN_METHOD, TimedCall, timing_method

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


def test_a_led_call_is_timed_by_its_span_and_the_others_by_their_events():
    assert TimedCall(0.0039, 0.0016, led=True).time_ms == 0.0016  # what the H200 showed: the events' 2.3 us out
    assert TimedCall(0.3395, 0.3369, led=True).time_ms == 0.3369
    assert TimedCall(0.0040, None, led=True).time_ms == 0.0040  # no GPU work seen: never 0
    assert TimedCall(0.3000, 0.0016, led=False).time_ms == 0.3000  # not led: host time in, as host-bound says


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
    ([TimedCall(E, S, True), TimedCall(0.3, S, False), TimedCall(0.3, S, False)], True, True,
     SPAN_METHOD + HOST_BOUND_NOTE + " (cuda events for the calls not led)"),
    ([TimedCall(0.3, None, False)] * 3, False, True, EVENTS_METHOD + HOST_BOUND_NOTE),
])
def test_the_method_says_how_the_counted_calls_were_timed(calls, traced, bound, method):
    assert timing_method(calls, traced, bound) == method


def test_old_method_matches_still_hold():
    """What other code and tests match on: the events text is unchanged, host-bound still says so."""
    assert EVENTS_METHOD == "cuda events per call, L2 flushed, device-wide check"
    assert "host-bound" in timing_method([TimedCall(0.3, S, False)], True, True)


# ------------------------------------------------------------------ time_cuda on a simulated GPU


class SimulatedGpu:
    """torch.cuda as time_cuda uses it, on a clock of its own: each call takes ``event_ms`` between its events and
    launches (through the scripted CUPTI) one kernel of ``span_ms``; the L2 flush takes a second, so every call is
    led. The flush's own kernel is launched before the call's window and overlaps the call's kernel on the GPU."""

    def __init__(self, monkeypatch, cupti: ScriptedCupti | None, event_ms=0.0039, span_ms=0.0016):
        import torch

        self.cupti, self.event_ms, self.span_ms = cupti, event_ms, span_ms
        self.now_ms = 0.0
        self.correlation = 0
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
        monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: self.advance(cycles / 1e6))
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(L2_cache_size=1024))
        monkeypatch.setattr(timing, "FLUSH_FLOOR_BYTES", 1024)
        monkeypatch.setattr(timing.L2Flush, "__call__", lambda flush: self.flush())

    def advance(self, ms):
        self.now_ms += ms

    def _launch(self, start_ns, length_ns):
        if self.cupti is not None:
            self.correlation += 1
            self.cupti.emit(Kind.RUNTIME, self.correlation, self.cupti.get_timestamp())
            self.cupti.emit(Kind.CONCURRENT_KERNEL, self.correlation, start_ns, start_ns + length_ns)

    def flush(self):
        self._launch(int(self.now_ms * 1e6), 10**9 + 10**6)  # runs on past the call's kernel
        self.advance(1000.0)

    def call(self, _i):
        self._launch(int(self.now_ms * 1e6) + 500, int(self.span_ms * 1e6))
        self.advance(self.event_ms)


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
    gpu = SimulatedGpu(monkeypatch, scripted())
    result = timing.time_cuda(gpu.call, lambda _i: None, "cpu", replace(SIMULATED, kernel_spans=False))
    assert result.method == EVENTS_METHOD, result
    assert result.median_ms == pytest.approx(0.0039)
    assert not timing.TimingPolicy().kernel_spans


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
    spans = [c.span_ms for c in captured[-1]]
    assert spans[:100] == [pytest.approx(0.0016)] * 100 and spans[100:] == [None] * 150


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
    """The TimedCalls of the time_cuda calls of a test."""
    runs: list[list[TimedCall]] = []
    original = timing._timed_calls

    def capturing(*args, **kwargs):
        runs.append(original(*args, **kwargs))
        return runs[-1]

    monkeypatch.setattr(timing, "_timed_calls", capturing)
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
    counted = [c for c in captured[-1] if c.led]
    assert counted and all(c.spanned and c.span_ms > 0 for c in counted), counted[:5]
    spans, events = [c.span_ms for c in counted], [c.event_ms for c in counted]
    assert statistics.median(spans) < statistics.median(events), (spans[:5], events[:5])
    assert sum(s < e for s, e in zip(spans, events)) >= 0.9 * len(counted), (spans[:5], events[:5])
    assert result.median_ms == pytest.approx(statistics.median(spans))
    # The 256 MiB flush queued ahead of each call (about 80 us) would show in the span, were it counted.
    assert result.median_ms < 0.02, result


@pytest.mark.gpu
def test_a_call_without_gpu_work_keeps_its_event_time(cuda, captured):
    _needs_cupti()
    result = timing.time_cuda(lambda _i: None, lambda _i: None, cuda, POLICY)
    assert result.method.startswith(EVENTS_METHOD) and "CUPTI saw no GPU work" in result.method, result
    assert result.median_ms > 0, result


@pytest.mark.gpu
def test_without_cupti_the_events_time_the_calls(cuda, monkeypatch):
    import torch

    monkeypatch.setitem(sys.modules, "cupti", None)
    x = torch.randn(4096, device=cuda)
    result = timing.time_cuda(lambda _i: x.mul_(1.0001), lambda _i: None, cuda, POLICY)
    assert result.method == EVENTS_METHOD, result
    assert result.median_ms > 0
