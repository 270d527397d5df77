"""The run: one anyio task group holding the planner loop, one loop per agent, the problem preparation and the GPU
pool; the store is written only from here (one writer), and every change a person or the planner makes becomes an
event.

Crash safety: an attempt is recorded (pending) before it is evaluated and completed in one transaction with the
counters it moves; ``--resume`` re-evaluates whatever was pending, so after a kill at any moment no attempt is lost
or counted twice.
"""

from __future__ import annotations

import math
import os
import socket
import sqlite3
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from core.build import BuildService
from core.config import FleetConfig, config_to_dict, model_profiles, parse_config
from core.evaluate import TimingPolicy
from core.evaluate.timing_policy import describe as timing_description
from core.evaluate.evaluator import Evaluator
from core.evaluate.verdict import Verdict
from core.fleet.agent import AgentIdentity, WorkOutcome
from core.fleet.attempt import AttemptLife, Candidate, EvaluationPolicy, content_hash
from core.fleet.baselines import PREPARATION_PRIORITY, ModelBaselines
from core.fleet import capability
from core.fleet.budget import Budgets, BudgetSpent
from core.fleet.composite import CompositeError, compose
from core.fleet.faults import RunDirGone, fault_line, machine_fault
from core.fleet.facts import RunFacts, facts_from_probe, gather_facts
from core.fleet.gpus import detect_gpus
from core.fleet.kinds import AgentKind, registered
from core.fleet.record import Recorded
from core.fleet.seeds import pick_seed
from core.fleet.verify import BestVerifier
from core.fleet.workbench import BenchServices, Workbench
from core.planner import PlannerInput, ProblemActivity, RunTotals, plan
from core.planner.model import DONE, OVER_BUDGET, PLATEAUED, lane
from core.planner.profiles import choose_escalation, choose_switch, profile_specs, round_robin
from core.store.controls import COMMANDS
from core.problem import load_problems
from core.report.progress import duration, is_prepared, preparation_line
from core.roofline.sol import geomean
from core.problem.schema import Problem
from core.secrets import redact, take_secrets
from core.solution.io import parse_solution, solution_to_dict
from core.solution.schema import Solution
from core.store.check import NotARunStore, check_store_file
from core.store.lock import RunLock, RunLocked
from core.store.schema import DB_NAME
from core.store.writer import RunStore, StoreError

QUICK_TIMING = TimingPolicy(warmup_calls=1, min_calls=5, max_calls=100, target_seconds=0.02, device_check_calls=3)
ACTIVITY_WINDOW_S = 600.0
IDLE_POLL_S = 0.1
# An agent whose turns on a problem begin no attempt (a model that ends every turn at once) rests before its next
# turn there: tick_s * 2**n after n such turns in a row, at most this long; a new best or another problem ends it.
EMPTY_TURN_REST_MAX_S = 120.0


class FleetError(Exception):
    """A run that cannot start: one line saying why."""


EventSink = Callable[[str, str, str, str], None]  # kind, message, agent name, problem key


