"""The planner's tick: controls applied, the evaluator's news logged, ``core.planner.plan`` run on the store's figures
(statuses and assignments, one transaction), model profiles planned, settled bests re-verified, metrics recorded,
and the run ended when nothing is left to do."""

from __future__ import annotations

import time
from typing import Any

import anyio

from core.fleet.context import RunContext
from core.fleet.controls import apply_controls
from core.fleet.faults import RunDirGone
from core.fleet.metrics import record_metrics
from core.fleet.reverify import SettledReverify
from core.planner import PlannerInput, ProblemActivity, RunTotals, plan
from core.planner.model import lane
from core.store.schema import DB_NAME

ACTIVITY_WINDOW_S = 600.0
METRICS_EVERY_TICKS = 5


class Planning:
    def __init__(self, run: RunContext, reverify: SettledReverify):
        self.run = run
        self.reverify = reverify
        self._can_work: dict[tuple[str, int, int | None], bool] = {}  # (kind, problem, best attempt) -> can_work_on
        self._judges: dict[str, Any] = {}  # kind -> the agent asked can_work_on

    async def loop(self) -> None:
        run = self.run
        ticks = 0
        while True:
            if not run.store.still_in_place():
                raise RunDirGone(f"{run.run_dir / DB_NAME} is no longer the store this run writes")
            apply_controls(run)
            for line in run.evaluator.news():
                run.event("log", line)
            self.plan_once()
            run.profiles.plan(run)
            self.reverify.check()
            if ticks % METRICS_EVERY_TICKS == 0:
                record_metrics(run)
            ticks += 1
            if run.prepared_all and not run.working and not run.composites_busy() and not run.verifying \
                    and not any(run.assignment.values()):
                run.finished = True
                run.request_stop("nothing left to do: every problem is plateaued, spent, paused or fully tuned, "
                                 "or no agent can work on it")
            await anyio.sleep(run.config.planner.tick_s)

    def plan_once(self) -> None:
        run = self.run
        now = time.time()
        problems = tuple(run.store.problems())
        agents = tuple(a for a in run.store.agents() if a.id not in run.profiles.holds)  # held: escalated
        activity = {}
        for pid, history in run.activity.items():
            while history and history[0][0] < now - ACTIVITY_WINDOW_S:
                history.popleft()
            activity[pid] = ProblemActivity(pid, sum(h[1] for h in history), sum(h[2] for h in history))
        totals = run.store.totals()
        result = plan(PlannerInput(now, problems, agents, activity, self.eligible(problems), run.config.planner,
                                   run.config.budgets, RunTotals(now - run.started, int(totals["attempts"]),
                                                                 int(totals["tokens"]), float(totals["dollars"]))))
        with run.store.transaction():  # one commit for the whole tick's decisions
            for change in result.status_changes:
                if change.status == "done" and change.problem_id not in run.ready:
                    continue  # not measured and seeded yet: no agent could be eligible, but it is not done
                run.store.update_problem(change.problem_id, status=change.status)
                run.event("decision", f"{change.status}: {change.reason}", problem_id=change.problem_id)
            for move in result.assignments:
                run.assignment[move.agent_id] = move.problem_id
                run.store.update_agent(move.agent_id, problem_id=move.problem_id,
                                       state="working" if move.problem_id is not None else "idle")
                run.event("decision", move.reason, agent_id=move.agent_id, problem_id=move.problem_id)
        if result.stop_reason:
            run.request_stop(result.stop_reason)

    def eligible(self, problems) -> dict[str, frozenset[int]]:
        """Lane -> the ready problems its kind's agent can work on and it has not exhausted at their best."""
        run = self.run
        eligible: dict[str, set[int]] = {}
        rows = {p.id: p for p in problems}
        lanes: dict[str, set[str]] = {}  # only kinds this run has agents of (a judge may import much)
        for agent in run.store.agents():
            if agent.kind in run.kinds:
                lanes.setdefault(agent.kind, {agent.kind}).add(lane(agent))
        for kind in (run.kinds[name] for name in lanes):
            judge = self._judges.get(kind.name)
            if judge is None:
                judge = self._judges[kind.name] = kind.make(run.config)
            able = set()
            for pid in run.ready:
                best_id, seed_id = rows[pid].best_attempt_id, rows[pid].seed_attempt_id
                if (kind.name, pid, best_id) not in self._can_work:
                    best = run.store.attempt(best_id) if best_id is not None else None
                    members = [run.store.attempt(i) for i in best.parents] if best is not None and best.composite \
                        else []
                    seed = run.store.attempt(seed_id) if seed_id is not None else None
                    self._can_work[kind.name, pid, best_id] = judge.can_work_on(best, members, seed)
                if self._can_work[kind.name, pid, best_id]:
                    able.add(pid)
            for name in lanes[kind.name]:
                eligible[name] = {pid for pid in able if (name, pid, rows[pid].best_attempt_id) not in run.exhausted}
        return {k: frozenset(v) for k, v in eligible.items()}
