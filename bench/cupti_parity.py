"""kernelfleet's timing (``core.evaluate.timing.time_cuda``) against NVIDIA SOL-ExecBench's CUPTI timing on the same
calls: with CUPTI (kernel spans) and without (CUDA events), for a one-kernel and a three-kernel torch op from 16 KiB
to 512 MiB. Issue 17 wants kernelfleet's times within 10% of upstream's.

    PYTHONPATH=/tmp/site:$PWD:$PWD/.upstream/src python3 bench/cupti_parity.py

(on a GPU machine with cupti-python installed and upstream's sources on the path; see bench/h200_check.sh solx).
"""

from __future__ import annotations

import statistics
import sys
import time


def main() -> int:
    import torch
    from sol_execbench.core.bench.timing import bench_gpu_time_with_cupti

    from core.evaluate.cupti_span import KernelSpanTracer
    from core.evaluate.timing import time_cuda
    from core.evaluate.timing_policy import TimingPolicy

    tracer, why = KernelSpanTracer.start()
    print(f"CUPTI tracer: {'available' if tracer is not None else 'unavailable: ' + why}")
    if tracer is not None:
        tracer.stop()
    device = torch.device("cuda")
    print(f"{'op':7} {'floats':>10} {'kernelfleet':>12} {'events':>10} {'upstream':>10} {'kf/up':>6} "
          f"{'wall':>6} {'wall ev':>7}  method")
    for n in (1 << 12, 1 << 20, 1 << 24, 1 << 27):
        x = torch.randn(n, device=device)
        ops = {"mul": lambda: x.mul_(1.0001), "chain3": lambda: x.mul_(1.0001).add_(1e-4).relu_()}
        for name, op in ops.items():
            began = time.perf_counter()
            ours = time_cuda(lambda i: op(), lambda i: None, device, TimingPolicy(kernel_spans=True))
            wall = time.perf_counter() - began
            began = time.perf_counter()
            events = time_cuda(lambda i: op(), lambda i: None, device, TimingPolicy())  # CUDA events
            wall_events = time.perf_counter() - began
            upstream = statistics.median(bench_gpu_time_with_cupti(op, warmup=10, rep=200))
            print(f"{name:7} {n:>10} {ours.median_ms * 1e3:10.2f}us {events.median_ms * 1e3:8.2f}us "
                  f"{upstream * 1e3:8.2f}us {ours.median_ms / upstream:6.3f} {wall:5.2f}s {wall_events:6.2f}s  "
                  f"{ours.method}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
