"""The run's lifecycle: its lock, its store, one anyio task group holding the run's jobs (the machine's facts, the
problems' preparation, the planner's tick, the composites, the re-verification of settled bests, each agent kind's
loops and one loop per agent) and the GPU pool, then the end: the bests re-verified, the final state, the store
closed. The jobs share one ``RunContext`` (``core.fleet.context``); the store is written only from this process
(one writer), and every change a person or the planner makes becomes an event.

Crash safety: an attempt is recorded (pending) before it is evaluated and completed in one transaction with the
counters it moves; ``--resume`` re-evaluates whatever was pending, so after a kill at any moment no attempt is lost
or counted twice.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from core.config import FleetConfig
from core.evaluate.evaluator import Evaluator
from core.evaluate.hosts import HostOptions, backend_named
from core.evaluate.timing_policy import describe as timing_description
from core.fleet.agent_loop import AgentLoop
from core.fleet.attempt import AttemptLife, EvaluationPolicy
from core.fleet.baselines import ModelBaselines
from core.fleet.composites import Composites
from core.fleet.context import EventSink, FleetError, RunContext
from core.fleet.faults import fault_line, machine_fault
from core.fleet.kinds import AgentKind, registered
from core.fleet.metrics import record_metrics
from core.fleet.planning import Planning
from core.fleet.preparation import gather_facts, prepare_all
from core.fleet.reverify import SettledReverify, stop_deadline, verify_bests, verify_left
from core.fleet.run_attempts import RunAttempts
from core.fleet.services import bench_services
from core.fleet.setup import load_problems, lock_run, open_run
from core.fleet.verify import BestVerifier
from core.fleet.workbench import BenchServices

__all__ = ["EventSink", "Fleet", "FleetError"]


class Fleet:
    def __init__(self, run_dir: str | Path, config: FleetConfig | None = None, problem_paths: list[str] | None = None,
                 *, resume: bool = False, on_event: EventSink | None = None,
                 agent_kinds: dict[str, AgentKind] | None = None, blob_roots: tuple[str, ...] = (),
                 evaluator_factory: Callable[[Fleet], Evaluator] | None = None):
        """``agent_kinds``: kinds beside (or replacing) the registered ones (``core.fleet.kinds``);
        ``evaluator_factory``: the run's devices (default: this machine's, or the Ray cluster of
        ``[cluster] ray_address``), called at run start."""
        self.run_context = RunContext(run_dir, config or FleetConfig(),
                                      [str(Path(p).resolve()) for p in (problem_paths or [])], resume=resume,
                                      on_event=on_event, kinds={**registered(), **(agent_kinds or {})},
                                      blob_roots=blob_roots)
        self.evaluator_factory = evaluator_factory
        self.attempts = RunAttempts(self.run_context)
        self.lock = None

    # What callers read of a run: the context's.
    run_dir = property(lambda self: self.run_context.run_dir)
    config = property(lambda self: self.run_context.config)
    problem_paths = property(lambda self: self.run_context.problem_paths)
    resume = property(lambda self: self.run_context.resume)
    kinds = property(lambda self: self.run_context.kinds)
    store = property(lambda self: self.run_context.store)
    problems = property(lambda self: self.run_context.problems)
    _keys = property(lambda self: self.run_context.keys)
    device = property(lambda self: self.run_context.device)
    gpus = property(lambda self: self.run_context.gpus)
    facts = property(lambda self: self.run_context.facts)
    evaluator = property(lambda self: self.run_context.evaluator)
    attempts_done = property(lambda self: self.run_context.attempts_done)
    finished = property(lambda self: self.run_context.finished)
    stop_reason = property(lambda self: self.run_context.stop_reason)

    def event(self, kind: str, message: str, *, agent_id: int | None = None, problem_id: int | None = None) -> None:
        self.run_context.event(kind, message, agent_id=agent_id, problem_id=problem_id)

    def request_stop(self, reason: str) -> None:
        self.run_context.request_stop(reason)

    def bench_services(self, evaluator: Evaluator | None = None) -> BenchServices:
        """What every workbench of this run is given (after ``open``; the evaluator once the run started)."""
        return bench_services(self.run_context, self.attempts, evaluator)

    # ---------------------------------------------------------------- open and close

    def open(self) -> None:
        """Open the store, load the problems and register agents; FleetError says why a run cannot start."""
        run = self.run_context
        if run.store is not None:
            return
        # A new run's problems are checked before anything is written: a bad path leaves no store behind.
        loaded = None if run.resume else load_problems(run)
        self.lock = lock_run(run)
        try:
            open_run(run, loaded)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the store and let the run's lock go (a process that ends lets it go too, however it ends)."""
        if self.run_context.store is not None:
            self.run_context.store.close()
        if self.lock is not None:
            self.lock.release()

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

    async def verify(self, on_verified: Callable[[int], None] | None = None) -> tuple[int, list[int]]:
        """``kernelfleet verify``: open the run as a resume does and re-verify the bests its stops left, with no
        agent working (``core.fleet.reverify.verify_left``); how many were waiting and those still left."""
        self.open()
        try:
            return await verify_left(self.run_context, self._make_evaluator, on_verified)
        finally:
            self.close()

    async def _run(self) -> str:
        run = self.run_context
        began = time.time()
        with anyio.CancelScope() as scope:
            run.scope = scope
            if run.stop_reason:
                scope.cancel()
            async with self._make_evaluator() as evaluator:
                self._start(evaluator)
                try:
                    async with anyio.create_task_group() as tg:
                        self._start_jobs(tg)
                finally:
                    with anyio.CancelScope(shield=True):
                        for kind in run.kinds.values():
                            if kind.close is not None:
                                await kind.close()
        usage = run.usage()
        if usage is not None and usage.wanted_s > 0:
            run.event("log", f"pool since this start: {usage.summary()}")
        await verify_bests(run, self._make_evaluator, deadline=stop_deadline(run, began))
        state = "finished" if run.finished else "stopped"
        record_metrics(run)
        run.store.set_run_state(state)
        run.event("run", f"{state}: {run.stop_reason or 'done'}")
        return state

    def _start(self, evaluator: Evaluator) -> None:
        """The run's machinery on ``evaluator``, and the events that say the run started."""
        run = self.run_context
        run.evaluator = evaluator
        cfg = run.config

        def log(line: str, problem_id: int | None = None) -> None:
            run.event("log", line, problem_id=problem_id)

        policy = EvaluationPolicy(cfg.evaluation.rounds, run.timing, run.blob_roots, cfg.planner.plateau_min_gain)
        compile_s = cfg.evaluation.compile_timeout_s if cfg.evaluation.compile_baseline else 0
        run.baselines = ModelBaselines(run.store, evaluator, timing=run.timing, compile_timeout_s=compile_s,
                                       blob_roots=run.blob_roots, log=log)
        run.life = AttemptLife(run.store, evaluator, policy, run.baselines)
        if cfg.evaluation.verify_rounds:
            run.verifier = BestVerifier(run.store, run.life, cfg.evaluation.verify_rounds, log=log)
        run.services = self.bench_services(evaluator)
        run.store.set_run_state("running", owner=f"{socket.gethostname()}:{os.getpid()}")
        run.event("run", f"{'resumed' if run.resume else 'started'}: {len(run.problems)} problems, "
                         f"{len(run.names)} agents, device {run.device}"
                         + (f" {run.gpus} ({run.gpu_name})" if run.gpus else ""))
        for line in evaluator.describe():
            run.event("log", line)
        run.event("log", timing_description(run.timing, run.device))

    def _start_jobs(self, tg: anyio.abc.TaskGroup) -> None:
        run = self.run_context
        reverify = SettledReverify(run)
        tg.start_soon(gather_facts, run)
        tg.start_soon(prepare_all, run, self.attempts)
        tg.start_soon(Planning(run, reverify).loop)
        tg.start_soon(Composites(run, self.attempts).serve)
        tg.start_soon(reverify.serve)
        for kind in run.kinds.values():
            for loop in kind.loops(run):
                tg.start_soon(loop)
        for agent in run.store.agents():
            tg.start_soon(AgentLoop(run, agent.id, agent.kind).loop)

    def _make_evaluator(self) -> Evaluator:
        if self.evaluator_factory is not None:
            return self.evaluator_factory(self)
        run = self.run_context
        cluster = run.config.cluster
        return backend_named(cluster.backend, cluster.ray_address).make(HostOptions(
            run.device, tuple(run.gpus), run.gpu_name or None, spare=run.config.gpus.spare,
            workload_timeout_s=run.config.gpus.workload_timeout_s, memory_budget=run.config.gpus.memory_budget,
            readable=tuple(map(str, [*run.problem_paths, *run.blob_roots])), address=cluster.ray_address,
            builds=run.builds))
