"""Timing a call the way kernels should be timed: warm-up, L2 flushed before each call, rotated inputs, adaptive
repetition, median and spread; all streams covered by a device-wide check.

Per call, CUDA events bracket the call on the current stream (as ``triton.testing.do_bench`` does), behind a lead
of GPU work (the L2 flush, and for trusted calls a spin) that the host must launch the whole call within for the
call to count, so the time is the GPU's (see LaunchLead). With ``TimingPolicy.kernel_spans``, where CUPTI can trace
in the process, every call is timed instead by its CUPTI kernel span (core.evaluate.cupti_span), as NVIDIA's
SOL-ExecBench times it (the events themselves add 2-3 us on the GPU to each call), once a short pass of calls behind
a long spin has shown that their spans agree with their events. A second, shorter pass starts each call on an idle
GPU and then waits for the current stream and for the whole device: when the device still has work to finish (work
left on other streams) in that pass and in one more, the time to the end of the device-wide synchronisation is
reported instead, with the method saying so.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from core.evaluate.cupti_span import KernelSpanTracer
from core.evaluate.timing_method import (  # noqa: F401  (the method sentences, still read from here too)
    CUDA_EVENTS, CUPTI_SPAN, DEVICE_SYNC, EVENTS_METHOD, HOST_BOUND_NOTE, SPAN_METHOD, SPANS_HIDDEN_NOTE,
    SPANS_UNCHECKED_NOTE, WALL, TimingMethod)
from core.evaluate.timing_policy import TimingPolicy
from core.evaluate.verdict import Timing


FLUSH_FLOOR_BYTES = 256 << 20
# Timed calls run in batches; after each batch the median's stability is checked.
BATCH_CALLS = 100


# A device-wide synchronisation waiting longer than one on the idle device (about 20 us on the H200 box) by more than
# this, plus this share of the call's own time, waited for work; hiding work on other streams gains at most that. The
# share: after an honest call of one long kernel the first synchronisation is itself slower, by about 30 us after a
# 1.5 ms gemm in a fresh process on the H200 (a stream's synchronisation before the timed one pays part of that), and
# late in fleet runs with kernel spans, honest calls of 1.0-5.7 ms waited 43-116 us in two passes (up to 5% of the
# call): a 1% share took 5 of 459 such timings for work on other streams (docs/timing.md, bench/h200_check.md).
UNSEEN_WORK_S = 30e-6
UNSEEN_WORK_SHARE = 0.05
# Passes of the device-wide check that must all find work left on other streams for a timing to count it.
UNSEEN_WORK_PASSES = 2

# The lead ahead of a call covers this multiple of the host's launch time (measured per call), up to the cap: a call
# that keeps the host longer (one that waits on the GPU itself) is timed with its host time in, and says so.
LEAD_MARGIN = 1.5
LEAD_CAP_S = 1e-3
# Spun before calibrating the lead, about 5 ms at the H200's clocks: an idle GPU's clocks are down, and the lead's
# spin is counted in SM clock cycles.
CLOCK_WARMUP_CYCLES = 10_000_000


def median_is_stable(times: list[float], policy: TimingPolicy) -> bool:
    """Whether the median's standard error (about 0.93 x IQR / sqrt(n) for a roughly normal sample) is under
    ``policy.stable_error`` of it."""
    if len(times) < max(policy.stable_min_calls, 4):
        return False
    median, spread = quantiles(times)
    return median > 0 and 0.93 * spread / len(times) ** 0.5 <= policy.stable_error


def quantiles(times: list[float]) -> tuple[float, float]:
    """(median, interquartile range / median)."""
    median = statistics.median(times)
    if len(times) < 4 or median <= 0:
        return median, 0.0
    q1, _, q3 = statistics.quantiles(times, n=4)
    return median, (q3 - q1) / median


class L2Flush:
    """Writes a buffer at least twice the L2's size, so no call finds the previous call's data in cache.

    It is also the first part of the lead the host gets to launch the timed call (see LaunchLead): at least 256 MiB
    (about 80 us of writing on the H200, as triton's do_bench flushes), which covers a fast launch without a spin."""

    def __init__(self, device: torch.device, nbytes: int | None = None):
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 << 20
        self.buffer = torch.empty(max(nbytes or 0, 2 * l2, FLUSH_FLOOR_BYTES), dtype=torch.int8, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


class LaunchLead:
    """GPU work queued ahead of each timed call, for longer than the host takes to launch the call: the L2 flush,
    then, for trusted calls only, a spin kernel when the flush alone is too short. Without it, the start event of a
    call whose launch is slow (torch.compile's guard checks take ~37 us per call on the H200 box, eager references
    with several kernels ~90 us, more when the CPU is busy with builds) fires on an idle GPU and the time includes the
    host's: the same RMSNorm T_b on 7 tokens measured 5 to 48 us across fleet runs.

    The lead each call actually got is measured on the GPU (an event before it, the call's start event after it), so
    a spin that runs short (the SM clock is not what it was when the spin was calibrated) is seen: a call whose
    launch outlasted its measured lead is not counted (``led_samples``), and the lead grows to cover the next ones.

    Why no spin for candidates: work a call puts on another stream, joined back to the current one, starts at once
    and runs during the lead, before the start event, out of the time. The flush bounds that (as in do_bench); a
    spin grown to a slow launch would not. A check for such work in a pass without a lead misfired on honest calls
    (an idle H200 adds tens of microseconds before a call's first kernel), so candidates get the flush alone: a
    candidate slower to launch than the flush takes is timed with its host time in, and its method says so."""

    def __init__(self, device: torch.device, flush: L2Flush, *, spin: bool):
        self.flush = flush
        self.spin = spin
        torch.cuda._sleep(CLOCK_WARMUP_CYCLES)  # an idle GPU's clocks are down: time (and calibrate) at working ones
        self.flush_s = min(_gpu_seconds(flush) for _ in range(3))
        self.cycles_per_s = 0.0
        if spin:
            probe_cycles = 200_000
            self.cycles_per_s = probe_cycles / min(_gpu_seconds(lambda: torch.cuda._sleep(probe_cycles))
                                                   for _ in range(3))
        self.spin_cycles = 0
        self.measured_s = self.flush_s

    @property
    def capped(self) -> bool:
        return not self.spin or self.measured_s >= LEAD_CAP_S * 0.99

    def cover(self, host_s: float, lead_s: float | None = None, spin_s: float | None = None) -> None:
        """Lengthen the lead (never shorten it) to LEAD_MARGIN x ``host_s``, up to LEAD_CAP_S. ``lead_s`` and
        ``spin_s``: the whole lead and its spin as the last calls got them on the GPU; the spin's length recalibrates
        the cycles it is given (the SM clock may have moved since the calibration)."""
        if lead_s is not None:
            self.measured_s = lead_s
        if not self.spin:
            return
        if spin_s and self.spin_cycles:
            self.cycles_per_s = self.spin_cycles / spin_s
        wanted_s = min(LEAD_CAP_S, LEAD_MARGIN * host_s) - self.flush_s
        self.spin_cycles = max(self.spin_cycles, int(wanted_s * self.cycles_per_s))

    def __call__(self, after_flush: torch.cuda.Event | None = None) -> None:
        self.flush()
        if after_flush is not None:
            after_flush.record()
        if self.spin_cycles:
            torch.cuda._sleep(self.spin_cycles)


def _gpu_seconds(work: Callable[[], None]) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(50_000)  # the GPU busy while ``work`` is launched: the events see its GPU time alone
    start.record()
    work()
    end.record()
    end.synchronize()
    return max(start.elapsed_time(end) / 1e3, 1e-9)


def host_bound(led: int, calls: int, min_calls: int) -> bool:
    """Whether too few of ``calls`` were led to time a call by its GPU work alone: fewer than ``min_calls`` and
    fewer than half of them. (The first call after a long synchronisation can launch slowly on a host just woken, so
    a long kernel timed the minimum number of times may miss that minimum by a call or two.)"""
    return led < min_calls and 2 * led < calls


def led_calls(hosts: list[float], leads: list[float]) -> list[bool]:
    """Per call, whether the host launched it within the lead the GPU gave it (so the GPU never waited on the host
    for it). ``hosts``: from before the lead's launch to after the call's end event, seconds; ``leads``: from an
    event before the lead to the call's start event, on the GPU, seconds. The GPU reached the event before the lead
    no earlier than the host queued it, so it reached the start event after the host had launched the whole call
    whenever the lead outlasted the launch."""
    return [h < lead for h, lead in zip(hosts, leads, strict=True)]


def led_samples(times: list[float], hosts: list[float], leads: list[float]) -> list[float]:
    """The times of the calls launched within their lead (see led_calls)."""
    return [t for t, led in zip(times, led_calls(hosts, leads), strict=True) if led]


class RotatingInputs:
    """Input sets staged (untimed) into buffers for timed calls. The buffer count is coprime with the number of
    sets, so a buffer holds different data on successive uses and a cache keyed by address returns stale results."""

    def __init__(self, input_sets: list[dict]):
        self.sets = input_sets
        count = len(input_sets)
        self.slots = 2 if count % 2 else 3 if count % 3 else count + 1
        self.staged = [{n: (v.clone() if isinstance(v, torch.Tensor) else v) for n, v in input_sets[0].items()}
                       for _ in range(self.slots)]

    def set_index(self, call: int) -> int:
        return call % len(self.sets)

    def stage(self, call: int) -> int:
        """Copy the inputs of ``call`` into its buffer; returns the buffer's index."""
        slot = call % self.slots
        for name, value in self.sets[self.set_index(call)].items():
            if isinstance(value, torch.Tensor):
                self.staged[slot][name].copy_(value)
            else:
                self.staged[slot][name] = value
        return slot


# A led call's event interval is its span plus the event pair's own cost on the GPU (2.3-2.8 us on the H200, whatever
# the call's length). A span shorter than its events by more than this, plus this share of them, missed GPU work
# the events saw (work hidden from CUPTI, say by turning its tracing off): the event time stands.
SPAN_SHORTFALL_MS = 0.010
SPAN_SHORTFALL_SHARE = 0.05


@dataclass(frozen=True)
class TimedCall:
    """One timed call: its event interval (ms), its CUPTI span (ms; None when CUPTI was off or saw no GPU work
    launched in the call's window) and whether the host launched it within its lead."""
    event_ms: float
    span_ms: float | None
    led: bool

    @property
    def span_short(self) -> bool:
        """Whether the span fell short of the events by more than their own cost (see SPAN_SHORTFALL_MS). Only a led
        call's events are its GPU time: those of a call not led have the host's launch in them."""
        return self.led and self.span_ms is not None and (
            self.event_ms - self.span_ms > SPAN_SHORTFALL_MS + SPAN_SHORTFALL_SHARE * self.event_ms)

    @property
    def spanned(self) -> bool:
        """Timed by its span: every call whose span was seen, led or not, as upstream times each call from its
        first activity's start to its last one's end (the host's gaps between its launches included). A led call
        whose span fell short of its events keeps its event time."""
        return self.span_ms is not None and not self.span_short

    @property
    def time_ms(self) -> float:
        return self.span_ms if self.spanned else self.event_ms


def timing_method(counted: list[TimedCall], traced: bool, bound: bool) -> str:
    """The method sentence of a timing (``timing_method_of`` described)."""
    return timing_method_of(counted, traced, bound).describe()


def timing_method_of(counted: list[TimedCall], traced: bool, bound: bool) -> TimingMethod:
    """The method of a timing from its counted calls; ``traced``: CUPTI traced all of them; ``bound``: host-bound
    (the calls not led are counted too, at their event times)."""
    spanned = any(c.spanned for c in counted)
    notes = []
    if traced and any(c.span_ms is None for c in counted):
        notes.append("cuda events for the calls that launched no GPU work" if spanned
                     else "CUPTI saw no GPU work launched by the calls")
    if traced and any(c.span_short for c in counted):
        notes.append("cuda events for the calls whose kernel span fell short of them")
    return TimingMethod(CUPTI_SPAN if spanned else CUDA_EVENTS, host_bound=bound, notes=tuple(notes))


def spans_hold(check: list[TimedCall]) -> bool | None:
    """Whether the spans of the check pass's calls (each launched behind a spin long enough for the host, so its
    events are its GPU time) agree with their events: True, False when most led ones fell short (work the events
    saw and CUPTI did not: a candidate may turn the tracing off around its own launches), None when no call of the
    pass was led and had a span."""
    led = [c for c in check if c.led and c.span_ms is not None]
    if not led:
        return None
    return 2 * sum(c.span_short for c in led) <= len(led)


def time_cuda(call: Callable[[int], None], prepare: Callable[[int], None], device: torch.device,
              policy: TimingPolicy = TimingPolicy(), *, trusted: bool = False) -> Timing:
    """Time ``call(i)`` for i = 0, 1, 2, ...; ``prepare(i)`` (untimed) stages the inputs of call i beforehand.

    With ``policy.kernel_spans``, where CUPTI can trace in this process, every call is timed by its CUPTI kernel
    span (core.evaluate.cupti_span), once a short pass behind a spin has shown the spans agree with the events;
    otherwise, or where tracing fails midway, by its event interval (for the whole timing).

    ``trusted``: the call is ours (the reference, torch.compile of it), so its lead may grow past the flush with a
    spin to cover a slow launch; a candidate's lead is the flush alone (see LaunchLead)."""
    flush = L2Flush(device, policy.flush_bytes)
    # On from the warm-up, so that the launch times the lead is sized by include the tracing's own cost.
    tracer = KernelSpanTracer.start(device)[0] if policy.kernel_spans else None
    try:
        timed = _timed_calls(call, prepare, device, policy, flush, tracer, trusted)
        check: list[TimedCall] = []
        if tracer is not None and tracer.on:
            check = _with_spans(_span_check_calls(call, prepare, device, policy, flush, tracer), tracer)
        traced = tracer is not None and tracer.on
    finally:
        if tracer is not None:
            tracer.stop()
    counted, method = counted_calls_method(timed, check, traced, policy.min_calls)
    median, spread = quantiles([c.time_ms for c in counted])
    # With spans too: work on another stream hidden from CUPTI shows only here.
    unseen = _device_wide_check(call, prepare, device, policy, flush, median / 1e3)
    return unseen or Timing(median, spread, len(counted), method.describe(), method)


def counted_calls(timed: list[TimedCall], check: list[TimedCall], traced: bool,
                  min_calls: int) -> tuple[list[TimedCall], str]:
    """``counted_calls_method`` with the method as its sentence."""
    counted, method = counted_calls_method(timed, check, traced, min_calls)
    return counted, method.describe()


def counted_calls_method(timed: list[TimedCall], check: list[TimedCall], traced: bool,
                         min_calls: int) -> tuple[list[TimedCall], TimingMethod]:
    """The calls a timing counts, and its method. ``traced``: CUPTI traced the whole timing, ``timed`` and the
    check pass's ``check`` carry spans. Spans are used once ``spans_hold`` says they agree with the events; then
    every call counts by its span, as upstream counts it (a host slower than the GPU changes nothing). Otherwise
    the led calls count by their events, all of them when too few were led (host-bound)."""
    dropped = ""
    if traced:
        holds = spans_hold(check)
        if holds is None and any(c.span_ms is not None for c in timed):
            traced, dropped = False, "unchecked"
        elif holds is False:
            traced, dropped = False, "hidden"
    if traced:
        return timed, timing_method_of(timed, True, False)
    timed = [TimedCall(c.event_ms, None, c.led) for c in timed]
    counted = [c for c in timed if c.led]
    bound = host_bound(len(counted), len(timed), min_calls)
    method = timing_method_of(timed if bound else counted, False, bound)
    if dropped:
        method = replace(method, spans_dropped=dropped,
                         lead_cap_ms=LEAD_CAP_S * 1e3 if dropped == "unchecked" else None)
    return (timed if bound else counted), method


def _timed_calls(call: Callable[[int], None], prepare: Callable[[int], None], device: torch.device,
                 policy: TimingPolicy, flush: L2Flush, tracer: KernelSpanTracer | None,
                 trusted: bool) -> list[TimedCall]:
    """Warm up, size the lead and the run, then time calls in batches until the led ones' median (of their events)
    is stable. Returns the calls, without spans; with a tracer, each call is marked for CUPTI (``tracer.open()``
    before its start event, ``tracer.close()`` after its end event)."""
    launches = []
    for i in range(policy.warmup_calls):
        prepare(i)
        began = time.perf_counter()
        call(i)
        launches.append(time.perf_counter() - began)
    torch.cuda.synchronize(device)
    lead = LaunchLead(device, flush, spin=trusted)
    lead.cover(statistics.median(launches) if launches else 0.0)

    # Estimate one call's time to size the run, then measure.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    prepare(0)
    lead()
    start.record()
    call(0)
    end.record()
    torch.cuda.synchronize(device)
    # A call takes the longer of its GPU time and its launch on the host: a host-bound call sized by its GPU time
    # alone held the GPU for many times the target (25 s for one T_b of a reference looping over a batch).
    estimate_s = max(start.elapsed_time(end) / 1e3, statistics.median(launches) if launches else 0.0, 1e-6)
    planned = int(min(policy.max_calls, max(policy.min_calls, policy.target_seconds / estimate_s)))

    batch = min(BATCH_CALLS, planned)
    befores, flushed, starts, ends = ([torch.cuda.Event(enable_timing=True) for _ in range(batch)]
                                      for _ in range(4))
    timed: list[TimedCall] = []
    times: list[float] = []  # the counted calls' times (spans where CUPTI gave them), for the stability stop
    made = 0
    while len(times) < planned and not median_is_stable(times, policy) and made < planned + 2 * batch:
        count = min(batch, planned - len(times))
        hosts = []
        for j in range(count):
            prepare(made + j)
            began = time.perf_counter()
            befores[j].record()
            lead(flushed[j])
            # The call's markers, for CUPTI: the lead's launches fall outside them, and the events between them
            # launch no GPU work of their own.
            if tracer is not None:
                tracer.open()
            starts[j].record()
            call(made + j)
            ends[j].record()
            if tracer is not None:
                tracer.close()
            hosts.append(time.perf_counter() - began)
        made += count
        torch.cuda.synchronize(device)
        batch_times = [starts[j].elapsed_time(ends[j]) for j in range(count)]
        leads = [befores[j].elapsed_time(starts[j]) / 1e3 for j in range(count)]
        spins = [flushed[j].elapsed_time(starts[j]) / 1e3 for j in range(count)]
        batch_timed = [TimedCall(t, None, led) for t, led in zip(batch_times, led_calls(hosts, leads), strict=True)]
        if tracer is not None and tracer.on:
            batch_timed = _with_spans(batch_timed, tracer)
        timed += batch_timed
        # With spans every call counts (see time_cuda), by its span: steadier than its events, so a timing with
        # spans is stable sooner, and has fewer CUPTI records to decode.
        times += [c.time_ms for c in batch_timed if c.led or tracer is not None]
        lead.cover(statistics.quantiles(hosts, n=10)[-1] if len(hosts) > 1 else hosts[0], statistics.median(leads),
                   statistics.median(spins))
        if not any(c.led for c in batch_timed) and lead.capped and tracer is None:
            break
    return timed


def _with_spans(calls: list[TimedCall], tracer: KernelSpanTracer) -> list[TimedCall]:
    """The calls just marked, with their spans once the GPU has finished them; unchanged where the tracer gave none
    (it is then off, and the whole timing falls back to its events)."""
    spans = tracer.spans_ms(len(calls))
    if spans is None:
        return calls
    return [TimedCall(c.event_ms, span, c.led) for c, span in zip(calls, spans, strict=True)]


def _span_check_calls(call: Callable[[int], None], prepare: Callable[[int], None], device: torch.device,
                      policy: TimingPolicy, flush: L2Flush, tracer: KernelSpanTracer) -> list[TimedCall]:
    """``policy.device_check_calls`` calls, each behind the longest spin (LEAD_CAP_S), so that the events of those
    the host launched within it time their GPU work alone, for ``spans_hold``. A spin lets work the call puts on
    another stream start early, which shortens the events and never the span (CUPTI ties that work to the call's
    launches): the comparison can only find spans too short, never excuse them."""
    lead = LaunchLead(device, flush, spin=True)
    lead.cover(LEAD_CAP_S)  # the longest spin: a few milliseconds in all
    count = max(1, policy.device_check_calls)
    befores, starts, ends = ([torch.cuda.Event(enable_timing=True) for _ in range(count)] for _ in range(3))
    hosts = []
    for j in range(count):
        prepare(j)
        began = time.perf_counter()
        befores[j].record()
        lead()
        tracer.open()
        starts[j].record()
        call(j)
        ends[j].record()
        tracer.close()
        hosts.append(time.perf_counter() - began)
    torch.cuda.synchronize(device)
    leads = [befores[j].elapsed_time(starts[j]) / 1e3 for j in range(count)]
    return [TimedCall(starts[j].elapsed_time(ends[j]), None, led)
            for j, led in zip(range(count), led_calls(hosts, leads), strict=True)]


def left_unseen_work(lags: list[float], call_s: float) -> bool:
    """Whether device-wide synchronisations after calls (``lags``: each one's wait beyond an idle synchronisation's,
    seconds) waited for work the current stream's events did not see, for calls of ``call_s`` seconds each."""
    return bool(lags) and statistics.median(lags) > UNSEEN_WORK_S + UNSEEN_WORK_SHARE * call_s


def _device_wide_check(call: Callable[[int], None], prepare: Callable[[int], None], device: torch.device,
                       policy: TimingPolicy, flush: L2Flush, call_s: float) -> Timing | None:
    """The calls timed to the end of a device-wide synchronisation when they leave work on other streams, or None
    when they do not: a pass of ``_synchronised_calls`` that finds such work is repeated, and only work found by
    both counts (a host slowed down for a moment, by builds on every core, lengthens one pass's waits)."""
    waits_us = []
    for _ in range(UNSEEN_WORK_PASSES):
        lags, device_times = _synchronised_calls(call, prepare, device, policy, flush)
        if not left_unseen_work(lags, call_s):
            return None
        waits_us.append(f"{statistics.median(lags) * 1e6:.0f}")
    device_median, device_spread = quantiles(device_times)
    method = TimingMethod(DEVICE_SYNC, waits_us=tuple(waits_us))
    return Timing(device_median, device_spread, len(device_times), method.describe(), method)


def _synchronised_calls(call: Callable[[int], None], prepare: Callable[[int], None], device: torch.device,
                        policy: TimingPolicy, flush: L2Flush) -> tuple[list[float], list[float]]:
    """A shorter pass that shows work left on other streams: per call, the device-wide synchronisation's wait beyond
    an idle one's (s) and the time to its end (ms).

    Each call starts on an idle GPU (flush, then a device-wide synchronisation, no lead), so work the call puts on
    any stream begins after its start event. Once the current stream has finished the call, a device-wide
    synchronisation should return as fast as one on the idle device; time it waits beyond that is work left on other
    streams, unseen by the current stream's events. Then the calls are timed as in this pass, to the end of the
    device-wide synchronisation, with the host's launch time in (conservative: honest kernels seldom need other
    streams)."""
    starts, ends, after = ([torch.cuda.Event(enable_timing=True) for _ in range(policy.device_check_calls)]
                           for _ in range(3))
    lags, device_times = [], []
    stream = torch.cuda.current_stream(device)  # taken before any call: a call may leave another stream current
    for i in range(policy.device_check_calls):
        prepare(i)
        flush()
        torch.cuda.synchronize(device)
        starts[i].record()
        call(i)
        ends[i].record()
        ends[i].synchronize()
        # The first synchronisation after a long kernel is slower by itself (after a 1.5 ms gemm, 30 us even for a
        # stream already seen finished): this stream's pays that, blind to other streams, not the timed one.
        stream.synchronize()
        began = time.perf_counter()
        torch.cuda.synchronize(device)
        lags.append(time.perf_counter() - began)
        after[i].record()
        after[i].synchronize()
        began = time.perf_counter()
        torch.cuda.synchronize(device)  # the same wait on an idle device: what a synchronisation costs by itself
        lags[-1] -= time.perf_counter() - began
        device_times.append(starts[i].elapsed_time(after[i]))
    return lags, device_times


def time_cpu(call: Callable[[int], None], prepare: Callable[[int], None],
             policy: TimingPolicy = TimingPolicy()) -> Timing:
    for i in range(policy.warmup_calls):
        prepare(i)
        call(i)
    prepare(0)
    began = time.perf_counter()
    call(0)
    estimate_s = max(time.perf_counter() - began, 1e-6)
    planned = int(min(policy.max_calls, max(policy.min_calls, policy.target_seconds / estimate_s)))
    times: list[float] = []
    while len(times) < planned and not (len(times) % BATCH_CALLS == 0 and median_is_stable(times, policy)):
        prepare(len(times))
        began = time.perf_counter()
        call(len(times))
        times.append((time.perf_counter() - began) * 1e3)
    median, spread = quantiles(times)
    method = TimingMethod(WALL)
    return Timing(median, spread, len(times), method.describe(), method)
