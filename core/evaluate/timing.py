"""Timing a call the way kernels should be timed: warm-up, L2 flushed before each call, rotated inputs, adaptive
repetition, median and spread; all streams covered by a device-wide check.

Per call, CUDA events bracket the call on the current stream (as ``triton.testing.do_bench`` does). A second,
shorter pass waits for the current stream after each call and then for the whole device; when the device still has
work to finish, the call left work on other streams, and the time to the end of the device-wide synchronisation is
reported instead, with the method saying so.
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


# A device-wide synchronisation of an idle GPU returns in a few microseconds.
UNSEEN_WORK_S = 30e-6


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

    The write also has a second job: while the GPU works through it, the host launches the timed call, so the
    start event does not sit on an idle GPU waiting for the host. With only 2 x 50 MiB on the H200 (about 30 us of
    writing), the torch.compile'd RMSNorm reference on 7 tokens measured 35 us, against 3.9 us with 256 MiB (about
    80 us of writing; triton's do_bench flushes the same), which covers its host-side guard checks and launch."""

    def __init__(self, device: torch.device, nbytes: int | None = None):
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 << 20
        self.buffer = torch.empty(max(nbytes or 0, 2 * l2, FLUSH_FLOOR_BYTES), dtype=torch.int8, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


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
              policy: TimingPolicy = TimingPolicy()) -> Timing:
    """Time ``call(i)`` for i = 0, 1, 2, ...; ``prepare(i)`` (untimed) stages the inputs of call i beforehand."""
    flush = L2Flush(device, policy.flush_bytes)
    for i in range(policy.warmup_calls):
        prepare(i)
        call(i)
    torch.cuda.synchronize(device)

    # Estimate one call's time to size the run, then measure.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    prepare(0)
    flush()
    start.record()
    call(0)
    end.record()
    torch.cuda.synchronize(device)
    estimate_s = max(start.elapsed_time(end) / 1e3, 1e-6)
    planned = int(min(policy.max_calls, max(policy.min_calls, policy.target_seconds / estimate_s)))

    batch = min(BATCH_CALLS, planned)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(max(batch, policy.device_check_calls))]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(len(starts))]
    times: list[float] = []
    while len(times) < planned and not median_is_stable(times, policy):
        first = len(times)
        count = min(batch, planned - first)
        for j in range(count):
            prepare(first + j)
            flush()
            starts[j].record()
            call(first + j)
            ends[j].record()
        torch.cuda.synchronize(device)
        times += [starts[j].elapsed_time(ends[j]) for j in range(count)]
    calls = len(times)
    median, spread = quantiles(times)

    # The device-wide check: once the current stream has finished a call, a device-wide synchronisation should
    # return at once. Time it still has to wait is work the call left on other streams, which the events above
    # did not see; then the call is timed to the end of that synchronisation instead.
    after = [torch.cuda.Event(enable_timing=True) for _ in range(policy.device_check_calls)]
    lags, device_times = [], []
    for i in range(policy.device_check_calls):
        prepare(i)
        flush()
        starts[i].record()
        call(i)
        ends[i].record()
        ends[i].synchronize()
        began = time.perf_counter()
        torch.cuda.synchronize(device)
        lags.append(time.perf_counter() - began)
        after[i].record()
        after[i].synchronize()
        device_times.append(starts[i].elapsed_time(after[i]))
    if lags and statistics.median(lags) > UNSEEN_WORK_S:
        device_median, device_spread = quantiles(device_times)
        return Timing(device_median, device_spread, len(device_times),
                      "cuda events around a device-wide synchronisation (work seen outside the current stream)")
    return Timing(median, spread, calls, "cuda events per call, L2 flushed, device-wide check")


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
