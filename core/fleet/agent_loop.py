"""One loop per agent: a turn on its assigned problem through a Workbench, then what the turn's outcome means for
its assignment (exhausted, retired, an escalated turn ended), with a growing rest after turns that begin nothing."""

from __future__ import annotations

import time

import anyio

from core.fleet.agent import AgentIdentity, WorkOutcome
from core.fleet.budget import BudgetSpent
from core.fleet.context import IDLE_POLL_S, RunContext
from core.fleet.workbench import Workbench

# An agent whose turns on a problem begin no attempt (a model that ends every turn at once) rests before its next
# turn there: tick_s * 2**n after n such turns in a row, at most this long; a new best or another problem ends it.
EMPTY_TURN_REST_MAX_S = 120.0


class AgentLoop:
    def __init__(self, run: RunContext, agent_id: int, kind: str):
        self.run = run
        self.agent_id = agent_id
        self.kind = kind
        self._empty_turns = 0  # its turns in a row that began no attempt

    async def loop(self) -> None:
        run, agent_id, kind = self.run, self.agent_id, self.kind
        impl = run.kinds[kind].make(run.config)
        profiles = run.profiles
        while True:
            problem_id = run.assignment.get(agent_id)
            if problem_id is None or problem_id not in run.ready or run.facts is None:
                await anyio.sleep(IDLE_POLL_S)
                continue
            profile = profiles.of.get(agent_id, "")
            held = profiles.holds.get(agent_id) == problem_id  # this turn is the escalated one
            identity = AgentIdentity(agent_id, run.names[agent_id], kind, profiles.model(kind, profile), profile)

            def should_stop(pid=problem_id, profile=profile) -> bool:
                return run.assignment.get(agent_id) != pid or profiles.of.get(agent_id, "") != profile

            best_before = run.store.problem(problem_id).best_attempt_id
            bench = Workbench(run.services, identity, run.problems[problem_id], problem_id, should_stop)
            run.working.add(agent_id)
            run.store.update_agent(agent_id, state="working", problem_id=problem_id)
            spent = ""
            try:
                outcome = await impl.work(bench)
            except BudgetSpent as exc:  # before a model call or an evaluation: the agent has done all it may here
                outcome, spent = WorkOutcome.EXHAUSTED, str(exc)
            except Exception as exc:  # noqa: BLE001 - an agent's bug costs its turn, not the run
                outcome = WorkOutcome.STOPPED
                run.event("log", f"agent error: {type(exc).__name__}: {exc}", agent_id=agent_id,
                          problem_id=problem_id)
                await anyio.sleep(run.config.planner.tick_s)
            finally:
                run.working.discard(agent_id)
            if held and profiles.holds.get(agent_id) == problem_id:  # its one escalated turn is over
                self._end_escalated_turn(problem_id)
            if outcome is WorkOutcome.RETIRED:
                run.assignment[agent_id] = None
                run.store.update_agent(agent_id, state="stopped", problem_id=None)
                return
            if outcome is WorkOutcome.EXHAUSTED:
                self._exhausted(problem_id, profile, best_before, spent)
            else:
                run.store.update_agent(agent_id, state="idle" if run.assignment.get(agent_id) is None else
                                       "working")
                self._empty_turns = self._empty_turns + 1 if bench.attempts_begun == 0 else 0
                if self._empty_turns:
                    await self._rest(problem_id, min(EMPTY_TURN_REST_MAX_S,
                                                     run.config.planner.tick_s * 2 ** self._empty_turns))

    def _end_escalated_turn(self, problem_id: int) -> None:
        run, agent_id = self.run, self.agent_id
        del run.profiles.holds[agent_id]
        if run.assignment.get(agent_id) == problem_id:
            run.assignment[agent_id] = None
            run.store.update_agent(agent_id, state="idle", problem_id=None)
        since = run.store.problem(problem_id).since_improvement
        run.event("decision", "escalated turn ended: " + ("the plateau is broken" if since == 0 else
                                                          f"{since} attempts since the last gain"),
                  agent_id=agent_id, problem_id=problem_id)

    def _exhausted(self, problem_id: int, profile: str, best_before: int | None, spent: str) -> None:
        run, agent_id = self.run, self.agent_id
        run.exhausted.add((f"{self.kind}/{profile}" if profile else self.kind, problem_id,
                           run.store.problem(problem_id).best_attempt_id))
        if spent:
            run.event("log", f"stopping: {spent}", agent_id=agent_id, problem_id=problem_id)
        elif run.store.problem(problem_id).best_attempt_id == best_before:
            run.event("log", "nothing more to try here", agent_id=agent_id, problem_id=problem_id)
        if run.assignment.get(agent_id) == problem_id:
            run.assignment[agent_id] = None
            run.store.update_agent(agent_id, state="idle", problem_id=None)

    async def _rest(self, problem_id: int, seconds: float) -> None:
        """Wait ``seconds`` before the agent's next turn on ``problem_id``, less if it is moved or the best changes."""
        run = self.run
        best = run.store.problem(problem_id).best_attempt_id
        until = time.monotonic() + seconds
        while time.monotonic() < until and run.assignment.get(self.agent_id) == problem_id:
            await anyio.sleep(IDLE_POLL_S)
            if run.store.problem(problem_id).best_attempt_id != best:
                return
