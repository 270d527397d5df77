"""What the jobs of one run share (``RunContext``): the store, the config, the problems, the agents' assignments, the
evaluator and the run's bookkeeping, with ``event`` and ``request_stop``. Each job of the run (setup, preparation,
agent loops, planning, controls, composites, re-verification, metrics) is given this, not the ``Fleet``."""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from core.config import FleetConfig
from core.evaluate import TimingPolicy
from core.fleet.agent_profiles import AgentProfiles
from core.fleet.facts import RunFacts
from core.problem.schema import Problem
from core.secrets import redact

if TYPE_CHECKING:
    from core.build import BuildService
    from core.evaluate.evaluator import Evaluator
    from core.fleet.agent import ReviewGate
    from core.fleet.attempt import AttemptLife
    from core.fleet.baselines import ModelBaselines
    from core.fleet.budget import Budgets
    from core.fleet.kinds import AgentKind
    from core.fleet.verify import BestVerifier
    from core.fleet.workbench import BenchServices
    from core.store.writer import RunStore

IDLE_POLL_S = 0.1

EventSink = Callable[[str, str, str, str], None]  # kind, message, agent name, problem key


class FleetError(Exception):
    """A run that cannot start: one line saying why."""


class FrontierNews:
    """Problems whose frontier a passing attempt may have changed, told to the composites job as events (an
    in-process queue) rather than by a call into the attempt's owner. ``unread`` counts what the job has not
    taken yet, so the run does not look idle while a composite is only asked for."""

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[int](math.inf)
        self.unread: Counter[int] = Counter()

    def tell(self, problem_id: int) -> None:
        self.unread[problem_id] += 1
        self._send.send_nowait(problem_id)

    async def next(self) -> int:
        problem_id = await self._receive.receive()
        self.unread[problem_id] -= 1
        if not self.unread[problem_id]:
            del self.unread[problem_id]
        return problem_id


class RunContext:
    def __init__(self, run_dir: str | Path, config: FleetConfig, problem_paths: list[str], *, resume: bool,
                 on_event: EventSink | None, kinds: dict[str, AgentKind], blob_roots: tuple[str, ...]):
        self.run_dir = Path(run_dir)
        self.config = config
        self.problem_paths = problem_paths
        self.resume = resume
        self.on_event = on_event
        self.kinds = kinds
        self.blob_roots = blob_roots
        self.store: RunStore | None = None  # from setup on
        self.device, self.gpus, self.gpu_name = "", [], ""
        self.timing: TimingPolicy = TimingPolicy()
        self.budgets: Budgets | None = None
        self.builds: BuildService | None = None
        self.started = time.time()  # the run's creation time once the store is open
        self.facts: RunFacts | None = None  # the machine and the run, gathered at each start
        self.problems: dict[int, Problem] = {}  # problem id -> the loaded problem
        self.keys: dict[int, str] = {}  # problem id -> its key
        self.names: dict[int, str] = {}  # agent id -> its name
        self.profiles = AgentProfiles()
        # the run's machinery, from its start on
        self.evaluator: Evaluator | None = None
        self.baselines: ModelBaselines | None = None
        self.life: AttemptLife | None = None
        self.verifier: BestVerifier | None = None
        self.services: BenchServices | None = None
        self.review_gates: dict[str, ReviewGate] | None = None  # kind -> its review gate, made on first use
        # the run's state
        self.assignment: dict[int, int | None] = {}  # agent id -> problem id
        self.working: set[int] = set()  # agents inside work()
        self.ready: set[int] = set()  # problems measured and seeded
        self.unrunnable: set[int] = set()  # problems no workload of which can run here: never prepared
        # (lane, problem, best attempt) with nothing more to try: a lane is a kind, and an agent's model profile
        # (core.planner.model.lane), so what one model has exhausted stays open to another
        self.exhausted: set[tuple[str, int, int | None]] = set()
        self.activity: dict[int, deque] = {}  # problem id -> (time, gpu seconds, gain)
        self.prepared_all = False
        self.attempts_done = 0  # evaluated by this process
        self.composing: set[int] = set()  # problems whose composite is being built or evaluated
        self.verifying: set[int] = set()  # problems whose settled best is being re-verified during the run
        self.frontier_news = FrontierNews()
        self.finished = False
        self.stop_reason = ""
        self.scope: anyio.CancelScope | None = None  # what request_stop cancels
        self._nodes, self._nodes_counted_at = 1, -math.inf

    def event(self, kind: str, message: str, *, agent_id: int | None = None, problem_id: int | None = None) -> None:
        message = redact(message)  # log lines carry candidates' and models' text
        self.store.add_event(kind, message, agent_id=agent_id, problem_id=problem_id)
        if self.on_event is not None:
            self.on_event(kind, message, self.names.get(agent_id, ""), self.keys.get(problem_id, ""))

    def log(self, line: str, problem_id: int | None = None) -> None:
        self.event("log", line, problem_id=problem_id)

    def request_stop(self, reason: str) -> None:
        if not self.stop_reason:
            self.stop_reason = reason
        if self.scope is not None:
            self.scope.cancel()

    def composites_busy(self) -> set[int]:
        """Problems whose composite is asked for or under way."""
        return self.composing | set(self.frontier_news.unread)

    def usage(self) -> Any:
        return self.evaluator.usage if self.evaluator is not None else None

    def many_nodes(self) -> bool:
        now = time.monotonic()
        if now - self._nodes_counted_at > 5.0:  # placements change only when a node joins or is lost
            self._nodes_counted_at, self._nodes = now, len({p.node for p in self.evaluator.placements()})
        return self._nodes > 1

    def problem_id(self, target: str) -> int:
        """The problem a control names by key, id or name; ValueError for none."""
        for pid, key in self.keys.items():
            if target in (key, str(pid), key.split("/", 1)[-1]):
                return pid
        raise ValueError(f"no problem {target!r}")

    def agent_id(self, target: str) -> int:
        for aid, name in self.names.items():
            if target in (name, str(aid)):
                return aid
        raise ValueError(f"no agent {target!r}")
