"""Peak rates of the GPUs we know, from vendor datasheets, and lookup by the name torch reports.

Every figure is the dense (no 2:4 sparsity) peak at the boost clock: tensor-core rates per input dtype, the fp32
and fp64 SIMT (CUDA core) rates and the HBM bandwidth. Datasheet peaks, not what cuBLAS reaches: a speed-of-light
time must be a lower bound that no correct kernel beats, so it is priced at the peaks. A GPU missing from the table
is priced from measured ceilings instead (``core.roofline.ceilings``), which are lower than the true peaks.

Tensor-rate keys are the problem format's dtype names (``core.problem.schema.DTYPES``), plus ``"tfloat32"`` for
TF32. ``"float32"`` is deliberately absent: how an fp32 matmul is priced is a convention (``core.roofline.sol``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Mapping

TERA = 1e12
MIB = 1 << 20

# Narrower formats fall back to the next wider one the GPU has (fp8 on an A100 is priced as bf16, ...).
_FALLBACK = {
    "float4_e2m1fn_x2": "float8_e4m3fn",
    "float8_e5m2": "float8_e4m3fn",
    "float8_e4m3fn": "bfloat16",
    "int8": "bfloat16",
    "float16": "bfloat16",
    "bfloat16": "float16",
}


@dataclass(frozen=True)
class GpuSpec:
    name: str  # the name torch reports, e.g. "NVIDIA H200"
    sm_count: int
    memory_bandwidth_bytes_s: float  # HBM/GDDR peak, bytes per second
    fp32_simt_flops: float  # non-tensor fp32 FMA rate (an FMA counts as 2 flops)
    tensor_flops: Mapping[str, float]  # dense tensor-core rate per input dtype name
    l2_bytes: int
    memory_bytes: int = 0
    fp64_simt_flops: float = 0.0
    aliases: tuple[str, ...] = ()  # other names torch reports for the same part
    source: str = "datasheet"  # or "measured"
    notes: str = ""

    def tensor_rate(self, dtype: str) -> tuple[float, str] | None:
        """The dense tensor rate for matmul inputs of ``dtype`` and the dtype it was priced as.

        A format the GPU lacks is priced at the next wider one it has (fp4 -> fp8 -> bf16); None when there is
        no tensor path at all (the caller prices it at a SIMT rate).
        """
        seen = set()
        current: str | None = dtype
        while current is not None and current not in seen:
            seen.add(current)
            rate = self.tensor_flops.get(current)
            if rate:
                return rate, current
            current = _FALLBACK.get(current)
        return None


def _tensor(**rates: float) -> Mapping[str, float]:
    names = {"fp64": "float64", "tf32": "tfloat32", "bf16": "bfloat16", "fp16": "float16",
             "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "int8": "int8", "fp4": "float4_e2m1fn_x2"}
    return MappingProxyType({names[k]: v * TERA for k, v in rates.items()})


def _hopper(fp8_int8: float, bf16: float, tf32: float, fp64_tensor: float) -> Mapping[str, float]:
    return _tensor(fp64=fp64_tensor, tf32=tf32, bf16=bf16, fp16=bf16, e4m3=fp8_int8, e5m2=fp8_int8, int8=fp8_int8)


# Datasheet figures (dense; NVIDIA quotes the sparse rate = 2x dense for tf32/bf16/fp16/fp8/int8/fp4).
SPECS: tuple[GpuSpec, ...] = (
    GpuSpec(
        name="NVIDIA H100 80GB HBM3", sm_count=132, memory_bandwidth_bytes_s=3.35e12,
        fp32_simt_flops=66.9 * TERA, fp64_simt_flops=33.5 * TERA,
        tensor_flops=_hopper(fp8_int8=1978.9, bf16=989.4, tf32=494.7, fp64_tensor=66.9),
        l2_bytes=50 * MIB, memory_bytes=80 << 30, aliases=("NVIDIA H100 SXM", "NVIDIA H100 SXM5 80GB"),
        notes="H100 SXM5 datasheet",
    ),
    GpuSpec(
        name="NVIDIA H100 PCIe", sm_count=114, memory_bandwidth_bytes_s=2.0e12,
        fp32_simt_flops=51.2 * TERA, fp64_simt_flops=25.6 * TERA,
        tensor_flops=_hopper(fp8_int8=1513.0, bf16=756.5, tf32=378.0, fp64_tensor=51.2),
        l2_bytes=50 * MIB, memory_bytes=80 << 30, notes="H100 PCIe datasheet",
    ),
    GpuSpec(
        name="NVIDIA H100 NVL", sm_count=132, memory_bandwidth_bytes_s=3.9e12,
        fp32_simt_flops=60.0 * TERA, fp64_simt_flops=30.0 * TERA,
        tensor_flops=_hopper(fp8_int8=1670.5, bf16=835.5, tf32=417.5, fp64_tensor=60.0),
        l2_bytes=50 * MIB, memory_bytes=94 << 30, notes="H100 NVL datasheet",
    ),
    GpuSpec(
        name="NVIDIA H200", sm_count=132, memory_bandwidth_bytes_s=4.8e12,
        fp32_simt_flops=66.9 * TERA, fp64_simt_flops=33.5 * TERA,
        tensor_flops=_hopper(fp8_int8=1978.9, bf16=989.4, tf32=494.7, fp64_tensor=66.9),
        l2_bytes=60 * MIB, memory_bytes=141 * 10**9, aliases=("NVIDIA H200 SXM", "NVIDIA H200 141GB HBM3e"),
        notes="H200 SXM datasheet (same tensor cores and clocks as H100 SXM); L2 as measured on our H200",
    ),
    GpuSpec(
        name="NVIDIA H200 NVL", sm_count=132, memory_bandwidth_bytes_s=4.8e12,
        fp32_simt_flops=60.0 * TERA, fp64_simt_flops=30.0 * TERA,
        tensor_flops=_hopper(fp8_int8=1670.5, bf16=835.5, tf32=417.5, fp64_tensor=60.0),
        l2_bytes=60 * MIB, memory_bytes=141 * 10**9, notes="H200 NVL datasheet (lower power limit than SXM)",
    ),
    GpuSpec(
        name="NVIDIA B200", sm_count=148, memory_bandwidth_bytes_s=7.7e12,
        fp32_simt_flops=80.0 * TERA, fp64_simt_flops=40.0 * TERA,
        tensor_flops=_tensor(fp64=40.0, tf32=1100.0, bf16=2250.0, fp16=2250.0, e4m3=4500.0, e5m2=4500.0,
                             int8=4500.0, fp4=9000.0),
        l2_bytes=126 * MIB, memory_bytes=180 * 10**9, aliases=("NVIDIA B200 SXM", "NVIDIA B200-SXM-180GB"),
        notes="HGX B200 (1000 W, 180 GB) datasheet; 192 GB pre-release material quoted 8 TB/s",
    ),
    GpuSpec(
        name="NVIDIA A100-SXM4-80GB", sm_count=108, memory_bandwidth_bytes_s=2.039e12,
        fp32_simt_flops=19.5 * TERA, fp64_simt_flops=9.7 * TERA,
        tensor_flops=_tensor(fp64=19.5, tf32=156.0, bf16=312.0, fp16=312.0, int8=624.0),
        l2_bytes=40 * MIB, memory_bytes=80 << 30, aliases=("NVIDIA A100 SXM4 80GB", "NVIDIA A100 80GB SXM"),
        notes="A100 SXM 80GB datasheet; no fp8 tensor cores (fp8 priced as bf16)",
    ),
    GpuSpec(
        name="NVIDIA A100-SXM4-40GB", sm_count=108, memory_bandwidth_bytes_s=1.555e12,
        fp32_simt_flops=19.5 * TERA, fp64_simt_flops=9.7 * TERA,
        tensor_flops=_tensor(fp64=19.5, tf32=156.0, bf16=312.0, fp16=312.0, int8=624.0),
        l2_bytes=40 * MIB, memory_bytes=40 << 30, notes="A100 SXM 40GB datasheet",
    ),
    GpuSpec(
        name="NVIDIA A100 80GB PCIe", sm_count=108, memory_bandwidth_bytes_s=1.935e12,
        fp32_simt_flops=19.5 * TERA, fp64_simt_flops=9.7 * TERA,
        tensor_flops=_tensor(fp64=19.5, tf32=156.0, bf16=312.0, fp16=312.0, int8=624.0),
        l2_bytes=40 * MIB, memory_bytes=80 << 30, notes="A100 PCIe 80GB datasheet",
    ),
    GpuSpec(
        name="NVIDIA L40S", sm_count=142, memory_bandwidth_bytes_s=864e9,
        fp32_simt_flops=91.6 * TERA, fp64_simt_flops=91.6 * TERA / 64,
        tensor_flops=_tensor(tf32=183.0, bf16=362.05, fp16=362.05, e4m3=733.0, e5m2=733.0, int8=733.0),
        l2_bytes=96 * MIB, memory_bytes=48 << 30,
        notes="L40S datasheet; no fp64 tensor cores (fp64 matmuls priced at the fp64 SIMT rate, 1/64 of fp32)",
    ),
)


class UnknownGpu(LookupError):
    pass


def _normalise(name: str) -> str:
    text = name.lower().replace("nvidia", " ")
    return re.sub(r"[^a-z0-9]+", " ", text).strip()


_BY_NAME: dict[str, GpuSpec] = {}
for _spec in SPECS:
    for _name in (_spec.name, *_spec.aliases):
        _BY_NAME[_normalise(_name)] = _spec


def known_gpus() -> list[str]:
    return [s.name for s in SPECS]


def lookup_spec(name: str) -> GpuSpec:
    """The datasheet spec for a device name as ``torch.cuda.get_device_name()`` reports it.

    Matching ignores case, punctuation and the "NVIDIA" prefix ("NVIDIA H200", "h200" and "H200" all match) but
    is otherwise exact: an H100 PCIe is never priced as an H100 SXM. Raises UnknownGpu for anything else; the
    caller then measures ceilings (``spec_for_device``).
    """
    spec = _BY_NAME.get(_normalise(name))
    if spec is None:
        raise UnknownGpu(f"no datasheet spec for GPU {name!r} (known: {', '.join(known_gpus())})")
    return spec


def spec_for_device(device=None, *, measure_unknown: bool = True) -> GpuSpec:
    """The spec of a CUDA device: the datasheet entry for its name, else measured ceilings (cached on disk).

    ``device`` is anything torch.cuda accepts (None = the current device). With ``measure_unknown=False`` an
    unknown GPU raises UnknownGpu instead of running the measurement (which takes a few seconds of GPU time).
    """
    import torch

    name = torch.cuda.get_device_name(device)
    try:
        return lookup_spec(name)
    except UnknownGpu:
        if not measure_unknown:
            raise
    from core.roofline.ceilings import measure_ceilings, spec_from_ceilings

    return spec_from_ceilings(measure_ceilings(device))


def with_rates(spec: GpuSpec, **changes) -> GpuSpec:
    """A copy of ``spec`` with some fields replaced (e.g. a lower bandwidth for a what-if)."""
    if "tensor_flops" in changes:
        changes["tensor_flops"] = MappingProxyType(dict(changes["tensor_flops"]))
    return replace(spec, **changes)


__all__ = ["GpuSpec", "SPECS", "UnknownGpu", "known_gpus", "lookup_spec", "spec_for_device", "with_rates"]
