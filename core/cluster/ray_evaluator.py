"""A Ray cluster's GPUs behind the ``Evaluator`` interface: one ``GpuWorker`` actor per GPU of every alive node, one
queue on the head.

Dispatch: each job (an evaluation or a T_b measurement) waits in one queue on the head, highest priority first then
in arrival order, and goes to the actor that comes free first; an actor takes ``jobs_per_gpu`` jobs at a time (by
default two: one building while the other holds the GPU, as the local pool builds beside a running candidate; its
own pool orders the two by priority). Jobs travel as content: the problem packed once (``core.cluster.content``)
and put in Ray's object store, which each node fetches once; the solution as its dict.

Loss: an actor whose node dies (or that dies itself) fails its in-flight jobs with a Ray actor error; each goes back
to the queue in its old place and runs on another actor, so the caller's ``evaluate`` returns once, later. The lost
actor is killed for good, so a job it was running can never answer twice. A job whose actor is lost more than
``max_requeues`` times is a RUNTIME_ERROR verdict (a candidate that takes its node down is not retried for ever).

Join: a thread polls ``ray.nodes()`` every ``poll_s`` seconds and starts actors on GPUs that have none (a node that
joined, a lost actor's GPU on a node still alive), and notes nodes gone.

T_sol is counted on the head, per GPU model, and each job is held to the bound of its actor's model. T_b is
measured on an actor of the cluster's most common model (``describe`` says which), or of the model asked for
(``core.fleet.baselines`` asks when an attempt first runs on another model).
"""

from __future__ import annotations

import itertools
import logging
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel

from core.build.process import ProcessOutcome
from core.cluster.connect import connect
from core.cluster.content import pack_problem
from core.cluster.errors import ClusterError, ContentError
from core.cluster.folder import pack_folder, unpack_folder
from core.cluster.gpu_actor import GpuWorker
from core.cluster.usage import ClusterUsage
from core.cluster.wire import BaselineReply, ConfinedReply, EvaluateReply, timing_to_dict
from core.evaluate.evaluator import Evaluation, EvaluationRequest, Placement
from core.evaluate.timing_policy import TimingPolicy
from core.evaluate.verdict import Status, Verdict, WorkloadVerdict
from core.problem.schema import Problem
from core.roofline.problem_sol import SolModel
from core.secrets import take_secrets
from core.solution.io import solution_to_dict

log = logging.getLogger("kernelfleet.cluster")
START_RETRY_S = 60.0


Reply = TypeVar("Reply", EvaluateReply, BaselineReply, ConfinedReply)


@dataclass(eq=False)
class GpuActor:
    """One GPU actor as the head knows it."""

    key: str  # node id and slot
    handle: Any
    node_id: str
    slot: int
    node: str = ""
    gpu: int | None = None
    device_model: str = ""
    describe: tuple[str, ...] = ()
    running: int = 0  # jobs handed to it and not answered yet
    alive: bool = True
    last_sent: float = 0.0

    @property
    def placement(self) -> Placement:
        return Placement(self.node, self.gpu, self.device_model)


@dataclass(eq=False)
class _Waiter:
    order: tuple[int, int]  # (-priority, arrival)
    model: str | None  # the GPU model it must run on, or None
    granted: anyio.Event = field(default_factory=anyio.Event)
    actor: GpuActor | None = None


class _TooManyLosses(Exception):
    pass


