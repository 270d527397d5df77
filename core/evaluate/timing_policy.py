"""How calls are to be timed (``core.evaluate.timing`` times them): a policy every layer passes around, in a module
without torch, so that processes that only pass it on (the CLI, the fleet, the pool's parent) start without torch."""

from __future__ import annotations

from dataclasses import dataclass


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
    # Time each call by its CUPTI kernel span (core.evaluate.cupti_span) where cupti-python is installed, as
    # upstream SOL-ExecBench does, instead of by CUDA events, which add 2-3 us a call. Off by default: on the H200
    # (2026-12-02) the default fleet run with spans ended after 5 min 38 s where events take 4 min 21 s (reading
    # CUPTI's records costs about 45 us each); bench/cupti_kinds.md.
    kernel_spans: bool = False


# The short timing of ``[evaluation] timing = "quick"`` and of ``kernelfleet eval --quick-timing`` (tests): fewer,
# shorter timed runs, for candidates and baselines alike.
QUICK_TIMING = TimingPolicy(warmup_calls=1, min_calls=5, max_calls=100, target_seconds=0.02, device_check_calls=3)


def describe(policy: TimingPolicy, device: str) -> str:
    """One line for a run's log: how calls will be timed on ``device``."""
    from core.evaluate import cupti_span

    if not device.startswith("cuda"):
        return "timing: wall clock per call (cpu)"
    if not policy.kernel_spans:
        return ("timing: CUDA events per call, which read 2-3 us more per call than upstream SOL-ExecBench's CUPTI "
                "kernel spans ([evaluation] kernel_spans = true for spans: slower)")
    why = cupti_span.unavailable()
    if why:
        return (f"timing: CUDA events per call, 2-3 us more per call than upstream's CUPTI kernel spans ({why}; "
                f"pip install cupti-python for spans)")
    return "timing: each call's CUPTI kernel span, as upstream SOL-ExecBench times it"
