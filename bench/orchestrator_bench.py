"""The orchestrator at scale, simulated: the real Fleet (store, planner, tuner agents running optuna, controls,
metrics, composites) behind the ``Evaluator`` seam, with a ``SimulatedEvaluator`` of --gpus simulated GPUs in place
of builds and devices.

    python bench/orchestrator_bench.py [--problems 1000] [--agents 256] [--gpus 1000] [--seconds 60]
                                       [--eval-ms 1000] [--trials 16] [--prepare-slots N] [--writer-seconds 5]
                                       [--profile cprofile|pyinstrument]

A simulated GPU is like hardware beside the event loop: it starts a job the moment the evaluator hands it one and
is done --eval-ms later, whether or not the loop is free then; the verdict is PASSED, with times that depend on the
candidate's CHUNK tunable. The run is measured from the moment every problem is prepared (baseline and seed
recorded) for --seconds, then stopped. Prints a short table last; what it measures:

- dispatch latency: for each agent's evaluation, from the agent asking for it (its call of
  ``Workbench.evaluate``) to its job starting on a simulated GPU, less the time during which every GPU was busy
  (from the request reaching the evaluator to a GPU coming free for it; 0 when one was free on arrival). The GPU
  time comes after the start and is not in it. What is left is what the orchestrator and the evaluator add: the
  budget check, the static checks, the diff, the pending attempt written, the request built, a GPU chosen.
- the way back: from a job's GPU time being over to the loop running the request's task again (noticed), and from
  there to the attempt recorded; and an agent's gap between its consecutive trials in one turn (its previous job
  done to its next job started: noticing, recording, the tuner choosing the next trial, dispatch, and any wait for
  a GPU): with a GPU free for every agent, the time the agent's GPU stands idle.
- store rows/s: rows the store's one writer inserted or updated (``sqlite3.Connection.total_changes``) per second
  of the measured window; the worst 5 s window too.
- GPU busy: device time used over device time wanted, as ``core.evaluate.pool.PoolUsage`` counts it: wanted is
  min(requests in the evaluator, GPUs) integrated over time, from a request entering ``evaluate`` to the loop
  noticing its job done; used is the GPU time itself (--eval-ms a job). Also the mean GPUs in use over all GPUs.
- CPU per attempt: the process's CPU time over the window's attempts, and where it went: thread CPU time of the
  tuner agents' steps (each run of an agent's task between two awaits, ``TunerAgent.work`` and all it calls), of
  the steps inside their ``Workbench.evaluate`` calls (the orchestrator's path: checks, the pending attempt, the
  request, the recording), of ``record_result`` alone and of the planner's ticks. The tuner's own share is the
  agents' steps less their evaluations'. Thread CPU time counts only this process's own work, so these figures
  hold on a machine shared with other work, where wall-clock figures do not.
- store writer alone (--writer-seconds): afterwards, a fresh store records agents' attempts back to back through the
  fleet's own path, with nothing else on the thread: what the writer sustains when it has the core to itself.

``core.fleet.preparation.prepare_all`` prepares one problem at a time per GPU in ``[gpus] ids`` (the local list), which is one for a
run on simulated GPUs; the bench lists --prepare-slots ids there (default: --gpus) so that the 1,000 problems are
ready in seconds rather than after 1,000 seed evaluations in a row (--prepare-slots 0: the fleet's own default).
"""

from __future__ import annotations

import argparse
import contextvars
import heapq
import itertools
import json
import math
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.config import parse_config  # noqa: E402
from core.evaluate.baseline import WorkloadBaseline  # noqa: E402
from core.evaluate.evaluator import Evaluation, EvaluationRequest, Placement  # noqa: E402
from core.evaluate.pool import PoolUsage  # noqa: E402
from core.evaluate.timing_policy import TimingPolicy  # noqa: E402
from core.evaluate.verdict import Status, Timing, Verdict, WorkloadVerdict  # noqa: E402
from core.problem.schema import Problem  # noqa: E402
from core.roofline.problem_sol import SolModel  # noqa: E402
from core.solution.tunables import TUNABLES_FILE  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "fleet"))
sys.path.insert(0, str(ROOT / "tests" / "support"))
from fleet_problems import seed_solution  # noqa: E402

DEVICE_MODEL = "simulated H200"