class RayEvaluator:
    """``address``: "local", "auto" or the head's HOST:PORT (``core.cluster.connect``); a process already connected
    to Ray (``ray.init``) is used as it is. ``spare``, ``workload_timeout_s`` and ``readable`` go to each GPU's pool
    (readable paths a node does not have are left out there). ``init_options`` go to ``ray.init`` (e.g. ``num_gpus``
    for a local cluster)."""

    def __init__(self, address: str, device: str = "cuda", *, workload_timeout_s: float = 120.0, spare: bool = True,
                 readable: Sequence[str | Path] = (), jobs_per_gpu: int = 2, poll_s: float = 3.0,
                 max_requeues: int = 3, start_timeout_s: float = 600.0, orphan_timeout_s: float = 600.0,
                 init_options: dict[str, Any] | None = None):
        self.address = address
        self.device = device
        self.worker_options = {"workload_timeout_s": workload_timeout_s, "spare": spare,
                               "readable": [str(r) for r in readable]}
        self.jobs_per_gpu = max(1, jobs_per_gpu)
        self.poll_s = poll_s
        self.max_requeues = max_requeues
        self.start_timeout_s = start_timeout_s
        self.orphan_timeout_s = orphan_timeout_s
        self.init_options = dict(init_options or {})
        self.usage = ClusterUsage()
        self.primary_model = ""
        self._actors: dict[str, GpuActor] = {}
        self._registry = threading.Lock()  # _actors and _pending, shared with the node watcher
        self._pending: dict[str, tuple[Any, Any, str, int]] = {}  # key -> (handle, start ref, node id, slot)
        self._retry_after: dict[tuple[str, int], float] = {}  # a GPU whose actor failed to start: when to try again
        self._waiting: list[_Waiter] = []
        self._arrival = itertools.count()
        self._made = itertools.count()
        self._orphaned_since: float | None = None
        self._contents: dict[tuple[str, tuple[str, ...]], dict[str, Any]] = {}
        self._locks: dict[Any, anyio.Lock] = {}
        self._sol_indices: dict[Path, list[int]] = {}
        self._sol: dict[Path, dict[str, dict[int, float] | None]] = {}  # problem -> GPU model -> T_sol enforced
        self.baseline_models: dict[Path, str] = {}  # problem -> the GPU model its T_b was measured on
        self.history: list[str] = []  # actors lost and started, for a person
        self._told = 0  # of history, lines news() has given
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._owns_connection = False
        self._token = None
        self._ray = None
        self._remote_class = None

    # ---------------------------------------------------------------- start and end

    async def __aenter__(self) -> RayEvaluator:
        if self.address == "local":
            take_secrets()  # the local cluster's processes inherit this environment
            # Started on the event loop's thread, which lives as long as the run.
            self._owns_connection = connect(self.address, **self.init_options)
        else:
            self._owns_connection = await anyio.to_thread.run_sync(
                lambda: connect(self.address, **self.init_options))
        import ray

        self._ray = ray
        self._token = anyio.lowlevel.current_token()
        self._remote_class = ray.remote(GpuWorker)
        try:
            await anyio.to_thread.run_sync(self._start_first)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._shutdown)
            raise
        self._watcher = threading.Thread(target=self._watch, name="kernelfleet-ray-nodes", daemon=True)
        self._watcher.start()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        with anyio.CancelScope(shield=True):
            self._stop.set()
            if self._watcher is not None:
                await anyio.to_thread.run_sync(self._watcher.join)
            await anyio.to_thread.run_sync(self._shutdown)

    def _start_first(self) -> None:
        ray = self._ray
        nodes = _gpu_nodes(ray.nodes())
        if not nodes:
            raise ClusterError(f"the Ray cluster at {self.address} has no GPU on any alive node (start its nodes "
                               "with `ray start ... --num-gpus=N`)")
        for node_id, count in nodes.items():
            for slot in range(count):
                self._create(node_id, count, slot)
        with self._registry:
            pending = dict(self._pending)
        refs = [ref for _, ref, _, _ in pending.values()]
        began = time.monotonic()
        ray.wait(refs, num_returns=1, timeout=self.start_timeout_s)
        # The others start alike; one that takes far longer (its GPU held by another Ray job) joins later.
        grace = 60.0 + 2 * (time.monotonic() - began)
        ray.wait(refs, num_returns=len(refs), timeout=grace)
        errors = self._collect_started(initial=True)
        with self._registry:
            live = [a for a in self._actors.values() if a.alive]
        if not live:
            raise ClusterError(f"no GPU actor could start on the Ray cluster at {self.address}"
                               + (f": {errors[0]}" if errors else f" within {self.start_timeout_s:g} s"))
        models = Counter(a.device_model for a in live)
        self.primary_model = sorted(models.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        self.usage.nodes = len({a.node_id for a in live})

    def _create(self, node_id: str, count: int, slot: int) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        key = f"{node_id}:{slot}:{next(self._made)}"  # a replacement's figures add to the lost one's
        handle = self._remote_class.options(
            num_gpus=1, num_cpus=0, max_restarts=0, max_task_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(self.device, node_gpus=count, core_slot=slot, **self.worker_options)
        with self._registry:
            self._pending[key] = (handle, handle.start.remote(), node_id, slot)

    def _collect_started(self, initial: bool = False) -> list[str]:
        """Move actors whose start answered from pending to live (on the event loop once it runs); their errors."""
        ray = self._ray
        with self._registry:
            pending = dict(self._pending)
        ready, _ = ray.wait([ref for _, ref, _, _ in pending.values()], num_returns=len(pending), timeout=0) \
            if pending else ([], [])
        ready_ids = set(ready)
        errors = []
        for key, (handle, ref, node_id, slot) in pending.items():
            if ref not in ready_ids:
                continue
            with self._registry:
                self._pending.pop(key, None)
            try:
                info = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - one GPU that cannot start leaves the others
                errors.append(_first_line(exc))
                self._note(f"a GPU actor on node {node_id[:8]} could not start (tried again in "
                           f"{START_RETRY_S:g} s): {_first_line(exc)}")
                self._retry_after[(node_id, slot)] = time.monotonic() + START_RETRY_S
                try:
                    ray.kill(handle, no_restart=True)
                except Exception:  # noqa: BLE001 - gone already
                    pass
                continue
            actor = GpuActor(key, handle, node_id, slot, info["node"], info["gpu"], info["device_model"],
                             tuple(info["describe"]))
            if initial:
                self._add(actor, info["usage"], initial=True)
            else:
                self._on_loop(self._add, actor, info["usage"])
        return errors

    def _add(self, actor: GpuActor, account: dict[str, Any], initial: bool = False) -> None:
        with self._registry:
            self._actors[actor.key] = actor
        self.usage.update(actor.key, account)
        self.usage.nodes = len({a.node_id for a in self._live()})
        self._orphaned_since = None
        if not initial:
            self.usage.joined += 1
            self._note(f"GPU actor started: {actor.placement.describe()}")
        self._hand_out()

    def _shutdown(self) -> None:
        ray = self._ray
        if ray is None:
            return
        with self._registry:
            live = [a for a in self._actors.values() if a.alive]
            handles = [a.handle for a in self._actors.values()] + [p[0] for p in self._pending.values()]
            self._pending.clear()
        if ray.is_initialized():
            closing = [a.handle.close.remote() for a in live]
            if closing:
                ray.wait(closing, num_returns=len(closing), timeout=30)
            for handle in handles:
                try:
                    ray.kill(handle, no_restart=True)
                except Exception:  # noqa: BLE001 - an actor already gone
                    pass
        if self._owns_connection:
            ray.shutdown()
            self._owns_connection = False

    # ---------------------------------------------------------------- the node watcher (a thread)

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self._watch_once()
            except Exception as exc:  # noqa: BLE001 - a failed poll is tried again at the next
                log.info("polling the Ray cluster's nodes failed: %s", _first_line(exc))

    def _watch_once(self) -> None:
        ray = self._ray
        nodes = ray.nodes()
        alive = _gpu_nodes(nodes)
        with self._registry:
            live = [a for a in self._actors.values() if a.alive]
            taken = {(a.node_id, a.slot) for a in live} | {(p[2], p[3]) for p in self._pending.values()}
        for actor in live:
            if actor.node_id not in alive:
                self._on_loop(self._lose, actor, "its node left the cluster")
        self._collect_started()
        now = time.monotonic()
        for node_id, count in alive.items():
            for slot in range(count):
                if (node_id, slot) not in taken and self._retry_after.get((node_id, slot), 0.0) <= now \
                        and not self._stop.is_set():
                    self._create(node_id, count, slot)
        for actor in live:
            if actor.node_id in alive:
                try:
                    account = ray.get(actor.handle.usage.remote(), timeout=10)
                except Exception:  # noqa: BLE001 - a lost actor is noted by its jobs or the next poll
                    continue
                self._on_loop(self.usage.update, actor.key, account)

    def _on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            anyio.from_thread.run_sync(fn, *args, token=self._token)
        except RuntimeError:  # the event loop has ended
            pass

    # ---------------------------------------------------------------- the queue

    def _live(self) -> list[GpuActor]:
        return [a for a in self._actors.values() if a.alive]

    def _pick(self, model: str | None) -> GpuActor | None:
        live = self._live()
        if model is not None and not any(a.device_model == model for a in live):
            model = None  # none of that model is left: any GPU will do
        free = [a for a in live if a.running < self.jobs_per_gpu and (model is None or a.device_model == model)]
        return min(free, key=lambda a: (a.running, a.last_sent)) if free else None

    def _hand_out(self) -> None:
        for waiter in sorted(self._waiting, key=lambda w: w.order):
            actor = self._pick(waiter.model)
            if actor is None:
                continue
            actor.running += 1
            actor.last_sent = time.monotonic()
            self._waiting.remove(waiter)
            waiter.actor = actor
            waiter.granted.set()

    async def _acquire(self, order: tuple[int, int], model: str | None) -> GpuActor:
        waiter = _Waiter(order, model)
        self._waiting.append(waiter)
        self._hand_out()
        try:
            while not waiter.granted.is_set():
                with anyio.move_on_after(self.poll_s):
                    await waiter.granted.wait()
                if not waiter.granted.is_set() and self._orphaned_since is not None \
                        and time.monotonic() - self._orphaned_since > self.orphan_timeout_s:
                    raise ClusterError(f"every GPU actor of the Ray cluster at {self.address} was lost, and no GPU "
                                       f"came back within {self.orphan_timeout_s:g} s")
        except BaseException:
            if waiter.actor is None:
                self._waiting.remove(waiter)
            else:
                self._release(waiter.actor)
            raise
        assert waiter.actor is not None
        return waiter.actor

    def _release(self, actor: GpuActor) -> None:
        actor.running -= 1
        self._hand_out()

    def _lose(self, actor: GpuActor, why: str) -> None:
        if not actor.alive:
            return
        actor.alive = False
        self.usage.lost += 1
        self.usage.forget(actor.key)
        self.usage.nodes = len({a.node_id for a in self._live()})
        try:
            self._ray.kill(actor.handle, no_restart=True)  # if it was only unreachable, it never answers later
        except Exception:  # noqa: BLE001 - gone already
            pass
        self._note(f"GPU actor lost: {actor.placement.describe()}: {why}")
        if not self._live():
            self._orphaned_since = time.monotonic()

    def _note(self, line: str) -> None:
        self.history.append(f"{time.strftime('%H:%M:%S')} {line}")
        log.info("%s", line)  # a warning would reach the terminal under the UI

    async def _run(self, priority: int, model: str | None, send: Callable[[GpuActor], Awaitable[Any]],
                   reply_type: type[Reply]) -> tuple[Reply, dict[str, float]]:
        """Run one job through the queue, again elsewhere each time its actor is lost; the reply (read as
        ``reply_type``) and its times."""
        from ray.exceptions import (
            NodeDiedError,
            OutOfMemoryError,
            RayActorError,
            RayTaskError,
            WorkerCrashedError,
        )

        lost_errors = (RayActorError, WorkerCrashedError, NodeDiedError, OutOfMemoryError)
        order = (-priority, next(self._arrival))
        called, waited, losses = time.monotonic(), 0.0, 0
        while True:
            asked = time.monotonic()
            actor = await self._acquire(order, model)
            waited += time.monotonic() - asked
            try:
                sent_wall, sent = time.time(), time.monotonic()
                ref = await send(actor)
                try:
                    reply = reply_type.from_wire(await ref)
                except anyio.get_cancelled_exc_class():
                    try:
                        self._ray.cancel(ref)  # the actor's coroutine is cancelled and its pool lets the GPU go
                    except Exception:  # noqa: BLE001 - it finished meanwhile
                        pass
                    raise
            except lost_errors as exc:
                self._lose(actor, _first_line(exc))
                losses += 1
                if losses > self.max_requeues:
                    raise _TooManyLosses(f"its GPU actor was lost {losses} times while it ran ({_first_line(exc)})") \
                        from None
                self.usage.requeued += 1
                continue
            except RayTaskError as exc:
                cause = getattr(exc, "cause", None)
                if isinstance(cause, ContentError):
                    raise ContentError(str(cause)) from None
                raise ClusterError(f"{actor.node}: {_first_line(cause or exc)}") from None
            finally:
                self._release(actor)
            back = time.monotonic()
            self.usage.head_wait_s += waited
            self.usage.update(actor.key, reply.usage)
            times = {"dispatch_s": sent - called - waited + max(0.0, reply.started_wall - sent_wall),
                     "round_trip_s": max(0.0, back - sent - reply.elapsed_s)}
            if losses == 0:
                self.usage.dispatch_s.append(times["dispatch_s"])
                self.usage.round_trip_s.append(times["round_trip_s"])
            return reply, times

    def _lock(self, key: Any) -> anyio.Lock:
        return self._locks.setdefault(key, anyio.Lock())

    async def _content(self, problem: Problem, blob_roots: tuple[str, ...]) -> dict[str, Any]:
        """The problem as content in the object store, packed once per run: ``{"key", "content": [ref]}`` (the ref
        in a list, so Ray hands it to the actor as a reference and the actor fetches it only when its cache misses)."""
        key = (str(Path(problem.path).resolve()), tuple(blob_roots))
        if key not in self._contents:
            async with self._lock(key):
                if key not in self._contents:
                    content = await anyio.to_thread.run_sync(pack_problem, problem, blob_roots)
                    ref = await anyio.to_thread.run_sync(self._ray.put, content.to_wire())
                    self._contents[key] = {"key": content.key, "content": [ref]}
        return self._contents[key]

    # ---------------------------------------------------------------- the Evaluator interface

    async def evaluate(self, request: EvaluationRequest) -> Evaluation:
        called = time.monotonic()
        problem = await self._content(request.problem, request.blob_roots)
        solution = solution_to_dict(request.solution)
        timing = timing_to_dict(request.timing)
        workloads = None if request.workloads is None else list(request.workloads)

        async def send(actor: GpuActor):
            sol_ms = await self.sol_bound(request.problem, actor.device_model)
            return actor.handle.evaluate.remote(problem, solution, workloads, request.rounds, timing,
                                                request.priority, sol_ms)

        try:
            reply, _ = await self._run(request.priority, None, send, EvaluateReply)
        except _TooManyLosses as exc:
            first = (request.workloads or (0,))[0]
            reason = f"not evaluated: {exc}"
            return Evaluation(Verdict(Status.RUNTIME_ERROR, reason, (WorkloadVerdict(first, Status.RUNTIME_ERROR,
                                                                                     reason),)), None)
        self.usage.evaluations += 1
        self.usage.evaluate_s += time.monotonic() - called
        return Evaluation(reply.verdict, reply.build, reply.placement)

    async def run_confined(self, command: list[str], scratch: Path, env: dict[str, str], timeout_s: float,
                           priority: int = 0, *, problem: Problem | None = None,
                           blob_roots: tuple[str, ...] = ()) -> ProcessOutcome:
        """On a node's GPU: ``scratch``'s parent folder travels as content (the problem as for an evaluation), the
        command runs there with those paths as the node has them, and what it left in its scratch comes back."""
        scratch = Path(scratch)
        folder = scratch.parent
        files = await anyio.to_thread.run_sync(pack_folder, folder)
        content = await self._content(problem, blob_roots) if problem is not None else None
        head = {"folder": str(folder), "scratch": scratch.name, "python": sys.executable,
                "problem": str(Path(problem.path).resolve()) if problem is not None else ""}
        requests = [Path(a).relative_to(folder).as_posix() for a in command
                    if a.endswith(".json") and Path(a).parent == folder]

        async def send(actor: GpuActor):
            return actor.handle.run_confined.remote(content, head, files, requests, list(command), dict(env),
                                                    timeout_s, priority)

        try:
            reply, _ = await self._run(priority, None, send, ConfinedReply)
        except _TooManyLosses as exc:
            return ProcessOutcome(1, f"not run: {exc}")
        await anyio.to_thread.run_sync(unpack_folder, reply.scratch, scratch, "a node's scratch")
        output = reply.output
        if reply.left_out:
            output += f"\n(left on the node, over the size that comes back: {', '.join(reply.left_out[:5])})"
        return ProcessOutcome(reply.returncode, output)

    async def evaluate_prepared(self, request: EvaluationRequest, prepared: Any) -> Evaluation:
        """Builds run where the job runs: a candidate built on the head is sent as its sources all the same."""
        return await self.evaluate(request)

    def news(self) -> list[str]:
        """Actors lost and started since the last call, for the run's log."""
        lines, self._told = self.history[self._told:], len(self.history)
        return lines

    async def baseline(self, problem: Problem, workload_indices: Sequence[int] | None = None, *,
                       timing: TimingPolicy | None = None, compile_timeout_s: float = 120.0,
                       blob_roots: tuple[str, ...] = (), priority: int = 0,
                       device_model: str | None = None) -> list:
        """T_b on an actor of ``device_model`` (default: the cluster's most common model)."""
        content = await self._content(problem, blob_roots)
        indices = None if workload_indices is None else list(workload_indices)

        async def send(actor: GpuActor):
            return actor.handle.baseline.remote(content, indices, timing_to_dict(timing), compile_timeout_s,
                                                priority)

        try:
            reply, _ = await self._run(priority, device_model or self.primary_model, send, BaselineReply)
        except _TooManyLosses as exc:
            raise ClusterError(f"T_b of {problem.name} could not be measured: {exc}") from None
        measured_on = reply.placement.device_model
        if device_model is not None and measured_on != device_model:
            raise ClusterError(f"T_b of {problem.name} on {device_model}: no GPU of that model is left "
                               f"(measured on {measured_on})")
        self.baseline_models[Path(problem.path)] = measured_on
        return list(reply.baselines)

    def baseline_model(self) -> str:
        return self.primary_model

    async def speed_of_light(self, problem: Problem, workload_indices: Sequence[int], *,
                             device_model: str | None = None) -> SolModel:
        """T_sol for the cluster's most common GPU model (what the run records), or for ``device_model``; the bound
        of every other model present is counted too, and each job is held to its own GPU's."""
        from core.evaluate.local import sol_for

        indices = list(workload_indices)
        if device_model is not None and device_model != self.primary_model:
            sol = await sol_for(problem, indices, self.device, device_model)
            self._sol_indices.setdefault(problem.path, indices)
            self._sol.setdefault(problem.path, {}).setdefault(device_model,
                                                              dict(sol.t_sol_ms) if sol.enforce else None)
            return sol
        self._sol_indices[problem.path] = indices
        sol = await sol_for(problem, indices, self.device, self.primary_model)
        self._sol.setdefault(problem.path, {})[self.primary_model] = dict(sol.t_sol_ms) if sol.enforce else None
        for model in sorted({a.device_model for a in self._live()} - {self.primary_model}):
            await self.sol_bound(problem, model)
        return sol

    def remember_sol(self, problem: Problem, t_sol_ms: dict[int, float]) -> None:
        """T_sol from the store: the most common model's; other models' are counted when a job first needs them."""
        if self.device == "cuda" and t_sol_ms:
            self._sol_indices[problem.path] = sorted(t_sol_ms)
            self._sol.setdefault(problem.path, {})[self.primary_model] = dict(t_sol_ms)

    async def sol_bound(self, problem: Problem, model: str) -> dict[int, float] | None:
        """The T_sol per workload a job of ``problem`` on a GPU of ``model`` is held to; None where none is enforced
        (the cpu, a problem never given a T_sol, a model without a datasheet bound)."""
        if self.device != "cuda" or problem.path not in self._sol_indices:
            return None
        known = self._sol.setdefault(problem.path, {})
        if model not in known:
            from core.evaluate.local import sol_for

            async with self._lock((problem.path, model)):
                if model not in known:
                    sol = await sol_for(problem, self._sol_indices[problem.path], self.device, model)
                    known[model] = dict(sol.t_sol_ms) if sol.enforce else None
        return known[model]

    def placements(self) -> list[Placement]:
        return [a.placement for a in sorted(self._live(), key=lambda a: (a.node, a.slot))]

    def baselines_at_once(self) -> int:
        """One per GPU: a T_b job holds its actor as a candidate job does."""
        return max(1, len(self._live()))

    def workers(self) -> list[GpuActor]:
        """The GPU actors alive now (their Ray handles included), for tests and tools."""
        return sorted(self._live(), key=lambda a: (a.node, a.slot))

    def describe(self) -> list[str]:
        live = self.workers()
        models = Counter(a.device_model for a in live)
        listed = ", ".join(f"{n} x {m}" for m, n in sorted(models.items(), key=lambda kv: (-kv[1], kv[0])))
        lines = [f"Ray cluster {self.address}: {len({a.node_id for a in live})} nodes, {len(live)} GPU actors "
                 f"({listed}); each job goes to the first actor free, problems and candidates travel as content"]
        if self.device == "cuda":
            lines.append(f"T_sol counted on the head for each GPU model, each job held to its own GPU's; T_b "
                         f"measured on {self.primary_model}"
                         + ("; on another model when an attempt first runs on it" if len(models) > 1 else ""))
        where: dict[str, list[str]] = {}
        for actor in live:
            for line in actor.describe:
                where.setdefault(line, []).append(actor.placement.describe())
        for line, places in where.items():
            lines.append(f"{line} ({'every GPU' if len(places) == len(live) else ', '.join(places)})")
        return lines


def _gpu_nodes(nodes: list[dict[str, Any]]) -> dict[str, int]:
    """Alive node id -> its GPU count, for the nodes with at least one."""
    out = {}
    for node in nodes:
        count = int(node.get("Resources", {}).get("GPU", 0))
        if node.get("Alive") and count > 0:
            out[node["NodeID"]] = count
    return out


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def from_options(options) -> RayEvaluator:
    """The ``ray`` host backend (``core.evaluate.hosts``): the GPUs of the cluster at ``options.address``."""
    return RayEvaluator(options.address, options.device, spare=options.spare,
                        workload_timeout_s=options.workload_timeout_s, readable=list(options.readable))
