"""The composites job: for each problem a passing attempt told it of (``RunContext.frontier_news``), the composite of
its frontier (``core.fleet.composite``) evaluated as an attempt of no agent, again while the frontier keeps changing
under it."""

from __future__ import annotations

import anyio

from core.fleet.attempt import Candidate, content_hash
from core.fleet.budget import BudgetSpent
from core.fleet.composite import CompositeError, compose
from core.fleet.context import RunContext
from core.fleet.run_attempts import RunAttempts
from core.problem.schema import Problem
from core.solution.io import solution_to_dict


class Composites:
    def __init__(self, run: RunContext, attempts: RunAttempts):
        self.run = run
        self.attempts = attempts
        self._recompose: set[int] = set()  # problems whose frontier changed while composing
        self._tried: set[str] = set()  # content hashes of composites begun by this process
        self._refused: set[tuple[int, ...]] = set()  # frontiers already logged as not composable

    async def serve(self) -> None:
        """Take the run's frontier news until the run ends."""
        run = self.run
        async with anyio.create_task_group() as tg:
            while True:
                problem_id = await run.frontier_news.next()
                if problem_id in run.composing:
                    self._recompose.add(problem_id)
                else:
                    run.composing.add(problem_id)
                    tg.start_soon(self._compose, problem_id, run.problems[problem_id])

    async def _compose(self, problem_id: int, problem: Problem) -> None:
        """Evaluate the composite of the problem's frontier while the frontier keeps changing under it."""
        try:
            while True:
                self._recompose.discard(problem_id)
                await self._compose_once(problem_id, problem)
                if problem_id not in self._recompose:
                    return
        except BudgetSpent:
            return
        except Exception as exc:  # noqa: BLE001 - a composite that cannot be made costs itself, not the run
            self.run.event("log", f"composite failed: {type(exc).__name__}: {str(exc)[:300]}", problem_id=problem_id)
        finally:
            self.run.composing.discard(problem_id)

    async def _compose_once(self, problem_id: int, problem: Problem) -> None:
        """Evaluate, as an attempt of no agent, the composite of a frontier of two or more members when that
        content is new; calls of a shape no member leads go to the fastest full member."""
        store = self.run.store
        row = store.problem(problem_id)
        frontier = row.frontier
        if len(frontier) < 2 or row.paused:
            return
        members = tuple(m.attempt_id for m in frontier)
        fallback = max((m for m in frontier if m.full), key=lambda m: m.speedup or 0.0, default=None)
        runnable = {w.index for w in problem.workloads if not w.unavailable}
        missing = runnable - {i for m in frontier for i in m.leads}
        why = ("no member was evaluated on every workload" if fallback is None else
               f"no member passed workload {', '.join(map(str, sorted(missing)))}" if missing else "")
        try:
            if why:
                raise CompositeError(why)
            solution = compose(problem, frontier, {i: store.attempt(i).solution for i in members},
                               fallback.attempt_id)
        except CompositeError as exc:
            if members not in self._refused:
                self._refused.add(members)
                self.run.event("log", f"no composite of attempts {', '.join(map(str, members))}: {exc}",
                               problem_id=problem_id)
            return
        as_dict = solution_to_dict(solution)
        digest = content_hash(as_dict)
        if digest in self._tried or store.attempts_with_content(problem_id, digest):
            return
        self._tried.add(digest)
        self.run.budgets.check_evaluation(problem_id)
        note = "composite: " + "; ".join(f"attempt {m.attempt_id} on workload {', '.join(map(str, m.leads))}"
                                         for m in frontier)
        await self.attempts.attempt(problem_id, Candidate(solution, parent_id=members[0], parents=members, note=note))