def write_problems(root: Path, count: int, chunks: tuple[int, ...]) -> None:
    template = {
        "description": "synthetic", "axes": {"rows": {"type": "var"}, "width": {"type": "const", "value": 64}},
        "inputs": {"x": {"shape": ["rows", "width"], "dtype": "float32"},
                   "w": {"shape": ["width"], "dtype": "float32"}},
        "outputs": {"out": {"shape": ["rows", "width"], "dtype": "float32"}},
        "reference": "import torch\n\ndef run(x, w):\n    return torch.relu(x * w)\n",
    }
    for n in range(count):
        name = f"p{n:04d}"
        folder = root / f"set{n % 10}" / name
        (folder / "solutions").mkdir(parents=True)
        (folder / "definition.json").write_text(json.dumps({"name": name, **template}))
        lines = [{"uuid": f"{name}-{r}", "axes": {"rows": r}, "inputs": {"x": {"type": "random"},
                                                                       "w": {"type": "random"}}} for r in (64, 256)]
        (folder / "workload.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
        seed = seed_solution("scaled_relu", chunks=chunks)
        seed["definition"] = name
        (folder / "solutions" / "seed_torch.json").write_text(json.dumps(seed))


# ---------------------------------------------------------------- tracing one request end to end

@dataclass
class Trace:
    """One evaluation's times (time.monotonic()), filled by the agent's side and the evaluator's."""

    task: int  # the anyio task that asked: a task started from it (a composite) inherits the context, not the trace
    requested: float  # an agent called Workbench.evaluate (seeds, composites: the request entered the evaluator)
    turn: int = 0  # the Workbench (one agent's turn on one problem) that asked; 0 for seeds and composites
    entered: float | None = None  # the request reached SimulatedEvaluator.evaluate
    all_busy_s: float = 0.0  # from entering to a GPU coming free for it, when none was free on arrival
    started: float | None = None  # the job was handed to its GPU, which starts it at once
    ended: float | None = None  # the simulated GPU time was over (started + --eval-ms)
    woke: float | None = None  # the request's task ran again: the orchestrator noticed the job had ended
    recorded: float | None = None  # Workbench.evaluate returned: the attempt is recorded


TRACE: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("bench_trace", default=None)


@dataclass
class Measures:
    window: tuple[float, float] | None = None  # monotonic start and end of the measured window
    agent_traces: list[Trace] = field(default_factory=list)
    other_traces: list[Trace] = field(default_factory=list)
    loop_lag: list[tuple[float, float]] = field(default_factory=list)  # (woke at, seconds late)
    samples: list[tuple[float, int]] = field(default_factory=list)  # (t, store rows changed so far)
    ticks_s: list[float] = field(default_factory=list)
    plan_s: list[float] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)  # thread CPU seconds in the window, by part
    calls: dict[str, int] = field(default_factory=dict)  # calls finished in the window, by part

    def add_cpu(self, part: str, seconds: float, call_done: bool = False) -> None:
        if self.in_window(time.monotonic()):
            self.cpu_s[part] = self.cpu_s.get(part, 0.0) + seconds
            if call_done:
                self.calls[part] = self.calls.get(part, 0) + 1

    def in_window(self, t: float | None) -> bool:
        return self.window is not None and t is not None and self.window[0] <= t <= self.window[1]


MEASURES = Measures()


# ---------------------------------------------------------------- the simulated GPUs

class _Waiter:
    __slots__ = ("event", "gpu", "freed_at", "gone")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.gpu: int | None = None
        self.freed_at = 0.0
        self.gone = False


