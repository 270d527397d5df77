"""Typed records of an evaluation for people and files: per workload its status, time, T_b, speedup, T_sol and
SOL (``WorkloadResult``), the solution's overall figures (``core.roofline.sol.overall_figures``, the one formula
the store uses too), and SOL-ExecBench traces that upstream's pydantic ``Trace`` model accepts (``Trace``).
``kernelfleet eval`` prints these."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.evaluate.baseline.machine import state_moved
from core.evaluate.verdict import ErrorStats, Verdict
from core.problem.schema import Problem, Workload
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


# ---------------------------------------------------------------- SOL-ExecBench traces

# Upstream's EvaluationStatus values; a trace carries one of these, kernelfleet's own status sits in "kernelfleet".
UPSTREAM_STATUSES = ("PASSED", "INVALID_REFERENCE", "INCORRECT_SHAPE", "INCORRECT_NUMERICAL", "INCORRECT_DTYPE",
                     "RUNTIME_ERROR", "COMPILE_ERROR", "TIMEOUT", "REWARD_HACK")
_TO_UPSTREAM = {
    "UNAVAILABLE": "RUNTIME_ERROR",  # its inputs cannot be built here: upstream's failed safetensors load
    "REJECTED": "REWARD_HACK",  # refused by the run's reviewer as breaking the rules
    NOT_RUN: "RUNTIME_ERROR",
}


def upstream_status(status: str) -> str:
    """The SOL-ExecBench status a trace reports for one of kernelfleet's (``Status`` values and NOT_RUN)."""
    if status in UPSTREAM_STATUSES:
        return status
    return _TO_UPSTREAM.get(status, "RUNTIME_ERROR")


@dataclass(frozen=True)
class TraceEvaluation:
    status: str  # one of UPSTREAM_STATUSES
    log: str
    environment: dict[str, Any]
    timestamp: str
    correctness: dict[str, Any] | None = None  # PASSED and INCORRECT_NUMERICAL only, as upstream requires
    performance: dict[str, Any] | None = None  # PASSED only

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "environment": self.environment, "timestamp": self.timestamp,
                "log": self.log, "correctness": self.correctness, "performance": self.performance}


@dataclass(frozen=True)
class Trace:
    """One workload's trace: upstream's fields (definition, workload, solution, evaluation) as its ``Trace`` model
    dumps them, and kernelfleet's own under ``kernelfleet`` (a field upstream's model ignores)."""

    definition: str
    workload: dict[str, Any]
    solution: str
    evaluation: TraceEvaluation
    kernelfleet: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready with ``allow_nan=False``: upstream's fields hold finite numbers, kernelfleet's null for a
        non-finite one."""
        return {"definition": self.definition, "workload": self.workload, "solution": self.solution,
                "evaluation": self.evaluation.to_dict(), "kernelfleet": _finite_or_null(self.kernelfleet)}


def traces(problem: Problem, solution_name: str, results: Sequence[WorkloadResult], *, device: str,
           device_name: str, protections: Sequence[str], sol: SolModel, libs: Mapping[str, str],
           timestamp: str) -> list[Trace]:
    """One trace per result, in order: every requested workload, the ones never evaluated too (RUNTIME_ERROR)."""
    environment = {"hardware": device_name or device, "libs": dict(libs)}
    return [_trace(problem, solution_name, r, environment, device, protections, sol, timestamp) for r in results]


def _trace(problem: Problem, solution_name: str, r: WorkloadResult, environment: dict[str, Any], device: str,
           protections: Sequence[str], sol: SolModel, timestamp: str) -> Trace:
    status = upstream_status(r.status)
    log = r.reason if status == r.status else f"{r.status}: {r.reason}".rstrip(": ")
    correctness = _correctness(r.errors) if status in ("PASSED", "INCORRECT_NUMERICAL") else None
    performance = None
    if status == "PASSED":  # upstream's defaults (0) where a figure is missing, as with benchmark_reference off
        performance = {"latency_ms": _number(r.time_ms), "reference_latency_ms": _number(r.t_b_ms),
                       "speedup_factor": _number(r.speedup)}
    baseline = r.baseline
    return Trace(
        problem.name, workload_json(problem.workloads[r.index]), solution_name,
        TraceEvaluation(status, log, environment, timestamp, correctness, performance),
        {"status": r.status, "workload_index": r.index, "device": device, "latency_ms": r.time_ms,
         "spread": r.spread, "timing_calls": r.calls, "timing_method": r.timing_method,
         "matched_ratio": r.errors.matched_ratio if correctness is not None and r.errors is not None else None,
         "t_sol_ms": r.t_sol_ms, "t_sol_note": sol.note(r.index) if r.t_sol_ms is None else "",
         "sol_score": r.sol, "sol_score_note": r.sol_note,
         "baseline": None if baseline is None else {
             "t_b_ms": baseline.baseline_ms, "method": baseline.method, "eager_ms": baseline.eager_ms,
             "compiled_ms": baseline.compiled_ms, "compile_reason": baseline.compile_reason,
             "error": baseline.error, "unreliable": baseline.unreliable, "cached": baseline.cached,
             "remeasured": baseline.remeasured, "state_moved": state_moved(baseline) if baseline.ok else ""},
         "protections": list(protections)})


def _correctness(errors: ErrorStats | None) -> dict[str, Any]:
    errors = errors or ErrorStats()
    return {"max_relative_error": _number(errors.max_rel_error), "max_absolute_error": _number(errors.max_abs_error),
            "has_nan": errors.has_nan, "has_inf": errors.has_inf,
            "extra": {"matched_ratio": _number(errors.matched_ratio), "worst_output": errors.output}}


def workload_json(workload: Workload) -> dict[str, Any]:
    """A workload as upstream's ``Workload`` model dumps it, tolerance included."""
    tolerance = workload.tolerance
    return {"axes": dict(workload.axes), "inputs": {n: _input_json(s) for n, s in workload.inputs.items()},
            "uuid": workload.uuid,
            "tolerance": {"max_atol": tolerance.max_atol, "max_rtol": tolerance.max_rtol,
                          "required_matched_ratio": tolerance.required_matched_ratio,
                          "max_error_cap": tolerance.max_error_cap,
                          "allow_negative_inf": tolerance.allow_negative_inf}}


def _input_json(source) -> dict[str, Any]:
    data: dict[str, Any] = {"type": source.kind.value}
    if source.kind.value == "scalar":
        data["value"] = source.value
    elif source.kind.value == "safetensors":
        data.update(path=source.path, tensor_key=source.tensor_key)
    return data


def _number(value: float | None) -> float:
    """A non-negative finite number for one of upstream's metric fields (which default to 0 and refuse null): an
    overflowed error is the largest float."""
    if value is None or math.isnan(value):
        return 0.0
    return min(max(float(value), 0.0), sys.float_info.max)


def _finite_or_null(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_null(v) for v in value]
    return value
