"""Each problem made ready for agents: T_sol and T_b of its workloads measured (``core.fleet.baselines``), attempts
an interrupted start left pending re-evaluated, and its seed evaluated (a seed that is the reference itself beside
the next preparations); beside it all, the machine's facts gathered."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import anyio

from core.fleet.baselines import PREPARATION_PRIORITY
from core.fleet.context import RunContext
from core.fleet.attempt import Candidate
from core.fleet.facts import gather_facts as gather_machine_facts
from core.fleet.run_attempts import RunAttempts, outcome_line
from core.fleet.seeds import REFERENCE_ORIGIN, pick_seed
from core.problem.schema import Problem
from core.roofline.counting import analytic_io_bytes
from core.report.progress import duration, is_prepared, preparation_line
from core.solution.io import parse_solution
from core.solution.schema import Solution
from core.store.model import ProblemRow

# A seed that is the problem's own reference is evaluated after the preparations' T_b steps and before agents'
# candidates, beside the next preparations rather than in their slot: its evaluation holds the GPU about as long as
# the problem's T_b did, while the slot can start the next problem's torch.compile on the CPU. The problem is ready
# for agents once its seed is in, as with any seed.
REFERENCE_SEED_PRIORITY = PREPARATION_PRIORITY - 1


async def gather_facts(run: RunContext) -> None:
    # A child process and nvidia-smi (seconds on a GPU): alongside the preparation, before any agent's brief.
    run.facts = await anyio.to_thread.run_sync(gather_machine_facts, run.device, tuple(run.config.fleet.languages),
                                               run.gpus[0] if run.gpus else None, run.gpu_name,
                                               abandon_on_cancel=True)


async def prepare_all(run: RunContext, attempts: RunAttempts) -> None:
    """Prepare every runnable problem, as many side by side as the evaluator measures T_b at once (a T_b's
    torch.compile keeps a process busy on the CPU for seconds to minutes while other problems' timings use the
    GPUs), taking next the one the planner wants first (``preparation_order``), so agents start on the quickest
    problems while the rest are prepared beside their work."""
    at_once = max(1, run.evaluator.baselines_at_once())
    started = time.monotonic()
    waiting = [pid for pid in run.problems if pid not in run.unrunnable]
    total = len(waiting)
    cost = {pid: preparation_cost(run.problems[pid]) for pid in waiting}
    begun = 0

    async def prepare_one(problem_id: int, problem: Problem) -> None:
        nonlocal begun
        began = time.monotonic()
        try:
            fresh = not is_prepared(run.store.problem(problem_id))
            if fresh:
                begun += 1
                run.event("log", f"preparing ({begun} of {total} begun): T_sol, T_b of "
                                 f"{sum(not w.unavailable for w in problem.workloads)} workloads, the seed",
                          problem_id=problem_id)
            deferred = await _prepare(run, attempts, problem_id, problem, later)
            if fresh:
                run.store.update_problem(problem_id, preparation_s=time.monotonic() - began)
            line = preparation_line(run.store.problems(), time.monotonic() - started)
            if line:
                run.event("log", line, problem_id=problem_id)
        except Exception as exc:  # noqa: BLE001 - one problem that cannot be prepared must not end the run
            # Counted as a run of failures, so the planner keeps it closed until a person resumes it.
            run.store.update_problem(problem_id, status="failed",
                                     failures_in_row=run.config.planner.max_consecutive_failures)
            run.event("log", f"could not prepare the problem: {type(exc).__name__}: {str(exc)[:300]}",
                      problem_id=problem_id)
            return
        if not deferred:
            run.ready.add(problem_id)

    async def preparer() -> None:
        while waiting:
            rows = {row.id: row for row in run.store.problems()}
            problem_id = min(waiting, key=lambda pid: preparation_order(rows[pid], cost[pid]))
            waiting.remove(problem_id)
            await prepare_one(problem_id, run.problems[problem_id])

    async with anyio.create_task_group() as seeds:
        async def seed_later(problem_id: int, solution: Solution, origin: str) -> None:
            try:
                await _evaluate_seed(run, attempts, problem_id, solution, origin, REFERENCE_SEED_PRIORITY)
            except Exception as exc:  # noqa: BLE001 - the problem is measured: agents work on it without a seed
                run.event("log", f"the seed could not be evaluated: {type(exc).__name__}: {str(exc)[:300]}",
                          problem_id=problem_id)
            run.ready.add(problem_id)

        later = functools.partial(seeds.start_soon, seed_later)
        async with anyio.create_task_group() as tg:
            for _ in range(min(at_once, max(1, total))):
                tg.start_soon(preparer)
        if begun:
            run.event("log", f"prepared {total}/{total} problems in {duration(time.monotonic() - started)}")
    run.prepared_all = True


def preparation_cost(problem: Problem) -> tuple[int, int]:
    """How long a problem's preparation should take, to sort by: the bytes its runnable workloads read and write
    (a large one's T_b holds the device throughout, its compile included: measured on an H100, two such problems
    first kept 7 others waiting 1,360 s for the GPU), then how many they are (a torch.compile each)."""
    runnable = [w for w in problem.workloads if not w.unavailable]
    return sum(sum(analytic_io_bytes(problem, w)) for w in runnable), len(runnable)


def preparation_order(row: ProblemRow, cost: tuple[int, int]) -> tuple:
    """The planner's order for preparing: what is prepared already (from an earlier start: nothing to measure)
    first, paused problems last, a person's priority before the rest, then the quickest, so that agents have
    work soonest."""
    return (not is_prepared(row), row.paused, -row.priority, cost, row.id)


async def _prepare(run: RunContext, attempts: RunAttempts, problem_id: int, problem: Problem,
                   seed_later: Callable[[int, Solution, str], None]) -> bool:
    """Whether the seed was left to ``seed_later``, which makes the problem ready once the seed is in."""
    row = run.store.problem(problem_id)
    runnable = [w.index for w in problem.workloads if not w.unavailable]
    if not row.workloads and runnable:
        await run.baselines.measure(problem_id, problem)
    elif row.workloads:
        run.evaluator.remember_sol(problem, {w.index: w.t_sol_ms for w in row.workloads if w.t_sol_ms})
    for pending in run.store.attempts(problem_id, state="pending"):
        run.event("log", f"re-evaluating attempt {pending.id}, interrupted by the last stop",
                  agent_id=pending.agent_id, problem_id=problem_id)
        await attempts.complete(problem_id, pending.id, parse_solution(pending.solution), pending.workloads,
                                priority=PREPARATION_PRIORITY)
    if not any(a.note == "seed" for a in run.store.attempts(problem_id)):
        solution, origin = pick_seed(problem, run.device, tuple(run.config.fleet.languages))
        if origin == REFERENCE_ORIGIN:
            seed_later(problem_id, solution, origin)
            return True
        await _evaluate_seed(run, attempts, problem_id, solution, origin, PREPARATION_PRIORITY)
    return False


async def _evaluate_seed(run: RunContext, attempts: RunAttempts, problem_id: int, solution: Solution, origin: str,
                         priority: int) -> None:
    recorded = await attempts.attempt(problem_id, Candidate(solution, note="seed"), priority=priority)
    run.event("log", f"seed from {origin}: {outcome_line(recorded.attempt)}", problem_id=problem_id)