class SimulatedEvaluator:
    """``gpus`` simulated GPUs, ``gpus_per_node`` to a node ("sim-0", "sim-1", ...). A request takes the first
    free GPU, highest priority first when none is free (as ``EvaluationPool`` does). A GPU is like hardware beside
    the event loop: it starts a job the moment it is handed one and is done ``eval_s`` later whether or not the loop
    is free then; the request's task sleeps until then and learns of it when the loop wakes it. No build, no
    confinement."""

    device = "cuda"

    def __init__(self, gpus: int, eval_s: float, *, gpus_per_node: int = 8, baseline_s: float = 0.0,
                 seed: int = 0):
        self.gpus = gpus
        self.eval_s = eval_s
        self.baseline_s = baseline_s
        self.gpus_per_node = gpus_per_node
        self.usage = PoolUsage(devices=gpus)
        self.rng = random.Random(seed)
        self._free = list(range(gpus - 1, -1, -1))  # a stack: the lowest index is taken first
        self._waiting: list[tuple[int, int, _Waiter]] = []  # (-priority, arrival, waiter), a heap
        self._arrival = itertools.count()
        self._sol: dict[Path, dict[int, float]] = {}
        self._placements: tuple[Placement, ...] | None = None

    async def __aenter__(self) -> SimulatedEvaluator:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        return None

    # ------------------------------------------------------------ GPU slots

    async def _acquire(self, priority: int) -> tuple[int, float]:
        """A free GPU and the seconds every GPU was busy before one came free for this request."""
        if self._free and not self._waiting:
            return self._free.pop(), 0.0
        arrived = time.monotonic()
        waiter = _Waiter()
        heapq.heappush(self._waiting, (-priority, next(self._arrival), waiter))
        try:
            await waiter.event.wait()
        except BaseException:
            waiter.gone = True
            if waiter.gpu is not None:
                self._release(waiter.gpu)
            raise
        return waiter.gpu, waiter.freed_at - arrived

    def _release(self, gpu: int) -> None:
        while self._waiting:
            _, _, waiter = heapq.heappop(self._waiting)
            if not waiter.gone:
                waiter.gpu, waiter.freed_at = gpu, time.monotonic()
                waiter.event.set()
                return
        self._free.append(gpu)

    async def _hold(self, seconds: float, priority: int, trace: Trace | None, candidate: bool = True) -> int:
        """One job of ``seconds`` on a GPU, counted in ``usage`` as the pool counts its work: wanted from the
        request to its end being noticed, used for the GPU's own time."""
        asked = time.monotonic()
        self.usage.demand_changed(+1, asked)
        try:
            gpu, all_busy = await self._acquire(priority)
            try:
                started = time.monotonic()
                await anyio.sleep(seconds)
                woke = time.monotonic()
                self.usage.busy_s += seconds
                if candidate:
                    self.usage.queue_wait_s += started - asked
                if trace is not None:
                    trace.all_busy_s, trace.started, trace.ended, trace.woke = \
                        all_busy, started, started + seconds, woke
                return gpu
            finally:
                self._release(gpu)
        finally:
            self.usage.demand_changed(-1, time.monotonic())

    # ------------------------------------------------------------ the Evaluator protocol

    async def evaluate(self, request: EvaluationRequest) -> Evaluation:
        entered = time.monotonic()
        trace = TRACE.get()
        if trace is None or trace.task != anyio.get_current_task().id or trace.entered is not None:
            trace = Trace(anyio.get_current_task().id, entered)  # a seed or a composite: no agent asked
            MEASURES.other_traces.append(trace)
        trace.entered = entered
        chunk = _chunk(request.solution)
        try:
            gpu = await self._hold(self.eval_s, request.priority, trace)
        finally:
            self.usage.jobs += 1
        base = 2.0 / math.log2(chunk + 1) * self.rng.uniform(0.95, 1.05)
        indices = request.workloads if request.workloads is not None else tuple(range(len(request.problem.workloads)))
        results = tuple(WorkloadVerdict(i, Status.PASSED, timing=Timing(base * (1 + i), 0.01, 10, "simulated"))
                        for i in indices)
        verdict = Verdict(Status.PASSED, "", results, ("simulated",), self.eval_s)
        build = {"ok": True, "kind": "python", "seconds": 0.0, "cache_hit": True, "errors": ""}
        return Evaluation(verdict, build, self._placement(gpu))

    async def evaluate_prepared(self, request: EvaluationRequest, prepared: Any) -> Evaluation:
        """A candidate built already: nothing is built here anyway."""
        return await self.evaluate(request)

    async def baseline(self, problem: Problem, workload_indices: Sequence[int] | None = None, *,
                       timing: TimingPolicy | None = None, compile_timeout_s: float = 120.0,
                       blob_roots: tuple[str, ...] = (), priority: int = 0,
                       device_model: str | None = None) -> list:
        indices = list(workload_indices) if workload_indices is not None else list(range(len(problem.workloads)))
        if self.baseline_s > 0:
            await self._hold(self.baseline_s, priority, None, candidate=False)
        return [WorkloadBaseline(i, problem.workloads[i].uuid if hasattr(problem.workloads[i], "uuid") else "",
                                 baseline_ms=1.0, method="eager", eager_ms=1.0, timing_method="simulated")
                for i in indices]

    async def speed_of_light(self, problem: Problem, workload_indices: Sequence[int], *,
                             device_model: str | None = None) -> SolModel:
        return SolModel(unavailable="T_sol unavailable: simulated GPUs have no speed-of-light model")

    def remember_sol(self, problem: Problem, t_sol_ms: dict[int, float]) -> None:
        if t_sol_ms:
            self._sol[problem.path] = dict(t_sol_ms)

    def baseline_model(self) -> str:
        return DEVICE_MODEL

    def _placement(self, gpu: int) -> Placement:
        return Placement(f"sim-{gpu // self.gpus_per_node}", gpu % self.gpus_per_node, DEVICE_MODEL)

    def baselines_at_once(self) -> int:
        return self.gpus

    def placements(self) -> list[Placement]:
        if self._placements is None:  # fixed for the run: built once
            self._placements = tuple(self._placement(gpu) for gpu in range(self.gpus))
        return list(self._placements)

    def describe(self) -> list[str]:
        nodes = math.ceil(self.gpus / self.gpus_per_node)
        return [f"simulated evaluator: {self.gpus} GPUs on {nodes} nodes, {self.eval_s * 1e3:g} ms per evaluation, "
                "no builds, no confinement"]

    def news(self) -> list[str]:
        return []


