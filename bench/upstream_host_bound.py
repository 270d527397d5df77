"""Host-bound calls timed by upstream SOL-ExecBench's ``bench_gpu_time_with_cupti`` and by kernelfleet's
``time_cuda`` with kernel spans, on the same Python callable: one ``add_``, a busy wait on the host, then more
``mul_`` launches. Upstream flushes 2x the L2 and traces the RUNTIME and DRIVER activity kinds; kernelfleet flushes
at least 256 MiB and traces the GPU kinds only, so a call launching many kernels can read longer upstream. The last
columns time kernelfleet's spans behind upstream's flush size (FLUSH_FLOOR_BYTES set to 0 for them).

    SOL_EXECBENCH_SRC=../shared/sol-execbench/upstream/src PYTHONPATH=$PWD python3 bench/upstream_host_bound.py

(on a GPU machine with cupti-python and upstream's dependencies). Prints a table: per host wait and kernel count,
the median of three timings' medians (and their range) for each, and the ratios.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

CASES = [(0, 2), (20, 2), (40, 2), (0, 6), (20, 6), (0, 12)]  # (host wait in us, kernels)
REPEATS = 3


def _callable(x, y, wait_us: int, kernels: int):
    def call() -> None:
        x.add_(1)
        until = time.perf_counter() + wait_us / 1e6
        while time.perf_counter() < until:
            pass
        for _ in range(kernels - 1):
            y.mul_(2)

    return call


def _cell(values: list[float]) -> str:
    values = sorted(values)
    return f"{values[len(values) // 2]:.1f} ({values[0]:.1f}-{values[-1]:.1f})"


def main() -> int:
    src = Path(os.environ.get("SOL_EXECBENCH_SRC", Path(__file__).resolve().parents[1] / ".upstream" / "src"))
    sys.path.insert(0, str(src))
    import torch

    import core.evaluate.timing as timing
    from core.evaluate.timing_policy import TimingPolicy
    from sol_execbench.core.bench.timing import bench_gpu_time_with_cupti

    device = torch.device("cuda")
    x, y = torch.zeros(1024, device=device), torch.zeros(1024, device=device)
    policy = TimingPolicy(kernel_spans=True)
    floor = timing.FLUSH_FLOOR_BYTES

    def ours(call) -> float:
        return timing.time_cuda(lambda i: call(), lambda i: None, device, policy).median_ms * 1e3

    print("| host wait (us) | kernels | upstream (us) | kernelfleet spans (us) | upstream/kernelfleet "
          "| kernelfleet, upstream's flush (us) | upstream/that |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for wait_us, kernels in CASES:
        call = _callable(x, y, wait_us, kernels)
        theirs = []
        for _ in range(REPEATS):
            times = sorted(bench_gpu_time_with_cupti(call, warmup=10, rep=100, cold_l2_cache=True))
            theirs.append(times[len(times) // 2] * 1e3)
        spans = [ours(call) for _ in range(REPEATS)]
        timing.FLUSH_FLOOR_BYTES = 0
        try:
            small = [ours(call) for _ in range(REPEATS)]
        finally:
            timing.FLUSH_FLOOR_BYTES = floor
        median = [sorted(v)[len(v) // 2] for v in (theirs, spans, small)]
        print(f"| {wait_us} | {kernels} | {_cell(theirs)} | {_cell(spans)} | {median[0] / median[1]:.2f} "
              f"| {_cell(small)} | {median[0] / median[2]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
