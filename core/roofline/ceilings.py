"""Measured ceilings of the local GPU, for GPUs the datasheet table does not know (GPU only).

Three measurements, each the best of a few timed repetitions with CUDA events: a large device-to-device copy
(bandwidth = bytes read + bytes written over time), a large bf16 matmul (tensor rate), an fp32 matmul with TF32 off
(SIMT rate), and where ``torch._scaled_mm`` works an fp8 e4m3 matmul. The result is cached as JSON under
``cache_root()/"ceilings"/<gpu name>.json`` so it is measured once per device model.

Measured ceilings sit below the true peaks (cuBLAS reaches ~75% of the bf16 datasheet rate on an H200, a copy ~88%
of the HBM peak), so a T_sol priced from them is not a strict lower bound: a very good kernel can beat it. The
table in ``core.roofline.specs`` is preferred wherever the GPU is known.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType

from core.cache import cache_root
from core.roofline.specs import GpuSpec

CACHE_VERSION = 1


@dataclass(frozen=True)
class Ceilings:
    name: str
    sm_count: int
    l2_bytes: int
    memory_bytes: int
    copy_bandwidth_bytes_s: float
    bf16_matmul_flops: float
    fp32_matmul_flops: float
    fp8_matmul_flops: float | None = None
    torch_version: str = ""
    measured_at: float = 0.0
    details: dict = field(default_factory=dict)


def cache_path(gpu_name: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", gpu_name).strip("_") or "gpu"
    return cache_root() / "ceilings" / f"{safe}.json"


def load_cached(gpu_name: str) -> Ceilings | None:
    path = cache_path(gpu_name)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or data.get("name") != gpu_name:
        return None
    data.pop("version", None)
    try:
        return Ceilings(**data)
    except TypeError:
        return None


def measure_ceilings(device=None, *, use_cache: bool = True) -> Ceilings:
    """Measure (or read from the on-disk cache) the ceilings of a CUDA device. Takes a few seconds uncached."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("measure_ceilings needs a CUDA device")
    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    name = torch.cuda.get_device_name(device)
    if use_cache:
        cached = load_cached(name)
        if cached is not None:
            return cached
    props = torch.cuda.get_device_properties(device)
    with torch.cuda.device(device):
        free, _total = torch.cuda.mem_get_info(device)
        bandwidth = _copy_bandwidth(torch, device, free)
        bf16 = _matmul_rate(torch, device, torch.bfloat16, free)
        fp32 = _fp32_simt_rate(torch, device, free)
        fp8 = _fp8_rate(torch, device, free)
    ceilings = Ceilings(
        name=name, sm_count=props.multi_processor_count, l2_bytes=int(getattr(props, "L2_cache_size", 0)),
        memory_bytes=int(props.total_memory), copy_bandwidth_bytes_s=bandwidth, bf16_matmul_flops=bf16,
        fp32_matmul_flops=fp32, fp8_matmul_flops=fp8, torch_version=torch.__version__, measured_at=time.time(),
    )
    if use_cache:
        path = cache_path(name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"version": CACHE_VERSION, **asdict(ceilings)}, indent=2))
            tmp.replace(path)
        except OSError:
            pass  # a read-only cache costs a re-measurement next time, nothing else
    return ceilings


def spec_from_ceilings(ceilings: Ceilings) -> GpuSpec:
    """A GpuSpec priced at the measured rates (source="measured")."""
    tensor = {"bfloat16": ceilings.bf16_matmul_flops, "float16": ceilings.bf16_matmul_flops}
    if ceilings.fp8_matmul_flops:
        tensor["float8_e4m3fn"] = tensor["float8_e5m2"] = ceilings.fp8_matmul_flops
    return GpuSpec(
        name=ceilings.name, sm_count=ceilings.sm_count, memory_bandwidth_bytes_s=ceilings.copy_bandwidth_bytes_s,
        fp32_simt_flops=ceilings.fp32_matmul_flops, tensor_flops=MappingProxyType(tensor),
        l2_bytes=ceilings.l2_bytes, memory_bytes=ceilings.memory_bytes, fp64_simt_flops=0.0, source="measured",
        notes=f"measured with torch {ceilings.torch_version}; below datasheet peaks",
    )


def _best_time(torch, fn, repeats: int = 5, inner: int = 10) -> float:
    """Best per-call time in seconds over ``repeats`` batches of ``inner`` calls (after a warm-up)."""
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3 / inner)
    return best


def _copy_bandwidth(torch, device, free: int) -> float:
    # 1 GiB each way (far beyond any L2), less where memory is short.
    nbytes = int(min(1 << 30, free // 4)) // 16 * 16
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = _best_time(torch, lambda: dst.copy_(src))
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / seconds


def _square_size(free: int, itemsize: int, largest: int) -> int:
    n = largest
    while n > 1024 and 3 * n * n * itemsize > free // 2:
        n //= 2
    return n


def _matmul_rate(torch, device, dtype, free: int, largest: int = 8192) -> float:
    n = _square_size(free, torch.tensor([], dtype=dtype).element_size(), largest)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    seconds = _best_time(torch, lambda: torch.matmul(a, b, out=out))
    del a, b, out
    torch.cuda.empty_cache()
    return 2 * n**3 / seconds


def _fp32_simt_rate(torch, device, free: int) -> float:
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return _matmul_rate(torch, device, torch.float32, free, largest=4096)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def _fp8_rate(torch, device, free: int) -> float | None:
    try:
        n = _square_size(free, 1, 8192)
        a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()  # column-major second operand
        one = torch.ones((), device=device, dtype=torch.float32)
        seconds = _best_time(torch, lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16))
        del a, b
        torch.cuda.empty_cache()
        return 2 * n**3 / seconds
    except Exception:  # no fp8 tensor cores, or no _scaled_mm in this torch
        return None


__all__ = ["Ceilings", "cache_path", "load_cached", "measure_ceilings", "spec_from_ceilings"]