def _chunk(solution) -> int:
    """The candidate's CHUNK value, read straight from its tunables.json (the fleet has validated it already)."""
    for source in solution.sources:
        if source.path == TUNABLES_FILE:
            return int(json.loads(source.content).get("values", {}).get("CHUNK", 1))
    return 1


# ---------------------------------------------------------------- the store writer alone

def writer_capacity(args, seconds: float) -> dict:
    """Rows/s the store's writer sustains when nothing else wants the thread: a fresh run's store, the problems
    measured, then agents' attempts begun and recorded back to back through the fleet's own path
    (``core.fleet.attempt.AttemptLife``: the pending attempt, the result and its counters, the frontier), each with
    its event and its agent's row updated, as ``core.fleet.run_attempts.RunAttempts.complete`` and the agent loop do."""
    from core.fleet.attempt import AttemptLife, Candidate, EvaluationPolicy
    from core.fleet.orchestrator import Fleet
    from core.solution.tunables import with_values

    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_problems(root / "problems", args.problems, tuple(range(1, args.chunks + 1)))
        fleet = Fleet(root / "run", _config(args), [str(root / "problems")])
        fleet.open()
        store = fleet.store
        infos = [{"index": i, "axes": "", "t_b_ms": 1.0, "baseline_method": "eager"} for i in (0, 1)]
        for pid in fleet.problems:
            store.set_problem_workloads(pid, infos)
        agents = [a.id for a in store.agents()]
        life = AttemptLife(store, None, EvaluationPolicy())
        from core.fleet.seeds import pick_seed

        seeds = {pid: pick_seed(p, "cpu", ("pytorch",))[0] for pid, p in list(fleet.problems.items())[:64]}
        pids = list(seeds)
        count, rows0 = 0, store.conn.total_changes
        began = time.perf_counter()

        async def one(pid: int, agent: int) -> None:
            chunk = rng.randint(1, args.chunks)
            solution = with_values(seeds[pid], {"CHUNK": chunk})
            base = 2.0 / math.log2(chunk + 1)
            verdict = Verdict(Status.PASSED, "", tuple(WorkloadVerdict(i, Status.PASSED, timing=Timing(
                base * (1 + i), 0.01, 10, "simulated")) for i in (0, 1)), ("simulated",), 1.0)
            candidate = Candidate(solution, agent, tunables={"CHUNK": chunk}, note=f"tuner: CHUNK={chunk}")
            recorded = await life.run(pid, fleet.problems[pid], candidate, decided=verdict)
            store.add_event("attempt", f"attempt {recorded.attempt.id}: passed", agent_id=agent, problem_id=pid)
            store.update_agent(agent, state="working", problem_id=pid)

        async def loop() -> None:
            nonlocal count
            while time.perf_counter() - began < seconds:
                await one(pids[count % len(pids)], agents[count % len(agents)])
                count += 1

        anyio.run(loop)
        wall = time.perf_counter() - began
        rows = store.conn.total_changes - rows0
        store.close()
    return {"writer_alone_rows_per_s": rows / wall, "writer_alone_attempts_per_s": count / wall,
            "writer_alone_rows_per_attempt": rows / max(count, 1)}


# ---------------------------------------------------------------- hooks into the real code (timing only)

def _hook_workbench() -> Any:
    """Stamp the moment an agent asks for an evaluation (it calls ``Workbench.evaluate``) and the moment that call
    returns, its attempt recorded."""
    from core.fleet import workbench

    original = workbench.Workbench.evaluate

    async def evaluate(self, *args, **kwargs):
        trace = Trace(anyio.get_current_task().id, time.monotonic(), id(self))
        token = TRACE.set(trace)
        try:
            result = await original(self, *args, **kwargs)
        finally:
            TRACE.reset(token)
        trace.recorded = time.monotonic()
        if trace.started is not None:  # evaluated, not refused by a static check
            MEASURES.agent_traces.append(trace)
        return result

    workbench.Workbench.evaluate = evaluate
    return lambda: setattr(workbench.Workbench, "evaluate", original)


