"""Timing a call the way kernels should be timed: warm-up, L2 flushed before each call, rotated inputs, adaptive
repetition, median and spread; all streams covered by a device-wide check.

Per call, CUDA events bracket the call on the current stream (as ``triton.testing.do_bench`` does), behind a lead
of GPU work (the L2 flush, and for trusted calls a spin) that the host must launch the whole call within for the
call to count, so the time is the GPU's (see LaunchLead). A second, shorter pass starts each call on an idle GPU
and then waits for the current stream and for the whole device: when the device still has work to finish (work
left on other streams), the time to the end of the device-wide synchronisation is reported instead, with the method
saying so.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from core.evaluate.verdict import Timing


@dataclass(frozen=True)
class TimingPolicy:
    warmup_calls: int = 3
    min_calls: int = 10
    max_calls: int = 1000
    target_seconds: float = 0.1  # of measured time per workload; short kernels get more calls
    device_check_calls: int = 10
    flush_bytes: int | None = None  # None: twice the device's L2, at least 256 MiB (see L2Flush)
    # Calls stop early once the median is known this well: its standard error, estimated from the interquartile
    # range, under this fraction of the median after at least stable_min_calls calls.
    stable_error: float = 0.005
    stable_min_calls: int = 100


FLUSH_FLOOR_BYTES = 256 << 20
# Timed calls run in batches; after each batch the median's stability is checked.
BATCH_CALLS = 100


# A device-wide synchronisation waiting longer than one on the idle device (about 20 us on the H200 box) by more than
# this, plus this share of the call's own time, waited for work. The share: after an honest call of one long kernel the
# first synchronisation is itself slower, by about 17 us after 1 ms and 85-100 us after 16-64 ms on the H200.
UNSEEN_WORK_S = 30e-6
UNSEEN_WORK_SHARE = 0.01

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


def led_samples(times: list[float], hosts: list[float], leads: list[float]) -> list[float]:
    """The times of calls the host launched within the lead the GPU gave them (so the GPU never waited on the host
    for them). ``hosts``: from before the lead's launch to after the call's end event, seconds; ``leads``: from an
    event before the lead to the call's start event, on the GPU, seconds. The GPU reached the event before the lead
    no earlier than the host queued it, so it reached the start event after the host had launched the whole call
    whenever the lead outlasted the launch."""
    return [t for t, h, lead in zip(times, hosts, leads, strict=True) if h < lead]


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


def time_cuda(call: Callable[[int], None], prepare: Callable[[int], None], device: torch.device,
              policy: TimingPolicy = TimingPolicy(), *, trusted: bool = False) -> Timing:
    """Time ``call(i)`` for i = 0, 1, 2, ...; ``prepare(i)`` (untimed) stages the inputs of call i beforehand.

    ``trusted``: the call is ours (the reference, torch.compile of it), so its lead may grow past the flush with a
    spin to cover a slow launch; a candidate's lead is the flush alone (see LaunchLead)."""
    flush = L2Flush(device, policy.flush_bytes)
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
    estimate_s = max(start.elapsed_time(end) / 1e3, 1e-6)
    planned = int(min(policy.max_calls, max(policy.min_calls, policy.target_seconds / estimate_s)))

    batch = min(BATCH_CALLS, planned)
    befores, flushed, starts, ends = ([torch.cuda.Event(enable_timing=True)
                                       for _ in range(max(batch, policy.device_check_calls))] for _ in range(4))
    times: list[float] = []
    every: list[float] = []  # led or not: used only when too few calls were led (the call itself waits on the GPU)
    made = 0
    while len(times) < planned and not median_is_stable(times, policy) and made < planned + 2 * batch:
        count = min(batch, planned - len(times))
        hosts = []
        for j in range(count):
            prepare(made + j)
            began = time.perf_counter()
            befores[j].record()
            lead(flushed[j])
            starts[j].record()
            call(made + j)
            ends[j].record()
            hosts.append(time.perf_counter() - began)
        made += count
        torch.cuda.synchronize(device)
        batch_times = [starts[j].elapsed_time(ends[j]) for j in range(count)]
        leads = [befores[j].elapsed_time(starts[j]) / 1e3 for j in range(count)]
        spins = [flushed[j].elapsed_time(starts[j]) / 1e3 for j in range(count)]
        led = led_samples(batch_times, hosts, leads)
        every += batch_times
        times += led
        lead.cover(statistics.quantiles(hosts, n=10)[-1] if len(hosts) > 1 else hosts[0], statistics.median(leads),
                   statistics.median(spins))
        if not led and lead.capped:
            break
    method = "cuda events per call, L2 flushed, device-wide check"
    if host_bound(len(times), len(every), policy.min_calls):
        times = every
        method += "; host-bound: the calls kept the GPU waiting for the host"
    median, spread = quantiles(times)
    unseen = _device_wide_check(call, prepare, device, policy, flush, starts, ends, median / 1e3)
    return unseen or Timing(median, spread, len(times), method)


def left_unseen_work(lags: list[float], call_s: float) -> bool:
    """Whether device-wide synchronisations after calls (``lags``: each one's wait beyond an idle synchronisation's,
    seconds) waited for work the current stream's events did not see, for calls of ``call_s`` seconds each."""
    return bool(lags) and statistics.median(lags) > UNSEEN_WORK_S + UNSEEN_WORK_SHARE * call_s


def _device_wide_check(call: Callable[[int], None], prepare: Callable[[int], None], device: torch.device,
                       policy: TimingPolicy, flush: L2Flush, starts: list, ends: list,
                       call_s: float) -> Timing | None:
    """A shorter pass that catches work left on other streams, or None when there was none.

    Each call starts on an idle GPU (flush, then a device-wide synchronisation, no lead), so work the call puts on
    any stream begins after its start event. Once the current stream has finished the call, a device-wide
    synchronisation should return as fast as one on the idle device; time it waits beyond that is work left on other
    streams, unseen by the current stream's events. Then the calls are timed as in this pass, to the end of the
    device-wide synchronisation, with the host's launch time in (conservative: honest kernels seldom need other
    streams)."""
    after = [torch.cuda.Event(enable_timing=True) for _ in range(policy.device_check_calls)]
    lags, device_times = [], []
    for i in range(policy.device_check_calls):
        prepare(i)
        flush()
        torch.cuda.synchronize(device)
        starts[i].record()
        call(i)
        ends[i].record()
        ends[i].synchronize()
        began = time.perf_counter()
        torch.cuda.synchronize(device)
        lags.append(time.perf_counter() - began)
        after[i].record()
        after[i].synchronize()
        began = time.perf_counter()
        torch.cuda.synchronize(device)  # the same wait on an idle device: what a synchronisation costs by itself
        lags[-1] -= time.perf_counter() - began
        device_times.append(starts[i].elapsed_time(after[i]))
    if not left_unseen_work(lags, call_s):
        return None
    device_median, device_spread = quantiles(device_times)
    return Timing(device_median, device_spread, len(device_times),
                  "cuda events around a device-wide synchronisation, no lead (work seen outside the current stream)")


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
    return Timing(median, spread, len(times), "wall clock per call (cpu)")
