"""Speed-of-light time of a workload on a GPU, and the SOL score of a measured kernel.

    T_sol = 0.4 us + max( sum_d matmul_flops[d] / tensor_rate[d]  +  simt_flops / fp32_simt_rate ,
                          (bytes read + bytes written) / bandwidth )

The compute terms ADD: tensor cores and the SIMT pipes share issue slots, registers and the memory pipeline, and a
reference's elementwise arithmetic mostly runs before or after its matmuls rather than under them, so the sum is
the honest single-kernel estimate (and never more than a few times the largest term). Compute and memory OVERLAP
(the outer max): a kernel streams data while it computes. ``Conventions.floor_s`` (0.4 us) is a fixed latency no
kernel avoids (launch ramp-up, the first round trip to DRAM, the tail): by default it is ADDED to the max
(``floor_mode="add"``, which is what SOLAR's B200 figures look like: 0.4 us + bytes / bandwidth for small
memory-bound workloads); ``floor_mode="max"`` uses it as a plain floor instead.

Conventions (after SOLAR, which prices SOL-ExecBench's B200 figures): an fp32 matmul is priced at the 16-bit
tensor rate (a kernel may split fp32 into bf16 parts or use TF32 where the tolerance allows), a matmul is priced
at the narrowest precision its operand data passed through (a reference that quantises to fp8 or fp4 inside ``run``
is priced at the fp8 or fp4 rate), and 0.4 us of fixed latency. ``Conventions.naive()`` turns them off.

SOL score: ``S = 1 / (1 + (T_k - T_sol) / (T_b - T_sol))``: 1.0 at the speed of light, 0.5 at the baseline T_b,
falling towards 0 as the kernel gets slower. ``sol_score`` raises ``ImpossibleTime`` when T_k < T_sol (the kernel
claims to beat physics: the caller rejects the verdict) and ``DegenerateBaseline`` when T_b <= T_sol (the baseline
is at or below the modelled limit, so the model is wrong for this problem and no score means anything).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Sequence

from core.roofline.counting import WorkCount
from core.roofline.specs import GpuSpec

FP32_MATMUL_PRICES = ("bf16", "tf32", "simt")


@dataclass(frozen=True)
class Conventions:
    fp32_matmul: str = "bf16"  # price fp32 matmuls at the "bf16" tensor rate, the "tf32" rate, or the fp32 "simt" rate
    by_data_precision: bool = True  # price each matmul at the narrowest precision its data passed through
    floor_s: float = 0.4e-6  # fixed latency of any kernel (launch ramp, first DRAM round trip)
    floor_mode: str = "add"  # "add": T_sol = floor + max(compute, memory); "max": T_sol = max(floor, compute, memory)
    include_simt: bool = True  # add non-matmul arithmetic at the fp32 SIMT rate

    def __post_init__(self):
        if self.fp32_matmul not in FP32_MATMUL_PRICES:
            raise ValueError(f"fp32_matmul must be one of {', '.join(FP32_MATMUL_PRICES)}, got {self.fp32_matmul!r}")
        if self.floor_mode not in ("add", "max"):
            raise ValueError(f"floor_mode must be 'add' or 'max', got {self.floor_mode!r}")

    @classmethod
    def naive(cls) -> "Conventions":
        """Matmuls at the tensor rate of their operand dtype (fp32 as TF32), no floor, no SIMT term."""
        return cls(fp32_matmul="tf32", by_data_precision=False, floor_s=0.0, include_simt=False)


@dataclass(frozen=True)
class SolTime:
    t_sol_s: float
    t_compute_s: float
    t_memory_s: float
    t_simt_s: float
    # Tensor-core seconds by the rate they were priced at ("bfloat16", "float8_e4m3fn", "tfloat32", "fp32 simt").
    t_tensor_s: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    bound: str = "memory"  # "compute", "memory" or "floor"
    gpu: str = ""
    method: str = ""  # the counting method behind it

    @property
    def t_sol_us(self) -> float:
        return self.t_sol_s * 1e6


def matmul_rate(spec: GpuSpec, dtype: str, conventions: Conventions) -> tuple[float, str]:
    """(FLOP/s, what it was priced as) for matmul FLOPs whose data is ``dtype``."""
    if dtype == "float32":
        if conventions.fp32_matmul == "bf16":
            found = spec.tensor_rate("bfloat16")
            if found:
                return found
        if conventions.fp32_matmul in ("bf16", "tf32"):
            rate = spec.tensor_flops.get("tfloat32")
            if rate:
                return rate, "tfloat32"
        return spec.fp32_simt_flops, "fp32 simt"
    if dtype == "float64":
        rate = spec.tensor_flops.get("float64")
        if rate:
            return rate, "float64"
        return (spec.fp64_simt_flops or spec.fp32_simt_flops / 64), "fp64 simt"
    found = spec.tensor_rate(dtype)
    if found:
        return found
    return spec.fp32_simt_flops, "fp32 simt"  # integer matmuls without a tensor path


def t_sol(count: WorkCount, spec: GpuSpec, conventions: Conventions = Conventions()) -> SolTime:
    """Speed-of-light time of a counted workload on ``spec`` (raises ValueError for a failed count)."""
    if count.failed:
        raise ValueError(f"{count.problem} workload {count.workload}: no work count ({count.method})")
    flops = count.matmul_flops_effective if conventions.by_data_precision else count.matmul_flops
    tensor: dict[str, float] = {}
    for dtype, n in flops.items():
        rate, priced_as = matmul_rate(spec, dtype, conventions)
        tensor[priced_as] = tensor.get(priced_as, 0.0) + n / rate
    t_simt = count.simt_flops / spec.fp32_simt_flops if conventions.include_simt else 0.0
    t_compute = sum(tensor.values()) + t_simt
    t_memory = count.bytes_total / spec.memory_bandwidth_bytes_s
    t = max(t_compute, t_memory)
    bound = "compute" if t_compute > t_memory else "memory"
    if conventions.floor_mode == "add":
        if conventions.floor_s > t:
            bound = "floor"
        t += conventions.floor_s
    elif t < conventions.floor_s:
        t, bound = conventions.floor_s, "floor"
    return SolTime(t_sol_s=t, t_compute_s=t_compute, t_memory_s=t_memory, t_simt_s=t_simt,
                   t_tensor_s=MappingProxyType(tensor), bound=bound, gpu=spec.name, method=count.method)


def workload_sol(problem, workload, spec: GpuSpec, conventions: Conventions = Conventions(),
                 **count_options) -> tuple[WorkCount, SolTime | None]:
    """Count a workload (``count_workload`` options pass through) and price it: (count, T_sol or None if the
    count failed)."""
    from core.roofline.counting import count_workload

    count = count_workload(problem, workload, **count_options)
    return count, (None if count.failed else t_sol(count, spec, conventions))


class SolScoreError(ValueError):
    pass


class ImpossibleTime(SolScoreError):
    """A kernel time below the speed of light: a timing or correctness fault; the verdict is rejected."""


class DegenerateBaseline(SolScoreError):
    """A baseline at or below the speed of light: the roofline model is wrong for this problem."""


def sol_score(t_kernel: float, t_baseline: float, t_sol: float) -> float:
    """``1 / (1 + (T_k - T_sol) / (T_b - T_sol))``: 0.5 at the baseline, 1.0 at T_sol, decreasing in T_k.

    Raises ImpossibleTime when T_k < T_sol and DegenerateBaseline when T_b <= T_sol (see the module docstring).
    Any unit, as long as all three share it.
    """
    if not all(math.isfinite(x) and x > 0 for x in (t_kernel, t_baseline, t_sol)):
        raise SolScoreError(f"times must be positive and finite: T_k={t_kernel}, T_b={t_baseline}, T_sol={t_sol}")
    if t_kernel < t_sol:
        raise ImpossibleTime(f"kernel time {t_kernel:.4g} is below the speed of light {t_sol:.4g}")
    if t_baseline <= t_sol:
        raise DegenerateBaseline(f"baseline time {t_baseline:.4g} is not above the speed of light {t_sol:.4g}")
    return 1.0 / (1.0 + (t_kernel - t_sol) / (t_baseline - t_sol))


def workload_figures(t_kernel: float | None, t_baseline: float | None,
                     t_sol: float | None) -> tuple[float | None, float | None]:
    """One workload's (speedup T_b / T_k, SOL score), any unit shared by the three times: each None where a time it
    needs is missing or not above 0, and the score None where ``sol_score`` raises (for showing a row, not for
    judging a verdict)."""
    def known(t: float | None) -> bool:
        return t is not None and math.isfinite(t) and t > 0

    if not (known(t_kernel) and known(t_baseline)):
        return None, None
    speedup = t_baseline / t_kernel
    if not known(t_sol):
        return speedup, None
    try:
        return speedup, sol_score(t_kernel, t_baseline, t_sol)
    except SolScoreError:
        return speedup, None


def geomean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("geomean of nothing")
    if any(not (v > 0) for v in values):
        raise ValueError(f"geomean needs positive values, got {list(values)}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


@dataclass(frozen=True)
class ProblemSol:
    """One problem over its workloads: geometric means of the times, the speedup and the SOL score."""

    t_kernel: float
    t_baseline: float
    t_sol: float
    speedup: float  # T_b / T_k
    score: float | None  # sol_score of the geomeans; None when undefined (see score_error)
    score_error: str = ""
    workloads: int = 0


def summarize_problem(t_kernel: Sequence[float], t_baseline: Sequence[float], t_sol: Sequence[float]) -> ProblemSol:
    """Geomean each series (one entry per workload, same order) and score the geomeans.

    Unlike ``sol_score`` this does not raise for an impossible or degenerate result: it records why in
    ``score_error`` with ``score=None``, because a summary is for reporting. Reject per-workload impossible
    times before summarising.
    """
    if not (len(t_kernel) == len(t_baseline) == len(t_sol)):
        raise ValueError("t_kernel, t_baseline and t_sol need one entry per workload each")
    tk, tb, ts = geomean(t_kernel), geomean(t_baseline), geomean(t_sol)
    try:
        score, error = sol_score(tk, tb, ts), ""
    except SolScoreError as exc:
        score, error = None, f"{type(exc).__name__}: {exc}"
    return ProblemSol(t_kernel=tk, t_baseline=tb, t_sol=ts, speedup=tb / tk, score=score, score_error=error,
                      workloads=len(t_kernel))


def overall_figures(workloads: Sequence[tuple[float, float | None, float | None]]) -> tuple[float | None, float | None]:
    """The one formula for a solution's figures over its passed workloads, each ``(T_k, T_b, T_sol)`` with T_b and
    T_sol None where unknown: (speedup, SOL). The speedup is geomean T_b / geomean T_k over the workloads with T_b;
    the SOL is the score of the geomeans (``summarize_problem``), given only when every workload with T_b has
    T_sol too, and None where the score is undefined."""
    with_tb = [(tk, tb) for tk, tb, _ in workloads if tb]
    if not with_tb:
        return None, None
    speedup = geomean([tb for _, tb in with_tb]) / geomean([tk for tk, _ in with_tb])
    with_all = [(tk, tb, ts) for tk, tb, ts in workloads if tb and ts]
    if len(with_all) != len(with_tb):
        return speedup, None
    summary = summarize_problem(*(list(column) for column in zip(*with_all)))
    return speedup, summary.score


__all__ = ["Conventions", "DegenerateBaseline", "ImpossibleTime", "ProblemSol", "SolScoreError", "SolTime",
           "geomean", "matmul_rate", "overall_figures", "sol_score", "summarize_problem", "t_sol", "workload_figures",
           "workload_sol"]


def is_better(old_speedup: float | None, speedup: float | None) -> bool:
    """Faster is better: T_b is fixed per workload, so a higher geomean speedup is a lower geomean time."""
    return speedup is not None and (old_speedup is None or speedup > old_speedup)