class _StepTimed:
    """Awaits a coroutine, adding the thread CPU time of each of its steps (from being resumed to its next await)
    to ``part`` in ``MEASURES``: the CPU a task spends on the event loop's thread, without the time it waits."""

    def __init__(self, coroutine, part: str):
        self.coroutine = coroutine
        self.part = part

    def __await__(self):
        value, error = None, None
        while True:
            began = time.thread_time()
            try:
                yielded = self.coroutine.throw(error) if error is not None else self.coroutine.send(value)
            except StopIteration as stop:
                MEASURES.add_cpu(self.part, time.thread_time() - began, call_done=True)
                return stop.value
            except BaseException:
                MEASURES.add_cpu(self.part, time.thread_time() - began)
                raise
            MEASURES.add_cpu(self.part, time.thread_time() - began)
            try:
                value, error = (yield yielded), None
            except BaseException as exc:  # noqa: BLE001 - handed on to the coroutine, as await would
                value, error = None, exc


def _hook_cpu() -> Any:
    """Thread CPU time of the tuner agents' steps, of the evaluations they ask for, and of ``record_result``."""
    from core.fleet import attempt, tuner, workbench

    work, evaluate, record = tuner.TunerAgent.work, workbench.Workbench.evaluate, attempt.record_result

    def timed_work(self, bench):
        return _StepTimed(work(self, bench), "agent")

    def timed_evaluate(self, *args, **kwargs):
        return _StepTimed(evaluate(self, *args, **kwargs), "evaluate")

    def timed_record(*args, **kwargs):
        began = time.thread_time()
        try:
            return record(*args, **kwargs)
        finally:
            MEASURES.add_cpu("record_result", time.thread_time() - began, call_done=True)

    tuner.TunerAgent.work, workbench.Workbench.evaluate, attempt.record_result = \
        timed_work, timed_evaluate, timed_record

    def undo() -> None:
        tuner.TunerAgent.work, workbench.Workbench.evaluate, attempt.record_result = work, evaluate, record
    return undo


def _hook_planner() -> Any:
    """Time the run's planner tick (core.fleet.planning) and its plan() call."""
    from core.fleet import planning

    undo = []
    tick = getattr(planning.Planning, "plan_once", None)
    if tick is not None:
        def timed_tick(self, *args, **kwargs):
            began, cpu = time.perf_counter(), time.thread_time()
            try:
                return tick(self, *args, **kwargs)
            finally:
                MEASURES.ticks_s.append(time.perf_counter() - began)
                MEASURES.add_cpu("tick", time.thread_time() - cpu, call_done=True)
        planning.Planning.plan_once = timed_tick
        undo.append(lambda: setattr(planning.Planning, "plan_once", tick))
    plan = getattr(planning, "plan", None)
    if plan is not None:
        def timed_plan(inp):
            began = time.perf_counter()
            result = plan(inp)
            MEASURES.plan_s.append(time.perf_counter() - began)
            return result
        planning.plan = timed_plan
        undo.append(lambda: setattr(planning, "plan", plan))
    return lambda: [u() for u in undo]


# ---------------------------------------------------------------- the run

async def _loop_lag(period: float = 0.005) -> None:
    """How late a 5 ms sleep wakes: how long a task that is ready waits for the event loop."""
    while True:
        began = time.monotonic()
        await anyio.sleep(period)
        woke = time.monotonic()
        MEASURES.loop_lag.append((woke, woke - began - period))


async def _sample(fleet, every: float = 0.25) -> None:
    # Until the window closes: the run closes its store soon after, maybe before this task is cancelled.
    while MEASURES.window is None or MEASURES.window[1] == math.inf:
        MEASURES.samples.append((time.monotonic(), fleet.store.conn.total_changes))
        await anyio.sleep(every)


def _wanted_now(usage: PoolUsage) -> float:
    """PoolUsage.wanted_s brought up to now, without changing it."""
    return usage.wanted_s + min(usage._demand, usage.devices) * (time.monotonic() - usage._since)


def _config(args):
    # [gpus] ids sizes the fleet's preparation (one problem at a time per listed GPU, core.fleet.preparation.prepare_all); the
    # simulated GPUs are the evaluator's, so the list only stands for them there (--prepare-slots 0: none listed).
    return parse_config({
        "fleet": {"device": "cpu", "tuner_agents": args.agents, "languages": ["pytorch"]},
        "gpus": {"ids": list(range(args.prepare_slots))},
        "planner": {"tick_s": args.tick_s, "max_agents_per_problem": 2, "plateau_attempts": 1000},
        "tuner": {"trials_per_problem": args.trials, "startup_trials": args.startup_trials},
        "evaluation": {"rounds": 1, "timing": "quick", "compile_baseline": False}})


