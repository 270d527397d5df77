"""Bests re-verified with upstream's full rules (``core.fleet.verify``) while a run goes on, and what is left at the
end of each start, on an evaluator of its own, within the run's wall budget plus ``STOP_GRACE_S``.

During the run (each planner tick looks): a closed problem's best once nothing of the problem is in flight; under a
wall budget, an open problem's best once it has stood unchanged for a while (``stable_after_s``); and at a resume's
start, the bests the last stop left. Verifying an open problem's best while its agents work is safe: the verification awaits only its
evaluation, and what it writes (the verdict, a demotion to the fastest other passing attempt) happens in one step of
the run's one event loop, as a new best's record does; a best that changes meanwhile is looked at again later.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

import anyio

from core.evaluate.evaluator import Evaluator
from core.fleet.attempt import AttemptLife, EvaluationPolicy
from core.fleet.context import FleetError, RunContext
from core.fleet.verify import BestVerifier
from core.planner.model import DONE, OVER_BUDGET, PLATEAUED
from core.report.verification import not_yet_verified_line

# The end-of-run re-verification stops this long after the run's wall budget, so that the whole stop (the agents
# cancelled, a fresh evaluator started, the bests verified, the evaluator and the store closed) ends within 30 s of
# the budget; what is left stays "not yet re-verified" for `kernelfleet verify` or `--resume`.
STOP_GRACE_S = 20.0
# An open problem's best that has stood this long is re-verified while its agents go on (shorter under a short wall
# budget: a tenth of it): a best that lasted this long is likely to last, so the verification is rarely wasted.
STABLE_S = 60.0


def stable_after_s(run: RunContext) -> float:
    wall = run.config.budgets.run_wall_s
    return max(run.config.planner.tick_s, min(STABLE_S, wall / 10)) if wall > 0 else STABLE_S


def _bests(n: int) -> str:
    return f"{n} best{'s' if n != 1 else ''}"


class SettledReverify:
    def __init__(self, run: RunContext):
        self.run = run
        self._settled: dict[int, int] = {}  # problem -> the best attempt last checked for re-verification
        self._left_by_last_stop: set[int] | None = None  # problems whose best a resume verifies first; None: not looked
        self._tasks: anyio.abc.TaskGroup | None = None
        self._limiter = anyio.CapacityLimiter(1)

    async def serve(self) -> None:
        """Hold the task group the re-verifications run in until the run ends."""
        async with anyio.create_task_group() as tg:
            self._tasks = tg
            await anyio.sleep_forever()

    def check(self) -> None:
        """Start the re-verification of each best that is due (see the module's docstring), so that the end of the
        run has only what changed lately left to verify (``verify_bests``). At most one verification per device is
        in flight, so the agents keep the devices between them."""
        run = self.run
        if run.verifier is None or self._tasks is None or run.stop_reason:
            return
        if self._left_by_last_stop is None:
            self._left_by_last_stop = self._announce_left() if run.resume else set()
        self._limiter.total_tokens = max(1, len(run.evaluator.placements()))
        busy = {run.assignment.get(a) for a in run.working} | run.composites_busy()
        stable_before = time.time() - stable_after_s(run)
        # Open problems only under a wall budget, whose stop leaves unverified what is still open: a run without one
        # verifies each best as its problem closes (on the bundled problems, verifying open problems' bests too took
        # 30 verifications of 10 rounds where 21 do).
        bounded = run.config.budgets.run_wall_s > 0
        for row in run.store.problems():
            if row.best_attempt_id is None or row.id in run.verifying or row.id not in run.problems \
                    or self._settled.get(row.id) == row.best_attempt_id:
                continue
            if row.status in (DONE, PLATEAUED, OVER_BUDGET):
                if row.id in busy or run.store.attempts(row.id, state="pending"):
                    continue  # settled only once nothing in flight could still change its best
            elif row.id not in self._left_by_last_stop and \
                    (not bounded or (row.last_change_at or 0.0) > stable_before):
                continue
            self._left_by_last_stop.discard(row.id)
            self._settled[row.id] = row.best_attempt_id
            if run.store.attempt(row.best_attempt_id).verified:
                continue
            run.verifying.add(row.id)
            self._tasks.start_soon(self._verify_one, row.id)

    def _announce_left(self) -> set[int]:
        run = self.run
        left = {pid for pid in run.verifier.unverified() if pid in run.problems}
        if left:
            run.event("log", f"{_bests(len(left))} the last stop left not yet re-verified: re-verifying them first, "
                             f"while the run goes on")
        return left

    async def _verify_one(self, problem_id: int) -> None:
        run = self.run
        try:
            async with self._limiter:
                await run.verifier.verify(problem_id, run.problems[problem_id])
        except Exception as exc:  # noqa: BLE001 - left unverified; the end of the run tries again
            run.event("log", f"re-verification failed: {type(exc).__name__}: {str(exc)[:300]}",
                      problem_id=problem_id)
        finally:
            run.verifying.discard(problem_id)
            best = run.store.problem(problem_id).best_attempt_id
            self._settled[problem_id] = best  # a demoted best's successor was verified in the same call


def stop_deadline(run: RunContext, began: float) -> float | None:
    """When the end-of-run re-verification of a start that began at ``began`` gives up (``time.time()`` seconds):
    the run's wall budget plus ``STOP_GRACE_S``. None (no bound) without a wall budget, and for a start that began
    with its budget spent already: such a resume is for finishing what the last stop left."""
    wall = run.config.budgets.run_wall_s
    if wall <= 0 or (run.resume and run.started + wall <= began):
        return None
    return run.started + wall + STOP_GRACE_S


async def verify_bests(run: RunContext, make_evaluator: Callable[[], Evaluator], *, deadline: float | None = None,
                       on_verified: Callable[[int], None] | None = None) -> list[int]:
    """Re-verify each problem's best with upstream's full rules, after the run's work, in a scope of its own (the
    run's is cancelled by now; a stop asked during this cancels it) and on an evaluator of its own: the run's was
    closed with the requests its cancellation cut short. ``deadline`` (``time.time()`` seconds; None: none) ends it
    too; ``on_verified`` is told each problem whose verification is over. Returns the problems whose best is left
    not yet re-verified (said in one log line)."""
    verifier = run.verifier
    if verifier is None:
        return []
    rounds = verifier.rounds
    waiting = _unverified(run)
    if not waiting:
        return []
    if deadline is not None and time.time() >= deadline:
        run.event("log", f"no time left to re-verify at the run's wall budget + {STOP_GRACE_S:.0f} s: "
                         + not_yet_verified_line(len(waiting), run.run_dir))
        return waiting
    until = "" if deadline is None else \
        f"until {datetime.datetime.fromtimestamp(deadline):%H:%M:%S}, the run's wall budget + {STOP_GRACE_S:.0f} s; "
    run.event("log", f"re-verifying the best attempt of {len(waiting)} problem{'s' if len(waiting) != 1 else ''} "
                     f"with {rounds} rounds of fresh "
                     f"inputs (upstream's rule; {until}Ctrl-C or a stop control skips the rest)")
    with anyio.CancelScope() as scope:
        run.scope = scope
        if deadline is not None:
            scope.deadline = anyio.current_time() + (deadline - time.time())
        async with make_evaluator() as evaluator:
            run.life.evaluator = evaluator
            limiter = anyio.CapacityLimiter(max(1, len(evaluator.placements())))

            async def one(problem_id: int) -> None:
                async with limiter:
                    await verifier.verify(problem_id, run.problems[problem_id])
                if on_verified is not None:
                    on_verified(problem_id)

            async with anyio.create_task_group() as tg:
                for problem_id in waiting:
                    tg.start_soon(one, problem_id)
    left = _unverified(run)
    if left:
        if deadline is not None and time.time() >= deadline:
            why = f"re-verification stopped at the run's wall budget + {STOP_GRACE_S:.0f} s: "
        else:
            why = "re-verification stopped: " if scope.cancelled_caught else ""
        run.event("log", why + not_yet_verified_line(len(left), run.run_dir))
    return left


def _unverified(run: RunContext) -> list[int]:
    return [pid for pid in run.verifier.unverified() if pid in run.problems]


async def verify_left(run: RunContext, make_evaluator: Callable[[], Evaluator],
                      on_verified: Callable[[int], None] | None = None) -> tuple[int, list[int]]:
    """``kernelfleet verify``: the bests of an opened run (``core.fleet.setup``) left not yet re-verified, verified
    with the run's rounds and no time bound, no agent working; a stop asked before or during it skips the rest.
    Returns how many were waiting and those still left."""
    rounds = run.config.evaluation.verify_rounds
    if not rounds:
        raise FleetError(f"{run.run_dir}: the run's config turns re-verification off ([evaluation] verify_rounds = 0)")
    cfg = run.config
    # Correctness alone: only the rounds and the blob roots of the policy matter here.
    policy = EvaluationPolicy(cfg.evaluation.rounds, run.timing, run.blob_roots, cfg.planner.plateau_min_gain)
    run.life = AttemptLife(run.store, None, policy)
    run.verifier = BestVerifier(run.store, run.life, rounds, log=run.log)
    waiting = _unverified(run)
    if not waiting or run.stop_reason:
        return len(waiting), waiting
    return len(waiting), await verify_bests(run, make_evaluator, on_verified=on_verified)
