"""Bests re-verified with upstream's full rules (``core.fleet.verify``) in a run: a closed, settled problem's while
other problems still run (each planner tick looks), and what is left at the end of each start, on an evaluator of
its own."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from core.evaluate.evaluator import Evaluator
from core.fleet.context import RunContext
from core.planner.model import DONE, OVER_BUDGET, PLATEAUED


class SettledReverify:
    def __init__(self, run: RunContext):
        self.run = run
        self._settled: dict[int, int] = {}  # problem -> the best attempt last checked for re-verification
        self._tasks: anyio.abc.TaskGroup | None = None

    async def serve(self) -> None:
        """Hold the task group the re-verifications run in until the run ends."""
        async with anyio.create_task_group() as tg:
            self._tasks = tg
            await anyio.sleep_forever()

    def check(self) -> None:
        """Re-verify a problem's best once the problem is closed and settled (no agent's turn, composite or attempt
        in flight on it, any of which could still change its best) while other problems still run, so that the
        end of the run has only what changed since left to verify (``verify_bests``)."""
        run = self.run
        if run.verifier is None or self._tasks is None:
            return
        busy = {run.assignment.get(a) for a in run.working} | run.composites_busy() | run.verifying
        for row in run.store.problems():
            if row.status not in (DONE, PLATEAUED, OVER_BUDGET) or row.best_attempt_id is None or row.id in busy \
                    or row.id not in run.problems or self._settled.get(row.id) == row.best_attempt_id:
                continue
            if run.store.attempts(row.id, state="pending"):
                continue
            self._settled[row.id] = row.best_attempt_id
            if run.store.attempt(row.best_attempt_id).verified:
                continue
            run.verifying.add(row.id)
            self._tasks.start_soon(self._verify_one, row.id)

    async def _verify_one(self, problem_id: int) -> None:
        run = self.run
        try:
            await run.verifier.verify(problem_id, run.problems[problem_id])
        except Exception as exc:  # noqa: BLE001 - left unverified; the end of the run tries again
            run.event("log", f"re-verification failed: {type(exc).__name__}: {str(exc)[:300]}",
                      problem_id=problem_id)
        finally:
            run.verifying.discard(problem_id)
            best = run.store.problem(problem_id).best_attempt_id
            self._settled[problem_id] = best  # a demoted best's successor was verified in the same call


async def verify_bests(run: RunContext, make_evaluator: Callable[[], Evaluator]) -> None:
    """Re-verify each problem's best with upstream's full rules, after the run's work, in a scope of its own (the
    run's is cancelled by now; a stop asked during this cancels it) and on an evaluator of its own: the run's was
    closed with the requests its cancellation cut short."""
    verifier = run.verifier
    if verifier is None:
        return
    rounds = verifier.rounds
    waiting = [pid for pid in verifier.unverified() if pid in run.problems]
    if not waiting:
        return
    run.event("log", f"re-verifying the best attempt of {len(waiting)} problem{'s' if len(waiting) != 1 else ''} "
                     f"with {rounds} rounds of fresh "
                     f"inputs (upstream's rule; Ctrl-C or a stop control skips the rest)")
    with anyio.CancelScope() as scope:
        run.scope = scope
        async with make_evaluator() as evaluator:
            run.life.evaluator = evaluator
            limiter = anyio.CapacityLimiter(max(1, len(evaluator.placements())))

            async def one(problem_id: int) -> None:
                async with limiter:
                    await verifier.verify(problem_id, run.problems[problem_id])

            async with anyio.create_task_group() as tg:
                for problem_id in waiting:
                    tg.start_soon(one, problem_id)
    if scope.cancelled_caught:
        run.event("log", f"re-verification stopped; {len(verifier.unverified())} bests are not re-verified")