async def bench(args) -> dict:
    from core.fleet.orchestrator import Fleet

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        began = time.perf_counter()
        write_problems(root / "problems", args.problems, tuple(range(1, args.chunks + 1)))
        sim = SimulatedEvaluator(args.gpus, args.eval_ms / 1e3, gpus_per_node=args.gpus_per_node,
                                 baseline_s=args.baseline_ms / 1e3)
        fleet = Fleet(root / "run", _config(args), [str(root / "problems")], evaluator_factory=lambda f: sim)
        fleet.open()
        setup_s = time.perf_counter() - began
        undo = [_hook_workbench(), _hook_cpu(), _hook_planner()]  # the CPU hook wraps the trace hook
        opened = time.monotonic()
        marks: dict[str, Any] = {}

        async def measure() -> None:
            while not getattr(fleet, "prepared_all", False):
                if time.monotonic() - opened > args.max_prepare_s:
                    break
                await anyio.sleep(0.05)
            start = time.monotonic()
            marks.update(prepare_s=start - opened, cpu0=time.process_time(), rows0=fleet.store.conn.total_changes,
                         busy0=sim.usage.busy_s, wanted0=_wanted_now(sim.usage), jobs0=sim.usage.jobs,
                         attempts0=fleet.attempts_done, ticks0=len(MEASURES.ticks_s))
            MEASURES.window = (start, math.inf)
            await anyio.sleep(args.seconds)
            end = time.monotonic()
            MEASURES.window = (start, end)
            marks.update(wall=end - start, cpu=time.process_time() - marks["cpu0"],
                         rows=fleet.store.conn.total_changes - marks["rows0"], busy=sim.usage.busy_s - marks["busy0"],
                         wanted=_wanted_now(sim.usage) - marks["wanted0"],
                         jobs=sim.usage.jobs - marks["jobs0"], attempts=fleet.attempts_done - marks["attempts0"])
            fleet.request_stop("bench time is up")

        profiler = _start_profiler(args.profile)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(measure)
                tg.start_soon(_loop_lag)
                tg.start_soon(_sample, fleet)
                state = await fleet.run()
                tg.cancel_scope.cancel()
        finally:
            _stop_profiler(profiler, args)
            for u in reversed(undo):
                u()
    if "wall" not in marks:
        raise SystemExit(f"the run ended ({state}: {fleet.stop_reason}) before the measured window did")
    return summarize(args, marks, setup_s, sim)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _rate_windows(samples: list[tuple[float, int]], seconds: float) -> list[float]:
    """Rows per second over consecutive windows of about ``seconds``."""
    rates, first = [], 0
    for i, (t, rows) in enumerate(samples):
        if t - samples[first][0] >= seconds:
            rates.append((rows - samples[first][1]) / (t - samples[first][0]))
            first = i
    return rates