class Fleet:
    def __init__(self, run_dir: str | Path, config: FleetConfig | None = None, problem_paths: list[str] | None = None,
                 *, resume: bool = False, on_event: EventSink | None = None,
                 agent_kinds: dict[str, AgentKind] | None = None, blob_roots: tuple[str, ...] = (),
                 evaluator_factory: Callable[[Fleet], Evaluator] | None = None):
        """``agent_kinds``: kinds beside (or replacing) the registered ones (``core.fleet.kinds``);
        ``evaluator_factory``: the run's devices (default: this machine's, or the Ray cluster of
        ``[cluster] ray_address``), called at run start."""
        self.run_dir = Path(run_dir)
        self.config = config or FleetConfig()
        self.problem_paths = [str(Path(p).resolve()) for p in (problem_paths or [])]
        self.resume = resume
        self.on_event = on_event
        self.kinds = {**registered(), **(agent_kinds or {})}
        self.blob_roots = blob_roots
        self.evaluator_factory = evaluator_factory
        self._can_work: dict[tuple[str, int | None], bool] = {}  # (kind, best attempt id) -> can_work_on
        self._judges: dict[str, Any] = {}  # kind -> the agent asked can_work_on
        self._nodes, self._nodes_counted_at = 1, -math.inf
        self.timing: TimingPolicy = TimingPolicy()
        self.facts: RunFacts | None = None  # the machine and the run, gathered at each start
        self.problems: dict[int, Problem] = {}  # problem id -> the loaded problem
        self.assignment: dict[int, int | None] = {}  # agent id -> problem id
        self.working: set[int] = set()  # agents inside work()
        self._empty_turns: dict[int, int] = {}  # agent id -> its turns in a row that began no attempt
        self.ready: set[int] = set()  # problems measured and seeded
        # (lane, problem, best attempt) with nothing more to try: a lane is a kind, and an LLM agent's model
        # profile (core.planner.model.lane), so what one model has exhausted stays open to another
        self.exhausted: set[tuple[str, int, int | None]] = set()
        self.activity: dict[int, deque] = {}  # problem id -> (time, gpu seconds, gain)
        self.prepared_all = False
        self.attempts_done = 0  # evaluated by this process
        self.finished = False
        self.stop_reason = ""
        self._scope: anyio.CancelScope | None = None
        self._names: dict[int, str] = {}
        self._keys: dict[int, str] = {}
        self._started = time.time()
        self.profiles = {p.name: p for p in model_profiles(self.config.llm)}  # the LLM agents' model profiles
        self.profile_of: dict[int, str] = {}  # LLM agent id -> its profile now
        self.holds: dict[int, int] = {}  # agent id -> the plateaued problem it has one escalated turn on
        self.escalated: set[int] = set()  # problems escalated since this start
        self._profiles_judged_at = time.monotonic()
        self._tasks: anyio.abc.TaskGroup | None = None  # the run's task group, where composites are evaluated
        self.composing: set[int] = set()  # problems whose composite is being built or evaluated
        self.verifying: set[int] = set()  # closed problems whose best is being re-verified during the run
        self.verifier: BestVerifier | None = None
        self._settled: dict[int, int] = {}  # problem -> the best attempt last checked for re-verification
        self._recompose: set[int] = set()  # problems whose frontier changed while composing
        self._composites_tried: set[str] = set()  # content hashes of composites begun by this process
        self._compose_refused: set[tuple[int, ...]] = set()  # frontiers already logged as not composable

    # ---------------------------------------------------------------- events

    def event(self, kind: str, message: str, *, agent_id: int | None = None, problem_id: int | None = None) -> None:
        message = redact(message)  # log lines carry candidates' and models' text
        self.store.add_event(kind, message, agent_id=agent_id, problem_id=problem_id)
        if self.on_event is not None:
            self.on_event(kind, message, self._names.get(agent_id, ""), self._keys.get(problem_id, ""))

    def request_stop(self, reason: str) -> None:
        if not self.stop_reason:
            self.stop_reason = reason
        if self._scope is not None:
            self._scope.cancel()

    # ---------------------------------------------------------------- setup

    def open(self) -> None:
        """Open the store, load the problems and register agents; FleetError says why a run cannot start."""
        if hasattr(self, "store"):
            return
        # A new run's problems are checked before anything is written: a bad path leaves no store behind.
        loaded = None if self.resume else self._load_problems()
        self._lock_run()
        try:
            self._open_locked(loaded)
        except BaseException:
            self.close()
            raise

    def _open_locked(self, loaded) -> None:
        try:
            self.store = RunStore(self.run_dir, create=not self.resume)
        except StoreError as exc:
            raise FleetError(str(exc)) from None
        info = self.store.run_info()
        if self.resume:
            if info is None:
                raise FleetError(f"{self.run_dir}: the run never started; start it again without --resume")
            self.config = parse_config(info.config, source=f"{self.run_dir} (stored config)")
            self.problem_paths = list(info.problem_paths)
        elif info is not None:
            raise FleetError(f"{self.run_dir} already holds a run: continue it with --resume, or pick another --run-dir")
        # Before any child process starts (nvidia-smi below, builds, workers): none inherits a secret.
        self.profiles = {p.name: p for p in model_profiles(self.config.llm)}  # the stored config's, on resume
        take_secrets([self.config.llm.api_key_env, *(p.llm.api_key_env for p in self.profiles.values()),
                      *self.config.llm.secret_env])
        self.store.redact = redact
        loaded = loaded or self._load_problems()
        device = self.config.fleet.device
        on_cluster = bool(self.config.cluster.ray_address)  # the GPUs are the cluster's, the head may have none
        gpus = list(self.config.gpus.ids) or (detect_gpus() if device == "cuda" and not on_cluster else [])
        if device == "cuda" and not gpus and not on_cluster:
            raise FleetError("no CUDA GPU found: set [fleet] device = \"cpu\" (pytorch candidates only) or "
                             "list [gpus] ids")
        self.device, self.gpus = device, gpus
        self.gpu_name = ""
        if device == "cuda" and gpus:
            from core.roofline.problem_sol import gpu_name_from_smi

            self.gpu_name = gpu_name_from_smi(gpus[0])
        if info is None:
            self.store.init_run(config_to_dict(self.config), self.problem_paths, device, gpus, self.gpu_name)
        self.timing = replace(QUICK_TIMING if self.config.evaluation.timing == "quick" else TimingPolicy(),
                              kernel_spans=self.config.evaluation.kernel_spans)
        skipped: list[tuple[int, int, str]] = []
        for problem in loaded.problems:
            key = f"{problem.subset}/{problem.name}"
            op = problem.definition.op_type
            problem_id = self.store.add_problem(key, problem.name, problem.subset, str(problem.path), op or "")
            # On the CPU, GPU-sized workloads are unavailable (core.fleet.capability), and said so below.
            self.problems[problem_id], skips = capability.for_device(problem, device)
            skipped += [(problem_id, index, why) for index, why in skips]
            self._keys[problem_id] = key
        for kind in self.kinds.values():
            for n in range(1, kind.count(self.config) + 1):
                profile = round_robin(n, profile_specs(tuple(self.profiles.values()))) if kind.name == "llm" else ""
                model = self.profiles[profile].llm.model if profile else kind.model(self.config)
                self.store.add_agent(f"{kind.name}-{n}", kind.name, model, profile)
        for agent in self.store.agents():
            self._names[agent.id] = agent.name
        unknown = sorted({a.kind for a in self.store.agents()} - set(self.kinds))
        if unknown:
            raise FleetError(f"{self.run_dir}: agents of unknown kind {', '.join(unknown)} (registered: "
                             f"{', '.join(self.kinds)})")
        for problem_id, index, why in skipped:
            self.event("log", f"workload {index} skipped on the cpu: {why}", problem_id=problem_id)
        line = capability.cannot_improve_line([capability.assess(p, self.config) for p in self.problems.values()],
                                              self.config)
        if line:
            self.event("log", line)
        for n, agent in enumerate((a for a in self.store.agents() if a.kind == "llm"), start=1):
            # An older store's agents have no profile, and a resumed one keeps its own.
            profile = agent.profile if agent.profile in self.profiles else \
                round_robin(n, profile_specs(tuple(self.profiles.values())))
            self._set_profile(agent.id, profile)
        if self.resume:
            self._drop_stale_stops()
        for agent in self.store.agents():
            if agent.state == "stopped":  # stopped by the last start (its endpoint was down): a new start tries again
                self.store.update_agent(agent.id, state="idle", problem_id=None)
            self.assignment[agent.id] = agent.problem_id if agent.problem_id in self.problems else None
        self.budgets = Budgets(self.store, self.config.budgets)
        self.builds = BuildService()
        self._started = self.store.run_info().created_at

    def _lock_run(self) -> None:
        """Take the run's lock before its store is opened for writing (a resume's store is checked read-only
        first, so a folder that holds no run gets no lock file): a second orchestrator on a live run is refused
        with who holds it."""
        if self.resume:
            try:
                check_store_file(self.run_dir / DB_NAME)
            except NotARunStore as exc:
                raise FleetError(str(exc)) from None
        try:
            self.lock = RunLock.acquire(self.run_dir)
        except RunLocked as exc:
            raise FleetError(str(exc)) from None

    def close(self) -> None:
        """Close the store and let the run's lock go (a process that ends lets it go too, however it ends)."""
        store = getattr(self, "store", None)
        if store is not None:
            store.close()
        lock = getattr(self, "lock", None)
        if lock is not None:
            lock.release()

    def _load_problems(self):
        try:
            loaded = load_problems(self.problem_paths)
        except OSError as exc:
            raise FleetError(str(exc) if str(exc).startswith("/") else f"{exc.filename or ''}: "
                             f"{exc.strerror or exc}") from None
        if loaded.invalid:
            first = loaded.invalid[0]
            raise FleetError(f"{len(loaded.invalid)} problem(s) are malformed; first: {first.errors[0]}"
                             if first.errors else f"{first.path}: malformed problem")
        if not loaded.problems:
            raise FleetError(f"no problems found under {', '.join(self.problem_paths) or '(no paths)'}")
        return loaded

    # ---------------------------------------------------------------- the run

    async def run(self) -> str:
        """Run until nothing is left to do, a stop control, a budget or ``request_stop``; returns the final state.
        A fault of the machine (a full disk, a read-only filesystem, the run folder deleted) ends it with a
        FleetError of one line; what was recorded before stays for ``--resume``."""
        self.open()
        try:
            return await self._run()
        except BaseException as exc:  # noqa: BLE001 - only machine faults are turned into a line
            fault = machine_fault(exc)
            if fault is None:
                raise
            raise FleetError(fault_line(fault, self.run_dir, self._write_back() if fault.run_dir_gone else "")) \
                from None
        finally:
            self.close()

    def _write_back(self) -> str:
        try:
            return str(self.store.write_back())
        except (OSError, sqlite3.Error):
            return ""

    async def _run(self) -> str:
        with anyio.CancelScope() as scope:
            self._scope = scope
            if self.stop_reason:
                scope.cancel()
            async with self._make_evaluator() as evaluator:
                self.evaluator = evaluator
                policy = EvaluationPolicy(self.config.evaluation.rounds, self.timing, self.blob_roots,
                                          self.config.planner.plateau_min_gain)
                compile_s = self.config.evaluation.compile_timeout_s if self.config.evaluation.compile_baseline else 0
                self.baselines = ModelBaselines(self.store, evaluator, timing=self.timing, compile_timeout_s=compile_s,
                                                blob_roots=self.blob_roots,
                                                log=lambda line, problem_id=None: self.event("log", line,
                                                                                             problem_id=problem_id))
                self.life = AttemptLife(self.store, evaluator, policy, self.baselines)
                if self.config.evaluation.verify_rounds:
                    self.verifier = BestVerifier(self.store, self.life, self.config.evaluation.verify_rounds,
                                                 log=lambda line, problem_id=None: self.event("log", line,
                                                                                              problem_id=problem_id))
                self.services = self.bench_services(evaluator)
                self.store.set_run_state("running", owner=f"{socket.gethostname()}:{os.getpid()}")
                self.event("run", f"{'resumed' if self.resume else 'started'}: {len(self.problems)} problems, "
                                  f"{len(self._names)} agents, device {self.device}"
                                  + (f" {self.gpus} ({self.gpu_name})" if self.gpus else ""))
                for line in evaluator.describe():
                    self.event("log", line)
                self.event("log", timing_description(self.timing, self.device))
                try:
                    async with anyio.create_task_group() as tg:
                        self._tasks = tg
                        tg.start_soon(self._gather_facts)
                        tg.start_soon(self._prepare_all)
                        tg.start_soon(self._planner_loop)
                        if self.config.planner.mode == "llm":
                            tg.start_soon(self._llm_planner_loop)
                        for agent in self.store.agents():
                            tg.start_soon(self._agent_loop, agent.id, agent.kind)
                finally:
                    if "core.llm" in sys.modules:  # only runs that had LLM agents imported it
                        with anyio.CancelScope(shield=True):
                            await sys.modules["core.llm"].LlmClient.close_shared()
        usage = self._usage()
        if usage is not None and usage.wanted_s > 0:
            self.event("log", f"pool since this start: {usage.summary()}")
        await self._verify_bests()
        state = "finished" if self.finished else "stopped"
        self._record_metrics()
        self.store.set_run_state(state)
        self.event("run", f"{state}: {self.stop_reason or 'done'}")
        return state

    async def _verify_bests(self) -> None:
        """Re-verify each problem's best with upstream's full rules (``core.fleet.verify``), after the run's work, in
        a scope of its own (the run's is cancelled by now; a stop asked during this cancels it) and on an evaluator
        of its own: the run's was closed with the requests its cancellation cut short."""
        verifier = self.verifier
        if verifier is None:
            return
        rounds = verifier.rounds
        waiting = [pid for pid in verifier.unverified() if pid in self.problems]
        if not waiting:
            return
        self.event("log", f"re-verifying the best attempt of {len(waiting)} problem{'s' if len(waiting) != 1 else ''} "
                          f"with {rounds} rounds of fresh "
                          f"inputs (upstream's rule; Ctrl-C or a stop control skips the rest)")
        with anyio.CancelScope() as scope:
            self._scope = scope
            async with self._make_evaluator() as evaluator:
                self.life.evaluator = evaluator
                limiter = anyio.CapacityLimiter(max(1, len(evaluator.placements())))

                async def one(problem_id: int) -> None:
                    async with limiter:
                        await verifier.verify(problem_id, self.problems[problem_id])

                async with anyio.create_task_group() as tg:
                    for problem_id in waiting:
                        tg.start_soon(one, problem_id)
        if scope.cancelled_caught:
            self.event("log", f"re-verification stopped; {len(verifier.unverified())} bests are not re-verified")

    def _verify_settled(self) -> None:
        """Re-verify a problem's best once the problem is closed and settled (no agent's turn, composite or attempt
        in flight on it, any of which could still change its best) while other problems still run, so that the
        end of the run has only what changed since left to verify (``_verify_bests``)."""
        if self.verifier is None or self._tasks is None:
            return
        busy = {self.assignment.get(a) for a in self.working} | self.composing | self.verifying
        for row in self.store.problems():
            if row.status not in (DONE, PLATEAUED, OVER_BUDGET) or row.best_attempt_id is None or row.id in busy \
                    or row.id not in self.problems or self._settled.get(row.id) == row.best_attempt_id:
                continue
            if self.store.attempts(row.id, state="pending"):
                continue
            self._settled[row.id] = row.best_attempt_id
            if self.store.attempt(row.best_attempt_id).verified:
                continue
            self.verifying.add(row.id)
            self._tasks.start_soon(self._verify_one, row.id)

    async def _verify_one(self, problem_id: int) -> None:
        try:
            await self.verifier.verify(problem_id, self.problems[problem_id])
        except Exception as exc:  # noqa: BLE001 - left unverified; the end of the run tries again
            self.event("log", f"re-verification failed: {type(exc).__name__}: {str(exc)[:300]}",
                       problem_id=problem_id)
        finally:
            self.verifying.discard(problem_id)
            best = self.store.problem(problem_id).best_attempt_id
            self._settled[problem_id] = best  # a demoted best's successor was verified in the same call

    def _make_evaluator(self) -> Evaluator:
        if self.evaluator_factory is not None:
            return self.evaluator_factory(self)
        options = dict(spare=self.config.gpus.spare, workload_timeout_s=self.config.gpus.workload_timeout_s,
                       readable=[*self.problem_paths, *self.blob_roots])
        address = self.config.cluster.ray_address
        if address:
            from core.cluster import RayEvaluator  # only runs on a Ray cluster import Ray

            return RayEvaluator(address, self.device, **options)
        from core.evaluate.local import LocalEvaluator

        return LocalEvaluator(self.device, self.gpus, builds=self.builds, device_model=self.gpu_name or None,
                              **options)

    def bench_services(self, evaluator: Evaluator | None = None) -> BenchServices:
        """What every workbench of this run is given (after ``open``; the evaluator once the run started)."""
        def reviewer():
            if getattr(self, "reviewer", None) is None:
                from core.llm.review import Reviewer, reviewer_config

                self.reviewer = Reviewer(reviewer_config(self.config))
            return self.reviewer

        def device_seconds(problem_id: int, seconds: float) -> None:
            self.activity.setdefault(problem_id, deque()).append((time.time(), seconds, 0.0))

        return BenchServices(
            self.store, self.config, self.builds, self.budgets, evaluator, self._attempt, self.event,
            facts=lambda: self.facts or facts_from_probe(self.device, self.config.fleet.languages),
            references=lambda: {pid: p.definition.reference for pid, p in self.problems.items()},
            device_seconds=device_seconds, reviewer=reviewer, device=self.device, blob_roots=self.blob_roots)

    def _many_nodes(self) -> bool:
        now = time.monotonic()
        if now - self._nodes_counted_at > 5.0:  # placements change only when a node joins or is lost
            self._nodes_counted_at, self._nodes = now, len({p.node for p in self.evaluator.placements()})
        return self._nodes > 1

    def _usage(self):
        return getattr(getattr(self, "evaluator", None), "usage", None)

    async def _gather_facts(self) -> None:
        # A child process and nvidia-smi (seconds on a GPU): alongside the preparation, before any agent's brief.
        self.facts = await anyio.to_thread.run_sync(gather_facts, self.device, tuple(self.config.fleet.languages),
                                                    self.gpus[0] if self.gpus else None, self.gpu_name,
                                                    abandon_on_cancel=True)

    async def _prepare_all(self) -> None:
        # As many problems in preparation as the evaluator measures T_b side by side: a baseline's torch.compile
        # keeps one process busy on the CPU for many seconds, while other problems' timings use the GPUs.
        limiter = anyio.CapacityLimiter(max(1, self.evaluator.baselines_at_once()))
        started = time.monotonic()
        total = len(self.problems)
        begun = 0

        async def prepare_one(problem_id: int, problem: Problem) -> None:
            nonlocal begun
            async with limiter:
                try:
                    if not is_prepared(self.store.problem(problem_id)):
                        begun += 1
                        self.event("log", f"preparing ({begun} of {total} begun): T_sol, T_b of "
                                          f"{sum(not w.unavailable for w in problem.workloads)} workloads, the seed",
                                   problem_id=problem_id)
                    await self._prepare(problem_id, problem)
                    line = preparation_line(self.store.problems(), time.monotonic() - started)
                    if line:
                        self.event("log", line, problem_id=problem_id)
                except Exception as exc:  # noqa: BLE001 - one problem that cannot be prepared must not end the run
                    # Counted as a run of failures, so the planner keeps it closed until a person resumes it.
                    self.store.update_problem(problem_id, status="failed",
                                              failures_in_row=self.config.planner.max_consecutive_failures)
                    self.event("log", f"could not prepare the problem: {type(exc).__name__}: {str(exc)[:300]}",
                               problem_id=problem_id)
                    return
                self.ready.add(problem_id)

        async with anyio.create_task_group() as tg:
            for problem_id, problem in self.problems.items():
                tg.start_soon(prepare_one, problem_id, problem)
        self.prepared_all = True
        if begun:
            self.event("log", f"prepared {total}/{total} problems in {duration(time.monotonic() - started)}")

    async def _prepare(self, problem_id: int, problem: Problem) -> None:
        row = self.store.problem(problem_id)
        runnable = [w.index for w in problem.workloads if not w.unavailable]
        if not row.workloads and runnable:
            await self.baselines.measure(problem_id, problem)
        elif row.workloads:
            self.evaluator.remember_sol(problem, {w.index: w.t_sol_ms for w in row.workloads if w.t_sol_ms})
        for pending in self.store.attempts(problem_id, state="pending"):
            self.event("log", f"re-evaluating attempt {pending.id}, interrupted by the last stop",
                       agent_id=pending.agent_id, problem_id=problem_id)
            await self._complete(problem_id, pending.id, parse_solution(pending.solution), pending.workloads,
                                 priority=PREPARATION_PRIORITY)
        if not any(a.note == "seed" for a in self.store.attempts(problem_id)):
            solution, origin = pick_seed(problem, self.device, tuple(self.config.fleet.languages))
            recorded = await self._attempt(problem_id, Candidate(solution, note="seed"), priority=PREPARATION_PRIORITY)
            self.event("log", f"seed from {origin}: {_outcome_line(recorded.attempt)}", problem_id=problem_id)

    async def _attempt(self, problem_id: int, candidate: Candidate, decided: Verdict | None = None, *,
                       priority: int | None = None) -> Recorded:
        """Begin, evaluate and record an attempt (``core.fleet.attempt``); ``decided``: a verdict reached before
        any build (a static check, the reviewer), recorded as it is without an evaluation; ``priority`` None: the
        problem's."""
        attempt_id = self.life.begin(problem_id, candidate)
        return await self._complete(problem_id, attempt_id, candidate.solution, candidate.workloads, decided,
                                    priority=priority)

    async def _complete(self, problem_id: int, attempt_id: int, solution: Solution,
                        workloads: tuple[int, ...] | None, decided: Verdict | None = None, *,
                        priority: int | None = None) -> Recorded:
        """Evaluate and record a pending attempt, then what the run does after each: the event, the problem's
        activity, and a composite of the frontier when a passing result may have changed it."""
        problem = self.problems[problem_id]
        recorded = await self.life.complete(problem_id, problem, attempt_id, solution, workloads, decided=decided,
                                            priority=priority)
        self.attempts_done += 1
        attempt = recorded.attempt
        history = self.activity.setdefault(problem_id, deque())
        history.append((time.time(), attempt.gpu_seconds, attempt.gain))
        agent = "composite" if attempt.composite else self._names.get(attempt.agent_id, "seed")
        self.event("attempt", f"attempt {attempt.id} by {agent}: {_outcome_line(attempt)}"
                              + (f" on {attempt.node} GPU {attempt.gpu}" if self._many_nodes() else "")
                              + (" — new best" if recorded.new_best else "")
                              + (f" [{attempt.note}]" if attempt.note and attempt.note != "seed" else ""),
                   agent_id=attempt.agent_id, problem_id=problem_id)
        # A composite needs a frontier of two or more; most attempts leave it at one, and start no task.
        if attempt.passed and not attempt.composite and self._tasks is not None \
                and len(self.store.problem(problem_id).frontier) >= 2:
            if problem_id in self.composing:
                self._recompose.add(problem_id)
            else:
                self.composing.add(problem_id)
                self._tasks.start_soon(self._compose, problem_id, problem)
        return recorded

    # ---------------------------------------------------------------- composites

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
            self.event("log", f"composite failed: {type(exc).__name__}: {str(exc)[:300]}", problem_id=problem_id)
        finally:
            self.composing.discard(problem_id)

    async def _compose_once(self, problem_id: int, problem: Problem) -> None:
        """Evaluate, as an attempt of no agent, the composite of a frontier of two or more members when that
        content is new; calls of a shape no member leads go to the fastest full member."""
        row = self.store.problem(problem_id)
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
            solution = compose(problem, frontier, {i: self.store.attempt(i).solution for i in members},
                               fallback.attempt_id)
        except CompositeError as exc:
            if members not in self._compose_refused:
                self._compose_refused.add(members)
                self.event("log", f"no composite of attempts {', '.join(map(str, members))}: {exc}",
                           problem_id=problem_id)
            return
        as_dict = solution_to_dict(solution)
        digest = content_hash(as_dict)
        if digest in self._composites_tried or self.store.attempts_with_content(problem_id, digest):
            return
        self._composites_tried.add(digest)
        self.budgets.check_evaluation(problem_id)
        note = "composite: " + "; ".join(f"attempt {m.attempt_id} on workload {', '.join(map(str, m.leads))}"
                                         for m in frontier)
        await self._attempt(problem_id, Candidate(solution, parent_id=members[0], parents=members, note=note))

    # ---------------------------------------------------------------- agents

    async def _agent_loop(self, agent_id: int, kind: str) -> None:
        impl = self.kinds[kind].make(self.config)
        while True:
            problem_id = self.assignment.get(agent_id)
            if problem_id is None or problem_id not in self.ready or self.facts is None:
                await anyio.sleep(IDLE_POLL_S)
                continue
            profile = self.profile_of.get(agent_id, "")
            held = self.holds.get(agent_id) == problem_id  # this turn is the escalated one
            identity = AgentIdentity(agent_id, self._names[agent_id], kind,
                                     self.profiles[profile].llm.model if profile else "", profile)

            def should_stop(pid=problem_id, profile=profile) -> bool:
                return self.assignment.get(agent_id) != pid or self.profile_of.get(agent_id, "") != profile

            best_before = self.store.problem(problem_id).best_attempt_id
            bench = Workbench(self.services, identity, self.problems[problem_id], problem_id, should_stop)
            self.working.add(agent_id)
            self.store.update_agent(agent_id, state="working", problem_id=problem_id)
            spent = ""
            try:
                outcome = await impl.work(bench)
            except BudgetSpent as exc:  # before a model call or an evaluation: the agent has done all it may here
                outcome, spent = WorkOutcome.EXHAUSTED, str(exc)
            except Exception as exc:  # noqa: BLE001 - an agent's bug costs its turn, not the run
                outcome = WorkOutcome.STOPPED
                self.event("log", f"agent error: {type(exc).__name__}: {exc}", agent_id=agent_id,
                           problem_id=problem_id)
                await anyio.sleep(self.config.planner.tick_s)
            finally:
                self.working.discard(agent_id)
            if held and self.holds.get(agent_id) == problem_id:  # its one escalated turn is over
                del self.holds[agent_id]
                if self.assignment.get(agent_id) == problem_id:
                    self.assignment[agent_id] = None
                    self.store.update_agent(agent_id, state="idle", problem_id=None)
                since = self.store.problem(problem_id).since_improvement
                self.event("decision", "escalated turn ended: " + ("the plateau is broken" if since == 0 else
                                                                   f"{since} attempts since the last gain"),
                           agent_id=agent_id, problem_id=problem_id)
            if outcome is WorkOutcome.RETIRED:
                self.assignment[agent_id] = None
                self.store.update_agent(agent_id, state="stopped", problem_id=None)
                return
            if outcome is WorkOutcome.EXHAUSTED:
                self.exhausted.add((f"{kind}/{profile}" if profile else kind, problem_id,
                                    self.store.problem(problem_id).best_attempt_id))
                if spent:
                    self.event("log", f"stopping: {spent}", agent_id=agent_id, problem_id=problem_id)
                elif self.store.problem(problem_id).best_attempt_id == best_before:
                    self.event("log", "nothing more to try here", agent_id=agent_id, problem_id=problem_id)
                if self.assignment.get(agent_id) == problem_id:
                    self.assignment[agent_id] = None
                    self.store.update_agent(agent_id, state="idle", problem_id=None)
            else:
                self.store.update_agent(agent_id, state="idle" if self.assignment.get(agent_id) is None else
                                        "working")
                empty = self._empty_turns.get(agent_id, 0) + 1 if bench.attempts_begun == 0 else 0
                self._empty_turns[agent_id] = empty
                if empty:
                    await self._rest(agent_id, problem_id, min(EMPTY_TURN_REST_MAX_S,
                                                               self.config.planner.tick_s * 2 ** empty))

    async def _rest(self, agent_id: int, problem_id: int, seconds: float) -> None:
        """Wait ``seconds`` before the agent's next turn on ``problem_id``, less if it is moved or the best changes."""
        best = self.store.problem(problem_id).best_attempt_id
        until = time.monotonic() + seconds
        while time.monotonic() < until and self.assignment.get(agent_id) == problem_id:
            await anyio.sleep(IDLE_POLL_S)
            if self.store.problem(problem_id).best_attempt_id != best:
                return

    def _eligible(self, problems) -> dict[str, frozenset[int]]:
        eligible: dict[str, set[int]] = {}
        rows = {p.id: p for p in problems}
        lanes: dict[str, set[str]] = {}  # only kinds this run has agents of (a judge may import much)
        for agent in self.store.agents():
            if agent.kind in self.kinds:
                lanes.setdefault(agent.kind, {agent.kind}).add(lane(agent))
        for kind in (self.kinds[name] for name in lanes):
            judge = self._judges.get(kind.name)
            if judge is None:
                judge = self._judges[kind.name] = kind.make(self.config)
            able = set()
            for pid in self.ready:
                best_id = rows[pid].best_attempt_id
                if (kind.name, best_id) not in self._can_work:
                    self._can_work[kind.name, best_id] = judge.can_work_on(
                        self.store.attempt(best_id) if best_id is not None else None)
                if self._can_work[kind.name, best_id]:
                    able.add(pid)
            for name in lanes[kind.name]:
                eligible[name] = {pid for pid in able if (name, pid, rows[pid].best_attempt_id) not in self.exhausted}
        return {k: frozenset(v) for k, v in eligible.items()}

    # ---------------------------------------------------------------- planner and controls

    async def _planner_loop(self) -> None:
        ticks = 0
        while True:
            if not self.store.still_in_place():
                raise RunDirGone(f"{self.run_dir / DB_NAME} is no longer the store this run writes")
            self._apply_controls()
            for line in self.evaluator.news():
                self.event("log", line)
            self._plan_once()
            self._plan_profiles()
            self._verify_settled()
            if ticks % 5 == 0:
                self._record_metrics()
            ticks += 1
            if self.prepared_all and not self.working and not self.composing and not self.verifying \
                    and not any(self.assignment.values()):
                self.finished = True
                self.request_stop("nothing left to do: every problem is plateaued, spent, paused or fully tuned, "
                                  "or no agent can work on it")
            await anyio.sleep(self.config.planner.tick_s)

    def _plan_once(self) -> None:
        now = time.time()
        problems = tuple(self.store.problems())
        agents = tuple(a for a in self.store.agents() if a.id not in self.holds)  # held: see _plan_profiles
        activity = {}
        for pid, history in self.activity.items():
            while history and history[0][0] < now - ACTIVITY_WINDOW_S:
                history.popleft()
            activity[pid] = ProblemActivity(pid, sum(h[1] for h in history), sum(h[2] for h in history))
        totals = self.store.totals()
        result = plan(PlannerInput(now, problems, agents, activity, self._eligible(problems), self.config.planner,
                                   self.config.budgets, RunTotals(now - self._started, int(totals["attempts"]),
                                                                  int(totals["tokens"]), float(totals["dollars"]))))
        with self.store.transaction():  # one commit for the whole tick's decisions
            for change in result.status_changes:
                if change.status == "done" and change.problem_id not in self.ready:
                    continue  # not measured and seeded yet: no agent could be eligible, but it is not done
                self.store.update_problem(change.problem_id, status=change.status)
                self.event("decision", f"{change.status}: {change.reason}", problem_id=change.problem_id)
            for move in result.assignments:
                self.assignment[move.agent_id] = move.problem_id
                self.store.update_agent(move.agent_id, problem_id=move.problem_id,
                                        state="working" if move.problem_id is not None else "idle")
                self.event("decision", move.reason, agent_id=move.agent_id, problem_id=move.problem_id)
        if result.stop_reason:
            self.request_stop(result.stop_reason)

    async def _llm_planner_loop(self) -> None:
        """The planner model's rounds, every llm_interval_s once every problem is prepared: its proposals are
        controls, applied as a person's are; the rules planner goes on every tick."""
        from core.config.schema import profile_llm
        from core.llm.client import LlmDown, LlmUnavailable
        from core.planner.llm_planner import LlmPlanner

        planner = LlmPlanner(profile_llm(self.config.llm, self.config.planner.llm_profile),
                             self.config.planner.llm_max_actions)
        while not self.prepared_all:
            await anyio.sleep(IDLE_POLL_S)
        while True:
            await anyio.sleep(self.config.planner.llm_interval_s)
            try:
                await self._llm_plan_round(planner)
            except LlmDown as exc:
                self.event("log", f"planner model: stopped for the rest of the run: {exc}")
                return
            except LlmUnavailable as exc:
                self.event("log", f"planner model unavailable this round: {exc}")
            except BudgetSpent as exc:
                self.event("log", f"planner model: no call this round: {exc}")

    async def _llm_plan_round(self, planner) -> None:
        from core.planner.llm_planner import fleet_state
        from core.store.model import device_word

        usage = self._usage()
        state = fleet_state(self.store.problems(), self.store.agents(), self.store.totals(),
                            elapsed_s=time.time() - self._started, gpu_busy=usage.busy_fraction() if usage else None,
                            planner=self.config.planner, budgets=self.config.budgets,
                            device_word=device_word(self.device))
        answer = await planner.propose(state, reserve=lambda tokens, dollars: self.budgets.model_call(
            None, tokens, dollars), record=lambda call: self.store.add_llm_call(
                None, None, call, profile=self.config.planner.llm_profile, model=planner.cfg.model),
            log=lambda line: self.event("log", f"planner model: {line}"))
        if answer.unusable:
            self.event("log", f"planner model: nothing applied: {answer.unusable}")
        for refusal in answer.refusals:
            self.event("log", f"planner model: refused {refusal.what}: {refusal.why}")
        if not answer.proposals and not answer.unusable:
            self.event("log", "planner model: no change proposed")
        for proposal in answer.proposals:
            value = "" if proposal.value is None else str(proposal.value)
            try:
                result = self._apply_control(proposal.command, proposal.target, value)
            except ValueError as exc:
                self.event("log", f"planner model: refused {proposal.describe()}: {exc}")
                continue
            kind = COMMANDS[proposal.command][0]
            self.event("decision", f"planner model: {proposal.reason} ({proposal.describe()}: {result})",
                       problem_id=self._problem_id(proposal.target) if kind == "problem" else None,
                       agent_id=self._agent_id(proposal.target) if kind == "agent" else None)

    # ---------------------------------------------------------------- model profiles

    def _set_profile(self, agent_id: int, profile: str) -> None:
        self.profile_of[agent_id] = profile
        self.store.update_agent(agent_id, profile=profile, model=self.profiles[profile].llm.model)

    def _plan_profiles(self) -> None:
        """With several profiles: escalate a plateaued problem (every tick), and move one agent to the profile
        that pays (every profile_switch_s); ``core.planner.profiles`` decides. A held agent is out of ``plan``'s
        sight until its escalated turn ends, so the plateau does not free it."""
        if len(self.profiles) < 2:
            return
        cfg = self.config.planner
        specs = profile_specs(tuple(self.profiles.values()))
        free = tuple(a for a in self.store.agents() if a.kind == "llm" and a.id not in self.holds)
        if cfg.escalate_plateaued:
            up = choose_escalation(tuple(self.store.problems()), free, specs, frozenset(self.escalated), cfg,
                                   self.config.budgets)
            if up is not None:
                self.escalated.add(up.problem_id)
                self.holds[up.agent_id] = up.problem_id
                self._set_profile(up.agent_id, up.profile)
                self.assignment[up.agent_id] = up.problem_id
                self.store.update_agent(up.agent_id, problem_id=up.problem_id, state="working")
                self.event("decision", up.reason, agent_id=up.agent_id, problem_id=up.problem_id)
                free = tuple(a for a in free if a.id != up.agent_id)
        if time.monotonic() - self._profiles_judged_at < cfg.profile_switch_s:
            return
        self._profiles_judged_at = time.monotonic()
        switch = choose_switch(specs, free, self.store.profile_usage(), min_attempts=cfg.profile_min_attempts,
                               floor=cfg.profile_floor)
        if switch is not None:
            self._set_profile(switch.agent_id, switch.new)
            self.event("decision", f"agent {self._names[switch.agent_id]}: {switch.reason}", agent_id=switch.agent_id)

    def _drop_stale_stops(self) -> None:
        """A stop asked of the last start that it never applied (asked while it re-verified its bests, after its
        planner had ended) is not carried into this one: resuming is asking the run to go on."""
        for control in self.store.controls(pending_only=True):
            if control.command == "stop_run":
                result = "dropped: the run had stopped before it was applied; --resume started it again"
                self.store.mark_control_applied(control.id, result)
                self.event("control", f"stop_run: {result}")

    def _apply_controls(self) -> None:
        for control in self.store.controls(pending_only=True):
            try:
                result = self._apply_control(control.command, control.target, control.value)
            except ValueError as exc:
                result = f"refused: {exc}"
            self.store.mark_control_applied(control.id, result)
            self.event("control", f"{control.command} {control.target} {control.value}".strip() + f": {result}")

    def _problem_id(self, target: str) -> int:
        for pid, key in self._keys.items():
            if target in (key, str(pid), key.split("/", 1)[-1]):
                return pid
        raise ValueError(f"no problem {target!r}")

    def _agent_id(self, target: str) -> int:
        for aid, name in self._names.items():
            if target in (name, str(aid)):
                return aid
        raise ValueError(f"no agent {target!r}")

    def _apply_control(self, command: str, target: str, value: str) -> str:
        if command == "stop_run":
            self.request_stop("stopped by a stop_run control")
            return "stopping"
        if command in ("pause_agent", "resume_agent"):
            agent_id = self._agent_id(target)
            paused = command == "pause_agent"
            self.store.update_agent(agent_id, paused=paused, state="paused" if paused else "idle")
            if paused:
                self.assignment[agent_id] = None
                self.store.update_agent(agent_id, problem_id=None)
            return "paused" if paused else "resumed"
        problem_id = self._problem_id(target)
        row = self.store.problem(problem_id)
        if command == "pause_problem":
            self.store.update_problem(problem_id, paused=True, status="paused")
            return "paused"
        if command == "resume_problem":
            # A person reopening a problem resets what closed it (failures, plateau), not its budgets.
            self.store.update_problem(problem_id, paused=False, status="waiting", failures_in_row=0,
                                      since_improvement=0)
            self.exhausted = {e for e in self.exhausted if e[1] != problem_id}
            return "resumed"
        if command in ("set_priority", "bump_priority"):
            number = int(value)
            priority = number if command == "set_priority" else row.priority + number
            self.store.update_problem(problem_id, priority=priority)
            return f"priority {row.priority} -> {priority}"
        if command in ("pin_problem", "unpin_problem"):
            self.store.update_problem(problem_id, pinned=command == "pin_problem")
            return "pinned" if command == "pin_problem" else "unpinned"
        raise ValueError(f"unknown control {command!r}")

    def _record_metrics(self) -> None:
        rows = self.store.problems()
        sols = [p.best_sol for p in rows if p.best_sol is not None]
        speedups = [p.best_speedup for p in rows if p.best_speedup]
        totals = self.store.totals()
        usage = self._usage()
        self.store.add_metric(
            fleet_mean_sol=statistics.fmean(sols) if sols else None,
            geomean_speedup=geomean(speedups) if speedups else None,
            gpu_busy=usage.busy_fraction() if usage else None,
            queue_wait_s=usage.queue_wait_s / usage.jobs if usage and usage.jobs else None,
            attempts=int(totals["attempts"]), tokens=int(totals["tokens"]), dollars=float(totals["dollars"]),
            active_problems=sum(p.status == "active" for p in rows))


def _outcome_line(attempt) -> str:
    if attempt.status != "PASSED":
        return f"{attempt.status}: {attempt.reason[:160]}"
    parts = ["PASSED"]
    if attempt.speedup is not None:
        parts.append(f"{attempt.speedup:.2f}x")
    if attempt.sol is not None:
        parts.append(f"SOL {attempt.sol:.2f}")
    return " ".join(parts)
