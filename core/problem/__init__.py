"""SOL-ExecBench problems: definitions, workloads, loading and validation (pure data, no torch)."""

from core.problem.load import LoadReport, ProblemInvalid, find_problem_dirs, load_problem, load_problems, resolve_axes
from core.problem.schema import (
    DTYPES,
    Axis,
    AxisKind,
    Definition,
    InputKind,
    InputSource,
    Problem,
    TensorSpec,
    Tolerance,
    Workload,
)

__all__ = [
    "DTYPES", "Axis", "AxisKind", "Definition", "InputKind", "InputSource", "LoadReport", "Problem",
    "ProblemInvalid", "TensorSpec", "Tolerance", "Workload", "find_problem_dirs", "load_problem", "load_problems",
    "resolve_axes",
]
