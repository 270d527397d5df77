"""The one path from a solution to its verdict: build, materialize the built candidate, submit it to the pool.
``core.evaluate.local.LocalEvaluator`` and ``kernelfleet eval`` both go through it."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from core.build import BuildService
from core.errors import SpecError
from core.evaluate.evaluator import Evaluation, EvaluationRequest, Placement
from core.evaluate.pool import EvalJob, EvaluationPool
from core.evaluate.timing_policy import TimingPolicy
from core.evaluate.verdict import Status, Verdict, WorkloadVerdict
from core.problem.schema import Problem
from core.solution.loader import materialize
from core.solution.prepare import PreparedSolution, prepare
from core.solution.schema import Solution


def build_report(prepared: PreparedSolution) -> dict[str, Any]:
    """What the store keeps of a build: ok, kind, seconds, cache hit, errors, ptxas resources."""
    report: dict[str, Any] = {"ok": prepared.ok, "kind": prepared.kind.value, "seconds": round(prepared.seconds, 3),
                              "cache_hit": prepared.cache_hit, "errors": prepared.errors[:4000]}
    if prepared.build is not None:
        report["resources"] = [asdict(r) for r in prepared.build.resources]
    return report


def compile_error_verdict(prepared: PreparedSolution, indices: Sequence[int]) -> Verdict:
    """The verdict of a solution whose build failed, on each of the given workloads."""
    reason = prepared.errors or "the build failed"
    if prepared.timed_out:
        reason = f"the build timed out: {reason}"
    workloads = tuple(WorkloadVerdict(i, Status.COMPILE_ERROR, reason) for i in indices)
    return Verdict(Status.COMPILE_ERROR, reason, workloads, seconds=prepared.seconds)


def spec_fault_verdict(message: str, indices: Sequence[int], seconds: float = 0.0) -> Verdict:
    """The verdict of a solution whose spec cannot be built at all (a SpecError)."""
    return Verdict(Status.COMPILE_ERROR, message,
                   tuple(WorkloadVerdict(i, Status.COMPILE_ERROR, message) for i in indices), seconds=seconds)


async def evaluate_built(pool: EvaluationPool, request: EvaluationRequest, prepared: PreparedSolution, *,
                         sol_ms: dict[int, float] | None = None, node: str = "",
                         device_model: str = "") -> Evaluation:
    """Evaluate a candidate ``prepare`` returned; a failed build is its COMPILE_ERROR verdict, on the first
    requested workload (``kernelfleet eval`` reports every requested one through ``compile_error_verdict``)."""
    build = build_report(prepared)
    if not prepared.ok:
        return Evaluation(compile_error_verdict(prepared, ((request.workloads or (0,))[0],)), build)
    with tempfile.TemporaryDirectory(prefix="kf-candidate-") as folder:
        solution_dir = materialize(prepared, Path(folder) / "candidate")
        job = EvalJob(request.problem, prepared.solution, solution_dir, request.workloads, request.rounds,
                      request.timing, sol_ms, request.blob_roots)
        verdict, gpu = await pool.submit_placed(job, request.priority)
    return Evaluation(verdict, build, Placement(node, gpu, device_model))


async def build_and_evaluate(pool: EvaluationPool, builds: BuildService, request: EvaluationRequest, *,
                             sol_ms: dict[int, float] | None = None, node: str = "",
                             device_model: str = "") -> Evaluation:
    started = time.monotonic()
    try:
        prepared = await prepare(request.solution, builds)
    except SpecError as exc:
        first = (request.workloads or (0,))[0]
        return Evaluation(spec_fault_verdict(str(exc), (first,), time.monotonic() - started), None)
    return await evaluate_built(pool, request, prepared, sol_ms=sol_ms, node=node, device_model=device_model)


async def evaluate_solution(pool: EvaluationPool, problem: Problem, solution: Solution, *,
                            build_service: BuildService | None = None, workloads: tuple[int, ...] | None = None,
                            rounds: int = 5, timing: TimingPolicy | None = TimingPolicy(),
                            sol_ms: dict[int, float] | None = None, priority: int = 0,
                            blob_roots: tuple[str, ...] = ()) -> Verdict:
    """``build_and_evaluate``'s verdict alone, for benchmarks and tests that hold a pool."""
    request = EvaluationRequest(problem, solution, workloads, rounds, timing, priority, blob_roots)
    evaluation = await build_and_evaluate(pool, build_service or BuildService(), request, sol_ms=sol_ms)
    return evaluation.verdict
