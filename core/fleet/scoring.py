"""An attempt's figures from its verdict and the problem's per-workload T_b and T_sol (pure)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.evaluate.verdict import Status, Verdict
from core.roofline.sol import overall_figures
from core.store.model import WorkloadInfo


@dataclass(frozen=True)
class AttemptFigures:
    times_ms: dict[int, float]
    speedup: float | None  # geomean T_b / geomean T_k over the workloads with both
    sol: float | None  # SOL score of the geomeans over the workloads with T_k, T_b and T_sol
    gpu_seconds: float


def attempt_figures(verdict: Verdict, workloads: tuple[WorkloadInfo, ...]) -> AttemptFigures:
    times = {w.index: w.timing.median_ms for w in verdict.workloads
             if w.status is Status.PASSED and w.timing is not None and w.timing.median_ms > 0}
    if verdict.status is not Status.PASSED:
        return AttemptFigures(times, None, None, verdict.seconds)
    info = {w.index: w for w in workloads}
    speedup, sol = overall_figures([(tk, info[i].t_b_ms if i in info else None, info[i].t_sol_ms if i in info
                                     else None) for i, tk in times.items()])
    return AttemptFigures(times, speedup, sol, verdict.seconds)


def improvement(old_speedup: float | None, old_sol: float | None, speedup: float | None,
                sol: float | None) -> float:
    """How much better a new best is: the SOL gain where both have SOL, else the log-speedup gain."""
    if sol is not None and old_sol is not None:
        return sol - old_sol
    if speedup is not None and old_speedup is not None:
        return math.log(speedup / old_speedup)
    return math.inf if speedup is not None else 0.0
