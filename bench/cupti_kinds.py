"""What CUPTI's activity kinds cost the host, and whether GPU records alone can be told apart per call.

Until this bench, kernelfleet's kernel spans (core/evaluate/cupti_span.py) enabled the RUNTIME and DRIVER kinds, as
upstream does, to match each kernel to the call that launched it; a run with spans on did 39 attempts where events
did 94. Each mode runs in a fresh process (CUPTI leaves a process slower after it is finalized):

- host time per round of launch-bound torch work (4 kernels) with CUPTI off, with the GPU kinds only
  (CONCURRENT_KERNEL, MEMCPY, MEMSET) and with RUNTIME and DRIVER added, during the tracing and after it;
- what enabling the kinds, and flushing and finalizing, cost;
- with the GPU kinds only: whether a marker memset of a distinctive size before and after each call delimits the
  calls' records in correlation-id order, for torch kernels (runtime API), a cupy RawKernel (driver API), a kernel
  on a second stream and a device-to-device copy.

    PYTHONPATH=/tmp/site:$PWD python3 bench/cupti_kinds.py [--cycle | --flush]   (a GPU machine with cupti-python
                                                                                and cupy)
--cycle: enabling, flushing, disabling three times in one process; --flush: one flush's cost against its records.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time


def _host_work(n: int, tensors) -> None:
    import torch

    small, w, v = tensors
    for _ in range(n):
        small.add_(1e-4)
        torch.nn.functional.layer_norm(w, (64,))
        (w @ v).relu_()


def _per_round_us(tensors) -> float:
    import torch

    rounds = []
    for _ in range(5):
        torch.cuda.synchronize()
        began = time.perf_counter()
        _host_work(400, tensors)
        rounds.append((time.perf_counter() - began) / 400 * 1e6)
        torch.cuda.synchronize()
    return statistics.median(rounds)


def _kinds(cupti, mode: str) -> list:
    gpu = [cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.MEMCPY, cupti.ActivityKind.MEMSET]
    return {"off": [], "gpu": gpu, "api": gpu + [cupti.ActivityKind.RUNTIME, cupti.ActivityKind.DRIVER]}[mode]


def cost(mode: str) -> dict:
    import torch
    from cupti import cupti

    device = torch.device("cuda")
    tensors = (torch.randn(1024, device=device), torch.randn(64, 64, device=device),
               torch.randn(64, 64, device=device))
    _host_work(200, tensors)
    result = {"mode": mode, "before_us": _per_round_us(tensors)}
    records = [0]

    def requested():
        return 8 << 20, 0

    def completed(activities):
        records[0] += len(activities)

    for cycle in range(2):
        kinds = _kinds(cupti, mode)
        began = time.perf_counter()
        for kind in kinds:
            cupti.activity_enable(kind)
        if kinds:
            cupti.activity_register_callbacks(requested, completed)
        result[f"enable_ms_{cycle}"] = (time.perf_counter() - began) * 1e3
        result[f"during_us_{cycle}"] = _per_round_us(tensors)
        began = time.perf_counter()
        if kinds:
            cupti.activity_flush_all(0)
            for kind in kinds:
                cupti.activity_disable(kind)
            cupti.finalize()
        result[f"finalize_ms_{cycle}"] = (time.perf_counter() - began) * 1e3
        result[f"after_us_{cycle}"] = _per_round_us(tensors)
    result["records"] = records[0]
    return result


def cycle() -> dict:
    """The GPU kinds enabled, then disabled without finalizing, three times; then finalized: what each step costs."""
    import torch
    from cupti import cupti

    device = torch.device("cuda")
    tensors = (torch.randn(1024, device=device), torch.randn(64, 64, device=device),
               torch.randn(64, 64, device=device))
    _host_work(200, tensors)
    result = {"mode": "cycle", "before_us": _per_round_us(tensors)}
    kinds = _kinds(cupti, "gpu")
    cupti.activity_register_callbacks(lambda: (8 << 20, 0), lambda activities: None)
    for i in range(3):
        began = time.perf_counter()
        for kind in kinds:
            cupti.activity_enable(kind)
        result[f"enable_ms_{i}"] = (time.perf_counter() - began) * 1e3
        result[f"during_us_{i}"] = _per_round_us(tensors)
        began = time.perf_counter()
        cupti.activity_flush_all(0)
        result[f"flush_ms_{i}"] = (time.perf_counter() - began) * 1e3
        began = time.perf_counter()
        for kind in kinds:
            cupti.activity_disable(kind)
        result[f"disable_ms_{i}"] = (time.perf_counter() - began) * 1e3
        result[f"disabled_us_{i}"] = _per_round_us(tensors)
    began = time.perf_counter()
    cupti.finalize()
    result["finalize_ms"] = (time.perf_counter() - began) * 1e3
    result["finalized_us"] = _per_round_us(tensors)
    return result


def flush_cost() -> dict:
    """What one activity_flush_all costs against how many records it hands over (GPU kinds only)."""
    import torch
    from cupti import cupti

    x = torch.randn(1024, device="cuda")
    kinds = _kinds(cupti, "gpu")
    handed = [0]
    cupti.activity_register_callbacks(lambda: (8 << 20, 0), lambda activities: handed.__setitem__(0, len(activities)
                                                                                                 + handed[0]))
    for kind in kinds:
        cupti.activity_enable(kind)
    result = {}
    for launches in (0, 10, 100, 1000, 10000, 0):
        for _ in range(launches):
            x.add_(1e-4)
        torch.cuda.synchronize()
        handed[0] = 0
        began = time.perf_counter()
        cupti.activity_flush_all(0)
        result[f"{launches} launches"] = {"ms": round((time.perf_counter() - began) * 1e3, 2), "records": handed[0]}
    for kind in kinds:
        cupti.activity_disable(kind)
    cupti.finalize()
    return result


def markers() -> dict:
    import cupy
    import torch
    from cupti import cupti

    device = torch.device("cuda")
    small = torch.randn(1 << 16, device=device)
    copy_to = torch.empty_like(small)
    side = torch.cuda.Stream()
    raw = cupy.RawKernel(r'''extern "C" __global__ void scale(float* x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 1.0001f; }''', "scale")
    marker = cupy.empty(4096, dtype=cupy.uint8)
    records: list = []

    def requested():
        return 8 << 20, 0

    def completed(activities):
        records.extend((int(a.kind), a.correlation_id, getattr(a, "bytes", 0), getattr(a, "value", 0))
                       for a in activities)

    kinds = _kinds(cupti, "gpu")
    for kind in kinds:
        cupti.activity_enable(kind)
    cupti.activity_register_callbacks(requested, completed)
    stream = torch.cuda.current_stream().cuda_stream
    calls, expected = 300, []
    torch.cuda.synchronize()
    for i in range(calls):
        cupy.cuda.runtime.memsetAsync(marker.data.ptr, 0x4B, 4093, stream)  # opens a call
        small.mul_(1.0001)  # runtime API
        launched = 1
        if i % 3 == 1:
            with cupy.cuda.ExternalStream(stream):
                raw((64,), (1024,), (cupy.from_dlpack(small), cupy.int32(small.numel())))  # driver API
            launched += 1
        if i % 3 == 2:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                small.add_(1e-4)
            torch.cuda.current_stream().wait_stream(side)
            copy_to.copy_(small)
            launched += 2
        cupy.cuda.runtime.memsetAsync(marker.data.ptr, 0x46, 4091, stream)  # closes it
        expected.append(launched)
    torch.cuda.synchronize()
    cupti.activity_flush_all(0)
    for kind in kinds:
        cupti.activity_disable(kind)
    cupti.finalize()
    memset = int(cupti.ActivityKind.MEMSET)
    opened, per_call, out_of_order = None, [], 0
    for kind, _, nbytes, value in sorted(records, key=lambda r: r[1]):
        if kind == memset and (nbytes, value) == (4093, 0x4B):
            out_of_order += opened is not None
            opened = 0
        elif kind == memset and (nbytes, value) == (4091, 0x46):
            out_of_order += opened is None
            per_call.append(opened or 0)
            opened = None
        elif opened is not None:
            opened += 1
    return {"calls": calls, "delimited": len(per_call), "out_of_order": out_of_order,
            "records_per_call_as_launched": per_call == expected,
            "first_mismatches": [(i, got, want) for i, (got, want) in enumerate(zip(per_call, expected))
                                 if got != want][:5]}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--mode"]:
        print(json.dumps({"markers": markers, "cycle": cycle, "flush": flush_cost}.get(argv[1],
                                                                                     lambda: cost(argv[1]))()))
        return 0
    if argv[:1] in (["--cycle"], ["--flush"]):  # one mode alone, in a fresh process
        done = subprocess.run([sys.executable, __file__, "--mode", argv[0][2:]], capture_output=True, text=True)
        print(done.stdout.strip() or done.stderr[-1500:])
        return 0
    rows = {}
    for mode in ("off", "gpu", "api", "markers"):
        done = subprocess.run([sys.executable, __file__, "--mode", mode], capture_output=True, text=True)
        if done.returncode:
            print(f"{mode}: failed\n{done.stderr[-1500:]}")
            continue
        rows[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{'CUPTI kinds':12} {'before':>7} {'enable':>7} {'during':>7} {'finalize':>8} {'after':>7} "
          f"{'2nd enable':>10} {'during':>7} {'after':>7} {'records':>8}   (host us per round of 4 ops; ms)")
    for mode in ("off", "gpu", "api"):
        r = rows.get(mode)
        if r:
            print(f"{mode:12} {r['before_us']:7.1f} {r['enable_ms_0']:6.1f}m {r['during_us_0']:7.1f} "
                  f"{r['finalize_ms_0']:7.1f}m {r['after_us_0']:7.1f} {r['enable_ms_1']:9.1f}m "
                  f"{r['during_us_1']:7.1f} {r['after_us_1']:7.1f} {r['records']:8}")
    if "markers" in rows:
        print("markers:", json.dumps(rows["markers"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