def summarize(args, marks: dict, setup_s: float, sim: SimulatedEvaluator) -> dict:
    m = MEASURES
    traces = [t for t in m.agent_traces if m.in_window(t.requested) and m.in_window(t.recorded)]
    ms = lambda values: [v * 1e3 for v in values]  # noqa: E731
    dispatch = ms(t.started - t.requested - t.all_busy_s for t in traces)
    before = ms(t.entered - t.requested for t in traces)  # Workbench.evaluate to SimulatedEvaluator.evaluate
    inside = ms(t.started - t.entered - t.all_busy_s for t in traces)  # choosing a GPU
    noticed = ms(t.woke - t.ended for t in traces)  # the GPU done to the request's task running again
    recorded = ms(t.recorded - t.woke for t in traces)  # from there to the attempt recorded
    # Between one agent's consecutive evaluations in one turn: from its GPU being done to its next job starting.
    by_turn: dict[int, list[Trace]] = {}
    for t in sorted(traces, key=lambda t: t.requested):
        by_turn.setdefault(t.turn, []).append(t)
    gaps = ms(b.started - a.ended for turn in by_turn.values() for a, b in zip(turn, turn[1:]))
    lag = [(t, late) for t, late in m.loop_lag if m.in_window(t)]
    stalled = sum(late for _, late in lag if late > 0.020)  # the loop was late by more than 20 ms
    samples = [s for s in m.samples if m.in_window(s[0])]
    ticks = m.ticks_s[marks["ticks0"]:]
    wall = marks["wall"]
    return {
        "problems": args.problems, "agents": args.agents, "gpus": args.gpus, "eval_ms": args.eval_ms,
        "setup_s": setup_s, "prepare_s": marks["prepare_s"], "window_s": wall,
        "process_cpu_share": marks["cpu"] / wall,  # 1.0: the event loop's thread had a core to itself throughout
        "cpu_ms_per_attempt": marks["cpu"] * 1e3 / max(marks["attempts"], 1),
        "agent_evaluations": len(traces), "evaluations_waiting_for_a_gpu": sum(1 for t in traces if t.all_busy_s),
        "dispatch_ms_p50": _pct(dispatch, 0.50), "dispatch_ms_p95": _pct(dispatch, 0.95),
        "dispatch_ms_p99": _pct(dispatch, 0.99), "dispatch_ms_max": max(dispatch, default=None),
        "dispatch_before_evaluator_ms_p95": _pct(before, 0.95), "dispatch_in_evaluator_ms_p95": _pct(inside, 0.95),
        "done_to_noticed_ms_p50": _pct(noticed, 0.50), "done_to_noticed_ms_p95": _pct(noticed, 0.95),
        "noticed_to_recorded_ms_p50": _pct(recorded, 0.50), "noticed_to_recorded_ms_p95": _pct(recorded, 0.95),
        "turnaround_ms_p50": _pct(gaps, 0.50), "turnaround_ms_p95": _pct(gaps, 0.95),
        "loop_lag_ms_p50": _pct(ms(late for _, late in lag), 0.50), "loop_lag_ms_max": max(ms(l for _, l in lag),
                                                                                          default=None),
        "loop_stalled_fraction": stalled / wall,
        "store_rows_per_s": marks["rows"] / wall,
        "store_rows_per_s_worst_5s": min(_rate_windows(samples, 5.0), default=None),
        "rows_per_attempt": marks["rows"] / max(marks["attempts"], 1),
        "attempts_per_s": marks["attempts"] / wall,
        "gpu_busy_of_wanted": marks["busy"] / marks["wanted"] if marks["wanted"] > 0 else None,
        "gpus_in_use_mean": marks["busy"] / wall, "gpu_busy_of_all": marks["busy"] / (sim.gpus * wall),
        "planner_ticks": len(ticks), "tick_ms_p50": _pct(ms(ticks), 0.5), "tick_ms_p95": _pct(ms(ticks), 0.95),
        "plan_ms_p50": _pct(ms(m.plan_s), 0.5),
        **_cpu_parts(marks),
    }


def _cpu_parts(marks: dict) -> dict:
    """Where the window's CPU went, per agent trial (an evaluation an agent asked for) or per attempt."""
    cpu, calls = MEASURES.cpu_s, MEASURES.calls
    trials = max(calls.get("evaluate", 0), 1)
    attempts = max(marks["attempts"], 1)
    agent, evaluate = cpu.get("agent", 0.0), cpu.get("evaluate", 0.0)
    return {
        "agent_trials": calls.get("evaluate", 0),
        "tuner_cpu_ms_per_trial": (agent - evaluate) * 1e3 / trials,
        "evaluate_cpu_ms_per_trial": evaluate * 1e3 / trials,
        "record_result_cpu_ms_per_call": cpu.get("record_result", 0.0) * 1e3 / max(calls.get("record_result", 0), 1),
        "tick_cpu_ms_per_attempt": cpu.get("tick", 0.0) * 1e3 / attempts,
        "other_cpu_ms_per_attempt": (marks["cpu"] - agent - cpu.get("tick", 0.0)) * 1e3 / attempts,
    }


def _start_profiler(kind: str | None):
    if kind == "cprofile":
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
        return profiler
    if kind == "pyinstrument":
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.001, async_mode="disabled")
        profiler.start()
        return profiler
    return None


def _stop_profiler(profiler, args) -> None:
    if profiler is None:
        return
    out = Path(args.profile_out)
    if args.profile == "cprofile":
        import pstats

        profiler.disable()
        profiler.dump_stats(str(out.with_suffix(".prof")))
        with open(out.with_suffix(".txt"), "w") as text:
            stats = pstats.Stats(profiler, stream=text)
            stats.sort_stats("tottime").print_stats(60)
            stats.sort_stats("cumulative").print_stats(80)
    else:
        profiler.stop()
        out.with_suffix(".txt").write_text(profiler.output_text(unicode=False, show_all=False))
    print(f"profile written to {out.with_suffix('.txt')}", file=sys.stderr)


