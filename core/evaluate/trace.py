"""Typed records of an evaluation for people and files: per workload its status, time, T_b, speedup, T_sol and
SOL (``WorkloadResult``), the solution's overall figures (``core.roofline.sol.overall_figures``, the one formula
the store uses too), and SOL-ExecBench-shaped traces (``Trace``). ``kernelfleet eval`` prints these."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.evaluate.verdict import ErrorStats, Verdict
from core.problem.schema import Problem
from core.roofline.problem_sol import SolModel
from core.roofline.sol import SolScoreError, overall_figures, sol_score

NOT_RUN = "NOT_RUN"


@dataclass(frozen=True)
class WorkloadResult:
    index: int
    status: str
    reason: str
    time_ms: float | None
    spread: float | None
    calls: int | None
    timing_method: str
    errors: ErrorStats | None  # for PASSED and INCORRECT_NUMERICAL
    baseline: Any  # core.evaluate.baseline.WorkloadBaseline | None
    t_b_ms: float | None
    speedup: float | None
    t_sol_ms: float | None
    sol: float | None
    sol_note: str  # why a passed workload has no SOL score

    @property
    def passed(self) -> bool:
        return self.status == "PASSED"


def workload_sol(t_ms: float | None, tb_ms: float | None, ts_ms: float | None) -> tuple[float | None, str]:
    """One workload's SOL score, or why there is none."""
    if t_ms is None or tb_ms is None or ts_ms is None:
        return None, ""
    try:
        return sol_score(t_ms, tb_ms, ts_ms), ""
    except SolScoreError as exc:
        return None, f"{type(exc).__name__}: {exc}"


def workload_results(verdict: Verdict, indices: Sequence[int], baselines: Mapping[int, Any],
                     sol: SolModel) -> list[WorkloadResult]:
    """One result per requested workload, in order; workloads the evaluation never reached are NOT_RUN."""
    by_index = {w.index: w for w in verdict.workloads}
    stopped = next((w for w in verdict.workloads if not w.passed and w.status.value != "UNAVAILABLE"), None)
    results = []
    for index in indices:
        workload = by_index.get(index)
        baseline = baselines.get(index)
        t_b = baseline.baseline_ms if baseline is not None else None
        t_sol = sol.t_sol_ms.get(index)
        if workload is None:
            why = f"the evaluation stopped after workload {stopped.index}" if stopped else "not evaluated"
            results.append(WorkloadResult(index, NOT_RUN, why, None, None, None, "", None, baseline, t_b, None, t_sol,
                                          None, ""))
            continue
        timing = workload.timing
        passed = workload.status.value == "PASSED"
        time_ms = timing.median_ms if timing is not None else None
        speedup = t_b / time_ms if passed and t_b and time_ms else None
        score, note = workload_sol(time_ms, t_b, t_sol) if passed else (None, "")
        errors = workload.errors if workload.status.value in ("PASSED", "INCORRECT_NUMERICAL") else None
        results.append(WorkloadResult(index, workload.status.value, workload.reason, time_ms,
                                      timing.spread if timing else None, timing.calls if timing else None,
                                      timing.method if timing else "", errors, baseline, t_b, speedup, t_sol, score,
                                      note))
    return results


@dataclass(frozen=True)
class Overall:
    evaluated: int  # workloads evaluated (not UNAVAILABLE, not NOT_RUN)
    passed: int
    with_t_b: int  # passed workloads with a T_b
    speedup: float | None  # geomean T_b / geomean T_k over the passed workloads with T_b
    sol: float | None  # SOL score of the geomeans, when every passed workload with T_b has T_sol


def overall(results: Sequence[WorkloadResult]) -> Overall:
    evaluated = [r for r in results if r.status not in ("UNAVAILABLE", NOT_RUN)]
    passed = [r for r in evaluated if r.passed and r.time_ms]
    speedup, sol = overall_figures([(r.time_ms, r.t_b_ms, r.t_sol_ms) for r in passed])
    return Overall(len(evaluated), sum(r.passed for r in evaluated), sum(1 for r in passed if r.t_b_ms), speedup,
                   sol)


# ---------------------------------------------------------------- SOL-ExecBench-shaped traces


@dataclass(frozen=True)
class TraceEvaluation:
    status: str
    log: str
    environment: dict[str, Any]
    timestamp: str
    correctness: dict[str, Any] | None = None  # PASSED and INCORRECT_NUMERICAL only, as upstream requires
    performance: dict[str, Any] | None = None  # PASSED only

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"status": self.status, "log": self.log, "environment": self.environment,
                                "timestamp": self.timestamp}
        if self.correctness is not None:
            data["correctness"] = self.correctness
        if self.performance is not None:
            data["performance"] = self.performance
        return data


@dataclass(frozen=True)
class Trace:
    """One workload's trace: upstream's fields (definition, workload, solution, evaluation), and kernelfleet's own
    under ``kernelfleet``."""

    definition: str
    workload: dict[str, Any]
    solution: str
    evaluation: TraceEvaluation
    kernelfleet: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: non-finite numbers as the strings upstream writes ("Infinity", "-Infinity", "NaN")."""
        return _finite({"definition": self.definition, "workload": self.workload, "solution": self.solution,
                        "evaluation": self.evaluation.to_dict(), "kernelfleet": self.kernelfleet})


def traces(problem: Problem, solution_name: str, results: Sequence[WorkloadResult], *, device: str,
           device_name: str, protections: Sequence[str], sol: SolModel, libs: Mapping[str, str],
           timestamp: str) -> list[Trace]:
    """One trace per evaluated workload (NOT_RUN ones have none)."""
    environment = {"hardware": device_name or device, "libs": dict(libs)}
    found = []
    for r in results:
        if r.status == NOT_RUN:
            continue
        workload = problem.workloads[r.index]
        correctness = None if r.errors is None else {
            "max_relative_error": r.errors.max_rel_error, "max_absolute_error": r.errors.max_abs_error,
            "matched_ratio": r.errors.matched_ratio, "extra": {"worst_output": r.errors.output}}
        performance = None
        if r.passed and r.time_ms is not None:
            performance = {"latency_ms": r.time_ms}
            if r.t_b_ms is not None:
                performance.update(reference_latency_ms=r.t_b_ms, speedup_factor=r.speedup)
        baseline = r.baseline
        found.append(Trace(
            problem.name,
            {"uuid": workload.uuid, "axes": dict(workload.axes),
             "inputs": {n: _input_json(s) for n, s in workload.inputs.items()}},
            solution_name,
            TraceEvaluation(r.status, r.reason, environment, timestamp, correctness, performance),
            {"workload_index": r.index, "device": device, "latency_ms": r.time_ms, "spread": r.spread,
             "timing_calls": r.calls, "timing_method": r.timing_method, "t_sol_ms": r.t_sol_ms,
             "t_sol_note": sol.note(r.index) if r.t_sol_ms is None else "", "sol_score": r.sol,
             "sol_score_note": r.sol_note,
             "baseline": None if baseline is None else {
                 "t_b_ms": baseline.baseline_ms, "method": baseline.method, "eager_ms": baseline.eager_ms,
                 "compiled_ms": baseline.compiled_ms, "compile_reason": baseline.compile_reason,
                 "error": baseline.error, "cached": baseline.cached},
             "protections": list(protections)}))
    return found


def _input_json(source) -> dict[str, Any]:
    data: dict[str, Any] = {"type": source.kind.value}
    if source.kind.value == "scalar":
        data["value"] = source.value
    elif source.kind.value == "safetensors":
        data.update(path=source.path, tensor_key=source.tensor_key)
    return data


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
