"""Build a solution, hand it to the pool, and return the verdict: the whole path from solution to verdict."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from core.build import BuildService
from core.errors import SpecError
from core.evaluate.pool import EvalJob, EvaluationPool
from core.evaluate.timing import TimingPolicy
from core.evaluate.verdict import Status, Verdict, WorkloadVerdict
from core.problem.schema import Problem
from core.solution.loader import materialize
from core.solution.prepare import PreparedSolution, prepare
from core.solution.schema import Solution


def compile_error_verdict(prepared: PreparedSolution, indices: Sequence[int]) -> Verdict:
    """The verdict of a solution whose build failed, on each of the given workloads."""
    reason = prepared.errors or "the build failed"
    if prepared.timed_out:
        reason = f"the build timed out: {reason}"
    workloads = tuple(WorkloadVerdict(i, Status.COMPILE_ERROR, reason) for i in indices)
    return Verdict(Status.COMPILE_ERROR, reason, workloads, seconds=prepared.seconds)


async def evaluate_prepared(pool: EvaluationPool, problem: Problem, prepared: PreparedSolution, *,
                            workloads: tuple[int, ...] | None = None, rounds: int = 5,
                            timing: TimingPolicy | None = TimingPolicy(), sol_ms: dict[int, float] | None = None,
                            priority: int = 0, blob_roots: tuple[str, ...] = ()) -> Verdict:
    """Evaluate a solution that built (``prepared.ok``)."""
    with tempfile.TemporaryDirectory(prefix="kf-candidate-") as folder:
        solution_dir = materialize(prepared, Path(folder) / "candidate")
        job = EvalJob(problem, prepared.solution, solution_dir, workloads, rounds, timing, sol_ms, blob_roots)
        return await pool.submit(job, priority)


async def evaluate_solution(pool: EvaluationPool, problem: Problem, solution: Solution, *,
                            build_service: BuildService | None = None, workloads: tuple[int, ...] | None = None,
                            rounds: int = 5, timing: TimingPolicy | None = TimingPolicy(),
                            sol_ms: dict[int, float] | None = None, priority: int = 0,
                            blob_roots: tuple[str, ...] = ()) -> Verdict:
    started = time.monotonic()
    first = (workloads or (0,))[0]
    try:
        prepared = await prepare(solution, build_service or BuildService())
    except SpecError as exc:
        return Verdict(Status.COMPILE_ERROR, str(exc), (WorkloadVerdict(first, Status.COMPILE_ERROR, str(exc)),),
                       seconds=time.monotonic() - started)
    if not prepared.ok:
        return compile_error_verdict(prepared, (first,))
    return await evaluate_prepared(pool, problem, prepared, workloads=workloads, rounds=rounds, timing=timing,
                                   sol_ms=sol_ms, priority=priority, blob_roots=blob_roots)