TABLE = (
    ("dispatch latency p50 / p95 / p99 (ms)", ("dispatch_ms_p50", "dispatch_ms_p95", "dispatch_ms_p99"), "p95 ≤ 20"),
    ("  of which before / inside the evaluator, p95 (ms)",
     ("dispatch_before_evaluator_ms_p95", "dispatch_in_evaluator_ms_p95"), ""),
    ("GPU done → noticed by the loop p50 / p95 (ms)", ("done_to_noticed_ms_p50", "done_to_noticed_ms_p95"), ""),
    ("noticed → attempt recorded p50 / p95 (ms)", ("noticed_to_recorded_ms_p50", "noticed_to_recorded_ms_p95"), ""),
    ("an agent's gap between trials p50 / p95 (ms)", ("turnaround_ms_p50", "turnaround_ms_p95"), ""),
    ("event loop: lag p50 / max (ms), time stalled > 20 ms",
     ("loop_lag_ms_p50", "loop_lag_ms_max", "loop_stalled_fraction"), ""),
    ("store rows/s, mean / worst 5 s", ("store_rows_per_s", "store_rows_per_s_worst_5s"), "≥ 2,000"),
    ("rows per attempt; attempts/s", ("rows_per_attempt", "attempts_per_s"), ""),
    ("store writer alone: rows/s; attempts/s", ("writer_alone_rows_per_s", "writer_alone_attempts_per_s"), ""),
    ("GPU busy of wanted (PoolUsage)", ("gpu_busy_of_wanted",), "≥ 95%"),
    ("GPUs in use, mean / share of all", ("gpus_in_use_mean", "gpu_busy_of_all"), ""),
    ("planner tick p50 / p95 (ms); plan() p50", ("tick_ms_p50", "tick_ms_p95", "plan_ms_p50"), ""),
    ("CPU the process had (cores); CPU per attempt (ms)", ("process_cpu_share", "cpu_ms_per_attempt"), ""),
    ("  CPU per agent trial: the tuner / its evaluation (ms)", ("tuner_cpu_ms_per_trial", "evaluate_cpu_ms_per_trial"),
     ""),
    ("  CPU of record_result per call (ms)", ("record_result_cpu_ms_per_call",), ""),
    ("  CPU per attempt: planner ticks / the rest (ms)", ("tick_cpu_ms_per_attempt", "other_cpu_ms_per_attempt"), ""),
)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) and abs(value) < 100 else \
        f"{value:,.0f}" if isinstance(value, float) else str(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=256)
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0, help="the measured window, after preparation")
    parser.add_argument("--eval-ms", type=float, default=1000.0, help="simulated GPU time per evaluation")
    parser.add_argument("--baseline-ms", type=float, default=0.0, help="simulated GPU time per problem's baseline")
    parser.add_argument("--trials", type=int, default=16, help="tuner trials per problem")
    parser.add_argument("--startup-trials", type=int, default=4)
    parser.add_argument("--chunks", type=int, default=16, help="values of the CHUNK tunable (1..N)")
    parser.add_argument("--tick-s", type=float, default=1.0)
    parser.add_argument("--prepare-slots", type=int, default=None,
                        help="problems prepared at once (default: --gpus; 0: the fleet's default for no GPU list)")
    parser.add_argument("--max-prepare-s", type=float, default=600.0)
    parser.add_argument("--writer-seconds", type=float, default=5.0,
                        help="then time the store's writer alone this long (0: not)")
    parser.add_argument("--profile", choices=("cprofile", "pyinstrument"))
    parser.add_argument("--profile-out", default="/tmp/orchestrator_bench")
    args = parser.parse_args()
    if args.prepare_slots is None:
        args.prepare_slots = args.gpus
    result = anyio.run(bench, args)
    if args.writer_seconds > 0:
        result.update(writer_capacity(args, args.writer_seconds))
    print(json.dumps(result, indent=2))
    print(f"\n{args.problems} problems × {args.agents} tuner agents, {args.gpus} simulated GPUs, "
          f"{args.eval_ms:g} ms per evaluation; {result['window_s']:.0f} s measured after "
          f"{result['prepare_s']:.0f} s of preparation; {result['agent_evaluations']} agent evaluations "
          f"({result['evaluations_waiting_for_a_gpu']} found every GPU busy)\n")
    print("| measure | figure | goal |\n| --- | --- | --- |")
    for label, keys, goal in TABLE:
        print(f"| {label} | {' / '.join(_fmt(result.get(k)) for k in keys)} | {goal} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
