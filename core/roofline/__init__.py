"""Speed of light for a workload on a GPU: peak rates (specs, ceilings), work counted from the reference
(counting, tracking), T_sol and the SOL score (sol). Imports torch lazily where it can; never any UI code."""

from core.roofline.counting import WorkCount, analytic_io_bytes, count_problem, count_workload
from core.roofline.sol import (
    Conventions,
    DegenerateBaseline,
    ImpossibleTime,
    ProblemSol,
    SolScoreError,
    SolTime,
    geomean,
    sol_score,
    summarize_problem,
    t_sol,
    workload_sol,
)
from core.roofline.specs import SPECS, GpuSpec, UnknownGpu, known_gpus, lookup_spec, spec_for_device

__all__ = [
    "SPECS", "Conventions", "DegenerateBaseline", "GpuSpec", "ImpossibleTime", "ProblemSol", "SolScoreError",
    "SolTime", "UnknownGpu", "WorkCount", "analytic_io_bytes", "count_problem", "count_workload", "geomean",
    "known_gpus", "lookup_spec", "sol_score", "spec_for_device", "summarize_problem", "t_sol", "workload_sol",
]
