"""Whether a measured T_b can be trusted. A T_b that fails is measured again; one that still fails is marked
unreliable (``WorkloadBaseline.unreliable``, no ``baseline_ms``) and never cached, so no speedup is ever counted
against it and no later run reuses it.

- Within a workload (the judge, before caching): the timed method's spread (interquartile range / median) over
  ``MAX_SPREAD`` (``MAX_SPREAD_CPU`` on the CPU, where a shared machine's load spreads every timing) after
  ``RETIMES`` more timings.
- Across workloads (the pool, after measuring a problem): where one workload's sizes are all at most another's and
  it moves at most half the bytes, its T_b must not be more than ``MAX_INVERSION`` times the larger one's (a 1024x64
  RMSNorm measured at 76 ms beside 13 us for 256 rows: the machine was busy, not the kernel slow), nor more than
  ``INVERSION_FLOOR_MS`` over it: two tiny workloads near the device's fixed per-call cost may trade places by
  noise alone.
- Against the roofline (the fleet, which knows T_sol): a T_b under T_sol is faster than the hardware can go.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core.evaluate.baseline.record import METHOD_COMPILED, WorkloadBaseline
from core.problem.schema import Problem

MAX_SPREAD = 0.5
MAX_SPREAD_CPU = 1.0
RETIMES = 2
MAX_INVERSION = 2.0
MIN_BYTES_RATIO = 2.0
INVERSION_FLOOR_MS = {"cpu": 1.0, "cuda": 0.02}


def timed_spread(result: WorkloadBaseline) -> float | None:
    """The spread of the timing T_b was taken from."""
    return result.compiled_spread if result.method == METHOD_COMPILED else result.eager_spread


def max_spread(device_type: str) -> float:
    return MAX_SPREAD_CPU if device_type == "cpu" else MAX_SPREAD


def spread_problem(result: WorkloadBaseline) -> str:
    spread, limit = timed_spread(result), max_spread("cpu" if result.device_name == "cpu" else "cuda")
    if result.ok and spread is not None and spread > limit:
        return (f"timing spread {spread:.0%} (interquartile range / median) over {limit:.0%} after "
                f"{RETIMES + 1} timings")
    return ""


def inversions(problem: Problem, results: Sequence[WorkloadBaseline]) -> dict[int, str]:
    """Workload index -> why its T_b is out of line with a larger workload of the same problem."""
    from core.roofline.counting import analytic_io_bytes

    measured = [r for r in results if r.ok]
    moved = {r.index: sum(analytic_io_bytes(problem, problem.workloads[r.index])) for r in measured}
    found: dict[int, str] = {}
    for small in measured:
        for large in measured:
            if small.index == large.index or small.index in found:
                continue
            if not _sizes_at_most(problem.workloads[small.index].axes, problem.workloads[large.index].axes):
                continue
            if moved[large.index] < MIN_BYTES_RATIO * max(moved[small.index], 1):
                continue
            floor = INVERSION_FLOOR_MS["cpu" if small.device_name == "cpu" else "cuda"]
            if small.baseline_ms > MAX_INVERSION * large.baseline_ms and small.baseline_ms - large.baseline_ms > floor:
                found[small.index] = (f"T_b {small.baseline_ms:.4g} ms is over {MAX_INVERSION:g}x the "
                                      f"{large.baseline_ms:.4g} ms of workload {large.index}, which is larger")
    return found


def below_roofline(result: WorkloadBaseline, t_sol_ms: float | None) -> str:
    if result.ok and t_sol_ms and result.baseline_ms < t_sol_ms:
        return f"T_b {result.baseline_ms:.4g} ms is under T_sol {t_sol_ms:.4g} ms: faster than the hardware can go"
    return ""


def distrusted(result: WorkloadBaseline, why: str) -> WorkloadBaseline:
    return result.replace(baseline_ms=None, unreliable=why) if why else result


def _sizes_at_most(small: Mapping[str, object], large: Mapping[str, object]) -> bool:
    """Every axis of ``small`` is at most the same axis of ``large`` (axes that are not numbers must be equal)."""
    if set(small) != set(large):
        return False
    for name, value in small.items():
        other = large[name]
        if isinstance(value, (int, float)) and isinstance(other, (int, float)) and not isinstance(value, bool):
            if value > other:
                return False
        elif value != other:
            return False
    return True
