"""The evaluation pool: per device, a judge process and a candidate process started ahead of need, plus a warm
spare, so a faulty candidate costs one attempt and the next job starts in a fresh process at once.

``await pool.submit(job, priority)`` returns a Verdict. Jobs for one device run one at a time, highest priority
first; a candidate process that crashes, hangs past its timeout or breaks its CUDA context is killed with its
whole process group and replaced by the spare.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio

from core.build.process import ProcessOutcome, run_in_process_group
from core.evaluate import sandbox
from core.evaluate.cores import confine_process, plan_cores
from core.evaluate.device_gates import DeviceGates
from core.evaluate.kernel_time import KernelTimeSampler
from core.evaluate.memory_budget import (ALONE, BASELINE_FLOOR, DEFAULT_BUDGET, MemoryAsk, MemoryLedger, OnDemand,
                                         OomRetry, baseline_bytes, capacity_bytes, hold_device, job_memory,
                                         wait_alone)
from core.evaluate.memory_cap import device_total_bytes, is_out_of_memory, worker_environment
from core.evaluate.messages import (Baseline, BaselineAbandoned, BaselineForget, BaselineInputs, BaselineLookup,
                                    BaselineMiss, BaselinePrepare, BaselineReady, BaselineTime,
                                    Check, Checked, Failed, Load, MachineProbe, MachineProbed, Ran, Reference,
                                    ReferenceMade, Run, Spot, Spotted, Time, Timed, as_kind)
from core.evaluate.usage import PoolUsage
from core.evaluate.worker_process import WorkerGone, WorkerProcess, physical_gpu
from core.evaluate.timing_method import TimingMethod
from core.evaluate.timing_policy import TimingPolicy
from core.evaluate.verdict import ErrorStats, ReasonCode, Status, Timing, Verdict, WorkloadVerdict, overall
from core.problem.schema import Problem
from core.solution.io import solution_to_dict
from core.solution.schema import Solution


# T_sol counts every input byte once, but an honest kernel may skip inputs it provably does not need (the masked
# half of a causal softmax: measured on the H200 at 0.99 x T_sol). Only times well under T_sol are impossible.
IMPOSSIBLE_FRACTION = 0.5


@dataclass(frozen=True)
class EvalJob:
    problem: Problem
    solution: Solution
    solution_dir: Path  # the materialized candidate (core.solution.loader.materialize)
    workloads: tuple[int, ...] | None = None  # indices in workload.jsonl order; None: all
    rounds: int = 5
    timing: TimingPolicy | None = field(default_factory=TimingPolicy)
    sol_ms: dict[int, float] | None = None  # speed-of-light time per workload index, when known
    blob_roots: tuple[str, ...] = ()


class _Baseliner:
    """A judge-role process measuring T_b beside a device's judge, started at first need. A device has several: the
    torch.compile of the reference (seconds to minutes of CPU) runs in each side by side, while the steps that hold
    the device (inputs, timing) still take it one at a time."""

    def __init__(self, slot: _DeviceSlot):
        self.slot = slot
        self.process: WorkerProcess | None = None
        self.lock = anyio.Lock()

    def worker(self) -> WorkerProcess:
        if self.process is None:
            self.process = self.slot._start("judge")
        return self.process

    def replace(self) -> None:
        if self.process is not None:
            self.process.close()
        self.process = None


class _DeviceSlot:
    def __init__(self, index: int, device: str, gpu: int | None, scratch_root: Path, spare: bool,
                 timing_cores: frozenset[int] | None = None, keep: Sequence[Path] = (), baseliners: int = 1,
                 memory_fraction: float | None = None, memory: MemoryLedger | None = None):
        self.index, self.device, self.gpu, self.scratch_root, self.want_spare = index, device, gpu, scratch_root, spare
        # Each worker's cap on the device's memory, and the ledger of what work holding it reserved
        # (core.evaluate.memory_budget); None: no cap, no ledger. ``held_memory``: the holder's reservation.
        self.memory_fraction, self.memory = memory_fraction, memory
        self.held_memory = None
        self.timing_cores = timing_cores  # the candidate processes' own cores (core.evaluate.cores), or None
        self.keep = tuple(keep)
        # Where this device's candidates write their outputs for the judge: the only folders they can write besides
        # their scratch, and no other device's candidate can (it could forge or spoil another attempt's outputs).
        self.exchange_disk = scratch_root / f"exchange-{index}"
        self.exchange_disk.mkdir()
        self.exchange_memory = Path(tempfile.mkdtemp(prefix=f"kernelfleet-exchange-{index}-", dir=SHARED_MEMORY)) \
            if SHARED_MEMORY.is_dir() and os.access(SHARED_MEMORY, os.W_OK) else None
        self.judge = self._start("judge")
        self.candidate = self._start("candidate")
        self.spare = self._start("candidate") if spare else None
        self.baseliners = [_Baseliner(self) for _ in range(max(1, baseliners))]
        self.lent_s = 0.0  # device time candidate jobs lent to T_b's steps between their workloads
        # The machine's state at this start (core.evaluate.baseline.machine), probed before this device's first T_b:
        # a cached T_b taken in another state is measured again.
        self.machine_now: dict[str, Any] | None = None
        self.probe_lock = anyio.Lock()

    def _start(self, role: str) -> WorkerProcess:
        if role != "candidate":
            return WorkerProcess(role, self.device, self.gpu, self.scratch_root, memory_fraction=self.memory_fraction)
        writable = [p for p in (self.exchange_disk, self.exchange_memory) if p is not None]
        return WorkerProcess(role, self.device, self.gpu, self.scratch_root, self.timing_cores, writable=writable,
                             keep=self.keep, memory_fraction=self.memory_fraction)

    def replace_candidate(self) -> None:
        self.candidate.close()
        if self.spare is not None:
            self.candidate, self.spare = self.spare, self._start("candidate")
        else:
            self.candidate = self._start("candidate")

    def replace_judge(self) -> None:
        self.judge.close()
        self.judge = self._start("judge")

    def workers(self) -> list[WorkerProcess]:
        return [w for w in (self.judge, self.candidate, self.spare, *(b.process for b in self.baseliners))
                if w is not None]

    def ask_exit(self) -> None:
        """The first half of closing: ask every worker to exit, without waiting (each takes a moment)."""
        for worker in self.workers():
            worker.ask_exit()

    def close(self, deadline: float | None = None) -> None:
        """Close after ``ask_exit``: wait for the workers together until ``deadline`` (monotonic; None: 5 s from
        now), kill what is left, remove the exchange folder."""
        deadline = time.monotonic() + 5.0 if deadline is None else deadline
        for worker in self.workers():
            worker.finish_close(deadline - time.monotonic())
        if self.exchange_memory is not None:
            shutil.rmtree(self.exchange_memory, ignore_errors=True)


class EvaluationPool:
    def __init__(self, device: str = "cuda", gpus: Sequence[int] | None = None, *, spare: bool = True,
                 workload_timeout_s: float = 120.0, load_timeout_s: float = 120.0, keep_timing_cores: bool = True,
                 readable: Sequence[str | Path] = (), baseliners_per_device: int | None = None,
                 machine_check: bool = True, memory_budget: float = DEFAULT_BUDGET,
                 oom_retry: OomRetry = OomRetry()):
        """``readable``: folders the candidates must read besides the Python installation and the project (the
        problems, the blobs), where the confinement hides the home folders. ``baseliners_per_device``: how many
        T_b measurements each device makes side by side (None: ``baseliners_for``). ``machine_check``: probe the
        machine's state before the first T_b and keep it beside each (``core.evaluate.baseline.machine``); off,
        T_b are cached and reused whatever the state. ``memory_budget``: the share of each device's memory the
        pool's work may reserve in all (``core.evaluate.memory_budget``); ``oom_retry``: how an out-of-memory of
        its own processes is tried again."""
        self.oom_retry = oom_retry
        self.device = device
        self.workload_timeout_s = workload_timeout_s
        self.load_timeout_s = load_timeout_s
        self._root = Path(tempfile.mkdtemp(prefix="kernelfleet-eval-"))
        self.confinement = sandbox.confinement()
        keep = sandbox.kept_paths(readable)
        self.keep = tuple(keep)
        ids: list[int | None] = list(gpus) if gpus else ([0] if device.startswith("cuda") else [None])
        self.core_plan = plan_cores(os.sched_getaffinity(0), len(ids)) \
            if keep_timing_cores and device.startswith("cuda") and hasattr(os, "sched_getaffinity") else None
        # This process and all it starts from now on (judges, builds, compile workers) leave the kept cores alone.
        self._cores_before = confine_process(self.core_plan.shared) if self.core_plan else None
        shared = len(self.core_plan.shared) if self.core_plan else len(os.sched_getaffinity(0)) \
            if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        per_device = baseliners_per_device or baseliners_for(device, len(ids), shared)
        self._slots = [_DeviceSlot(i, device, gpu, self._root, spare,
                                   self.core_plan.timing[i] if self.core_plan else None, keep, per_device,
                                   *_device_memory(device, gpu, memory_budget, 2 + spare + per_device))
                       for i, gpu in enumerate(ids)]
        self.baselines_at_once = per_device * len(self._slots)
        self._gates = DeviceGates(len(self._slots))
        self._next = itertools.count()
        self.usage = PoolUsage(devices=len(self._slots))
        self._news: collections.deque[str] = collections.deque(maxlen=200)
        self.machine_check = machine_check
        self._kernel_time = KernelTimeSampler.start(self.usage, device,
                                                    [physical_gpu(g) for g in ids if g is not None])

    async def __aenter__(self) -> EvaluationPool:
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        if self._kernel_time is not None:
            self._kernel_time.stop()
            self._kernel_time = None
        for slot in self._slots:
            slot.ask_exit()  # every worker of every device first, then the waits together
        deadline = time.monotonic() + 5.0
        for slot in self._slots:
            slot.close(deadline)
        shutil.rmtree(self._root, ignore_errors=True)
        if self._cores_before is not None:
            confine_process(self._cores_before)
            self._cores_before = None

    async def wait_ready(self, include_spares: bool = False) -> None:
        for slot in self._slots:
            await slot.judge.wait_ready()
            await slot.candidate.wait_ready()
            if include_spares and slot.spare is not None:
                await slot.spare.wait_ready()

    async def submit(self, job: EvalJob, priority: int = 0) -> Verdict:
        return (await self.submit_placed(job, priority))[0]

    async def submit_placed(self, job: EvalJob, priority: int = 0) -> tuple[Verdict, int | None]:
        """The verdict and the GPU index it was evaluated on (None on the CPU)."""
        async with self._holding(priority, memory=job_memory(job.problem, job.workloads, job.rounds)) \
                as (slot, waited):
            self.usage.queue_wait_s += waited
            try:
                return await self._evaluate(slot, job, priority), slot.gpu
            finally:
                self.usage.jobs += 1
                self.usage.job_ended(slot.index)

    async def run_confined(self, command: list[str], scratch: Path, env: dict[str, str], timeout_s: float,
                           priority: int = 0, *, problem: Problem | None = None,
                           blob_roots: tuple[str, ...] = ()) -> ProcessOutcome:
        """``command`` (an instrument around candidate code) on the first device free, confined like a candidate:
        it writes only ``scratch``, sees no secret, and dies with its process group at ``timeout_s``. The device
        is held throughout, so no candidate is timed beside it, and the time counts as busy device time. The
        problem's folder (``problem``) is read where it is, here."""
        async with self._holding(priority, held_for="instrument", memory=job_memory(problem, None, 1)) \
                as (slot, waited):
            self.usage.queue_wait_s += waited
            environment = sandbox.scrubbed_environment(os.environ, str(scratch))
            environment.update(worker_environment(slot.memory_fraction))
            environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(sandbox.PROJECT_ROOT),
                                                                      environment.get("PYTHONPATH", "")]))
            environment["CUDA_VISIBLE_DEVICES"] = physical_gpu(slot.gpu) if slot.gpu is not None else ""
            environment.update(env)
            argv = self.confinement.command(command, write=[scratch], keep=self.keep)
            return await run_in_process_group(argv, cwd=scratch, env=environment, timeout_s=timeout_s)

    @asynccontextmanager
    async def _holding(self, priority: int, wanted: _DeviceSlot | None = None, *, may_borrow: bool = False,
                       held_for: str = "", memory: MemoryAsk | None = None):
        """A device for GPU work: ``wanted``'s, else the first to come free (``may_borrow``: or lent by a candidate
        job between its workloads). Yields ``(slot, seconds waited)``; the time held counts as busy in the busy
        fraction (less what was lent: the borrower counts it), the time waiting as wanted. ``held_for``: what the
        hold is for (``core.evaluate.usage.HELD_PHASES``); a candidate job's parts count apart. ``memory``: the
        room on the device it reserves meanwhile (``core.evaluate.memory_budget.hold_device``)."""
        asked = time.monotonic()
        self.usage.demand_changed(+1, asked)
        try:
            index, reserved = await hold_device(self._gates, [s.memory for s in self._slots], memory, priority,
                                                None if wanted is None else wanted.index, may_borrow=may_borrow)
            if reserved is not None:
                self._slots[index].held_memory = reserved
            began, lent_before = time.monotonic(), self._slots[index].lent_s
            try:
                yield self._slots[index], began - asked
            finally:
                self._gates.release(index)
                if reserved is not None:
                    self._slots[index].held_memory = None
                    self._slots[index].memory.release(reserved)
                held = time.monotonic() - began - (self._slots[index].lent_s - lent_before)
                self.usage.busy_s += held
                if held_for:
                    self.usage.held_for(held_for, held)
        finally:
            self.usage.demand_changed(-1, time.monotonic())

    async def baseline(self, problem: Problem, workload_indices: Sequence[int] | None = None, *,
                       timing: TimingPolicy | None = None, compile_timeout_s: float = 120.0,
                       use_cache: bool = True, blob_roots: tuple[str, ...] = (), priority: int = 0) -> list:
        """T_b per workload (``core.evaluate.baseline.WorkloadBaseline``, in the order given), from the on-disk cache
        or measured, one workload at a time. ``timing`` must be the policy candidates are timed with (None: the
        default).

        A workload whose inputs and outputs are modest is measured by the slot's baseline process: it runs
        torch.compile (seconds to minutes of CPU) without holding the GPU, so candidates keep the GPU busy
        meanwhile; making the inputs and the timing hold the slot's device, so no candidate is timed beside them. A
        larger one is measured by the judge holding the device throughout, so that no third copy of its data
        competes with a candidate for GPU memory. A process that abandons a compile, breaks or stops answering is
        replaced; one lost while compiling is asked again with torch.compile off, and the reason recorded."""
        from core.evaluate import baseline as tb
        from core.evaluate.baseline import machine, sanity
        from core.roofline.counting import analytic_io_bytes

        indices = list(workload_indices) if workload_indices is not None else list(range(len(problem.workloads)))
        def least_busy() -> tuple[_DeviceSlot, _Baseliner]:
            return min(((s, b) for s in self._slots for b in s.baseliners),
                       key=lambda sb: (sb[1].lock.locked(), self._gates.load(sb[0].index), next(self._next)))

        slot, helper = least_busy()
        while self.machine_check and slot.machine_now is None:  # probed first; then picked again, with no await
            await self._machine_now(slot, helper, priority)         # between the pick and the baseliner's lock
            slot, helper = least_busy()
        machine_now = slot.machine_now or None

        compiling = tb.CompileBudget(compile_timeout_s)

        async def measure(index: int, forget: bool = False) -> tb.WorkloadBaseline:
            if problem.workloads[index].unavailable:
                return tb.failed(problem, index, f"workload unavailable: {problem.workloads[index].unavailable}")
            timeout_s, skipped = compiling.next_timeout_s()
            lost_compiles: list[str] = []

            def request(compile_failure: str) -> Baseline:
                if compile_failure:
                    lost_compiles.append(compile_failure)
                if compile_failure and timeout_s < compile_timeout_s:
                    # Cut short by what the problem had left, not by the full bound: not a final result to cache,
                    # so a later run, with more of the budget left for this workload, tries again.
                    return tb.request_for(problem, index, timing=timing, compile_timeout_s=0.0,
                                          compile_skip_reason=f"{compile_failure} (the last {timeout_s:.0f} s of "
                                                              f"this problem's compile time)",
                                          use_cache=use_cache, forget=forget, blob_roots=blob_roots,
                                          machine_now=machine_now)
                return tb.request_for(problem, index, timing=timing, compile_timeout_s=timeout_s,
                                      compile_failure=compile_failure, compile_skip_reason=skipped,
                                      use_cache=use_cache, forget=forget, blob_roots=blob_roots,
                                      machine_now=machine_now)

            read, written = analytic_io_bytes(problem, problem.workloads[index])
            ask = MemoryAsk(baseline_bytes(read, written, tb.DEFAULT_INPUT_SETS), floor=BASELINE_FLOOR)
            share = ask.bytes_for(slot.memory.capacity) if slot.memory is not None else ask.nbytes
            if (read + written) * (tb.DEFAULT_INPUT_SETS + 1) <= SEPARATE_BASELINE_MAX_BYTES:
                async with helper.lock, OnDemand(slot.memory, share) as memory:
                    reply = await self._baseline_apart(slot, helper, request, timeout_s, priority, memory)
            else:
                reply = await self._baseline_in_judge(slot, request, timeout_s, priority, ask)
            result = tb.from_reply(problem, index, reply)
            for attempt, wait_s in enumerate(self.oom_retry.waits_s):
                if not _baseline_out_of_memory(result):
                    break
                self._tell(f"T_b of {problem.name} workload {index} ran out of device memory "
                           f"({(result.error or result.compile_reason)[:300]}); measured again in {wait_s:g} s, in the "
                           f"judge with the device's memory to itself (try {attempt + 1} of {self.oom_retry.tries})")
                await anyio.sleep(wait_s)
                result = tb.from_reply(problem, index,
                                       await self._baseline_in_judge(slot, request, timeout_s, priority, ALONE))
            compiling.spend(result, lost=bool(lost_compiles))
            return result

        results = {index: await measure(index) for index in indices}
        # Timed in another state than this start's (other GPU work beside it, a busier host): measured once more;
        # still apart, it stays flagged, and uncached (core.evaluate.baseline.judge).
        for index in [i for i, r in results.items() if r.ok and not r.cached and machine.state_moved(r)]:
            results[index] = _again(results[index], await measure(index, forget=True))
        # Out of line with a larger workload: measured again; still out of line: not trusted, and not kept.
        for index in sanity.inversions(problem, list(results.values())):
            results[index] = _again(results[index], await measure(index, forget=True))
        for index, why in sanity.inversions(problem, list(results.values())).items():
            results[index] = sanity.distrusted(results[index], why)
            forget = as_kind(tb.request_for(problem, index, timing=timing, blob_roots=blob_roots), BaselineForget)
            try:
                await helper.worker().request(forget, self.load_timeout_s)
            except WorkerGone:
                pass  # a replaced process; the entry is dropped when the workload is measured again
        return [results[index] for index in indices]

    async def _machine_now(self, slot: _DeviceSlot, helper: _Baseliner, priority: int) -> None:
        """Probe this start's machine state on ``slot`` once, holding the device (``{}`` when it cannot be)."""
        async with slot.probe_lock:
            if slot.machine_now is not None:
                return
            slot.machine_now = {}
            try:
                async with helper.lock, self._holding(priority, slot, may_borrow=True,
                                                      held_for="baseline") as (_, waited):
                    self.usage.own_gpu_wait_s += waited
                    reply = await helper.worker().request(MachineProbe(), self.load_timeout_s)
            except WorkerGone:
                helper.replace()
                return
            slot.machine_now = (reply.machine if isinstance(reply, MachineProbed) else None) or {}

    async def _baseline_apart(self, slot: _DeviceSlot, helper: _Baseliner, request, compile_timeout_s: float,
                              priority: int, memory: OnDemand) -> Any:
        """T_b from the slot's baseline process: a cache lookup, then, on a miss, three requests: the inputs and
        the eager reference's first run holding the device (GPU work that would disturb a candidate timed
        meanwhile), torch.compile without it (CPU work, apart from its warm-up calls), the timing holding it
        again. A baseline waits for this slot's device: its process and data live there. ``memory``: its share of
        the device's memory, taken before the inputs are made, and held until the caller releases it."""
        from core.evaluate import baseline as tb

        compile_failure = ""
        while True:
            message = request(compile_failure)
            if memory.ledger is not None:  # the process keeps to the share reserved for it, floor included
                message = dataclasses.replace(message, memory_bytes=min(memory.nbytes, memory.ledger.capacity))
            worker = helper.worker()
            try:
                if not compile_failure:  # a cached T_b needs no GPU
                    cached = await worker.request(as_kind(message, BaselineLookup), self.load_timeout_s)
                    if not isinstance(cached, BaselineMiss):
                        return cached
                await memory.take()
                async with self._holding(priority, slot, may_borrow=True, held_for="baseline") as (_, waited):
                    self.usage.own_gpu_wait_s += waited
                    made = await worker.request(as_kind(message, BaselineInputs),
                                                tb.reply_timeout_s(0.0, self.workload_timeout_s))
            except WorkerGone as gone:
                return _baseliner_lost(helper, gone)
            if isinstance(made, Failed) and made.fatal:
                helper.replace()
            if not isinstance(made, BaselineReady):
                return made  # from the cache, or a failure
            try:
                ready = await worker.request(as_kind(message, BaselinePrepare),
                                             tb.reply_timeout_s(compile_timeout_s, self.workload_timeout_s))
            except WorkerGone as gone:
                compile_failure = _lost_while_compiling(message, "the baseline process", gone)
                if not compile_failure:
                    return _baseliner_lost(helper, gone)
                helper.replace()
                continue
            if getattr(ready, "restart", False) or getattr(ready, "fatal", False):
                helper.replace()
                if isinstance(ready, BaselineAbandoned) and ready.abandoned and message.compile:
                    compile_failure = ready.abandoned
                    continue
            if not isinstance(ready, BaselineReady):
                return ready
            try:
                async with self._holding(priority, slot, may_borrow=True, held_for="baseline") as (_, waited):
                    self.usage.own_gpu_wait_s += waited
                    reply = await worker.request(BaselineTime(), 2 * self.workload_timeout_s + 30.0)
            except WorkerGone as gone:
                return _baseliner_lost(helper, gone)
            if isinstance(reply, Failed) and reply.fatal:
                helper.replace()
            return reply

    async def _baseline_in_judge(self, slot: _DeviceSlot, request, compile_timeout_s: float,
                                 priority: int, memory: MemoryAsk) -> Any:
        from core.evaluate import baseline as tb

        compile_failure = ""
        _, reserved = await hold_device(self._gates, [s.memory for s in self._slots], memory, priority, slot.index)
        held = time.monotonic()
        try:
            while True:
                message = request(compile_failure)
                try:
                    reply = await slot.judge.request(message,
                                                     tb.reply_timeout_s(compile_timeout_s, self.workload_timeout_s))
                except WorkerGone as gone:
                    slot.replace_judge()
                    compile_failure = _lost_while_compiling(message, "the judge", gone)
                    if compile_failure:
                        continue
                    reply = Failed("error", f"judge: {gone.reason}")
                if getattr(reply, "fatal", False) or getattr(reply, "restart", False):
                    slot.replace_judge()
                return reply
        finally:
            self._gates.release(slot.index)
            if reserved is not None:
                slot.memory.release(reserved)
            self.usage.judge_held_s += time.monotonic() - held

    async def _evaluate(self, slot: _DeviceSlot, job: EvalJob, priority: int = 0) -> Verdict:
        started = time.monotonic()
        protections = self.confinement.protections()
        indices = job.workloads if job.workloads is not None else tuple(range(len(job.problem.workloads)))
        base_seed = secrets.randbits(31)
        seeds = [base_seed + i for i in range(job.rounds)]
        exchange = Path(tempfile.mkdtemp(prefix="kernelfleet-exchange-", dir=self._exchange_parent(slot, job, indices)))
        common = {"problem_dir": str(Path(job.problem.path).resolve()), "blob_roots": list(job.blob_roots)}

        def finish(workloads: list[WorkloadVerdict]) -> Verdict:
            shutil.rmtree(exchange, ignore_errors=True)
            status, reason = overall(tuple(workloads))
            return Verdict(status, reason, tuple(workloads), protections, time.monotonic() - started)

        async def load(index: int) -> WorkloadVerdict | None:
            """Load the candidate into the slot's candidate process; a failure is the verdict of ``index``."""
            try:
                loaded = await slot.candidate.request(
                    Load(**common, solution=solution_to_dict(job.solution),
                         solution_dir=str(Path(job.solution_dir).resolve())), self.load_timeout_s)
            except WorkerGone as gone:
                slot.replace_candidate()
                return WorkloadVerdict(index, gone.status, gone.reason)
            if isinstance(loaded, Failed):
                slot.replace_candidate()  # a failed import may have left anything behind
                return _failed_verdict(index, loaded)
            return None

        if slot.candidate.answered_out_of_turn():  # the last candidate wrote on its channel after its job ended
            slot.replace_candidate()
        failed = await self._held_in(slot, "load", load(indices[0] if indices else 0))
        if failed is not None:
            return finish([failed])
        loaded_in = slot.candidate
        results: dict[int, WorkloadVerdict] = {}
        waiting: _Unchecked | None = None  # the workload whose check goes beside the next one's rounds

        async def settle(unchecked: _Unchecked) -> None:
            results[unchecked.index] = await self._check_workload(slot, job, unchecked, seeds, exchange, common)

        for index in indices:
            workload = job.problem.workloads[index]
            if workload.unavailable:
                results[index] = WorkloadVerdict(index, Status.UNAVAILABLE, workload.unavailable)
                continue
            if slot.candidate is not loaded_in:  # replaced after a REWARD_HACK: the next workload needs it loaded
                failed = await self._held_in(slot, "load", load(index))
                if failed is not None:
                    results[index] = failed
                    break
                loaded_in = slot.candidate
            if waiting is not None and not _pipelined(job, waiting.index, index):
                await settle(waiting)  # two workloads' data at once would be too much: one after the other
                waiting = None
            if results or waiting is not None:  # between two workloads: T_b's steps of a problem may go first
                lent = await self._gates.lend(slot.index, priority)
                slot.lent_s += lent
                self.usage.lent_s += lent
            outcome = await self._prepare_workload(slot, job, index, seeds, exchange, common, waiting, settle)
            waiting = None
            if isinstance(outcome, _Unchecked):
                waiting = outcome
                continue
            verdict, process_fault = outcome
            results[index] = verdict
            if process_fault:
                break
        if waiting is not None:
            await settle(waiting)
        if slot.candidate.answered_out_of_turn():  # never read as the answer to the next job's request
            slot.replace_candidate()
        return finish([results[i] for i in indices if i in results])

    def _spent(self, slot: _DeviceSlot, phase: str, began: float) -> None:
        """The job holding ``slot`` spent the time since ``began`` in ``phase`` (``PoolUsage.held_in``)."""
        self.usage.held_in(slot.index, phase, began, time.monotonic())

    async def _held_in(self, slot: _DeviceSlot, phase: str, step):
        """``await step``, its time spent in ``phase`` by the job holding ``slot``, however it ends."""
        began = time.monotonic()
        try:
            return await step
        finally:
            self._spent(slot, phase, began)

    @staticmethod
    def _exchange_parent(slot: _DeviceSlot, job: EvalJob, indices: Sequence[int]) -> Path:
        """Outputs reach the judge as files: in memory (the device's folder in /dev/shm) when two workloads' files
        fit there easily (each workload's are deleted once checked, the next one's are written meanwhile), else on
        disk in the device's folder."""
        if slot.exchange_memory is None:
            return slot.exchange_disk
        try:
            largest = 2 * max((_exchange_bytes(job, i) for i in indices), default=0)
            free = shutil.disk_usage(slot.exchange_memory).free
        except (OSError, KeyError, ValueError):
            return slot.exchange_disk
        return slot.exchange_memory if largest <= min(SHARED_MEMORY_MAX_BYTES, free // 4) else slot.exchange_disk

    @staticmethod
    def _no_room(job: EvalJob, index: int, exchange: Path) -> str:
        """Why one workload's outputs cannot be handed over through ``exchange`` without filling its disk (which
        would break builds and the run's store too), or ""."""
        try:
            needed = _exchange_bytes(job, index)
            free = shutil.disk_usage(exchange).free
        except (OSError, KeyError, ValueError):
            return ""
        if needed + EXCHANGE_RESERVE_BYTES <= free:
            return ""
        return (f"its outputs need up to {needed / 2**30:.1f} GiB in the exchange folder {exchange.parent}, which "
                f"has {free / 2**30:.1f} GiB free (keeping {EXCHANGE_RESERVE_BYTES >> 30} GiB spare); not run")

    async def _prepare_workload(self, slot: _DeviceSlot, job: EvalJob, index: int, seeds: list[int],
                                exchange: Path, common: dict[str, Any], previous: _Unchecked | None, settle
                                ) -> _Unchecked | tuple[WorkloadVerdict, bool]:
        """One workload up to its check: the reference (the judge keeps ``previous``'s), then the candidate's rounds
        beside the judge's check of ``previous`` (``settle``: neither is timed, so they may share the GPU), then
        the timing and the spot-check sample with nothing else on the GPU. Returns what the check needs, or the
        workload's verdict and whether the job stops (a process fault) when it ends before its check."""
        previous_done = previous is None

        async def check_previous() -> None:
            nonlocal previous_done
            if not previous_done:
                previous_done = True
                await settle(previous)

        try:
            no_room = self._no_room(job, index, exchange)
            if no_room:
                return WorkloadVerdict(index, Status.RUNTIME_ERROR, no_room), False
            phases: dict[str, float] = {}
            began = time.monotonic()
            judge = slot.judge
            ref = await self._held_in(slot, "reference", self._reference(
                slot, common, index, seeds, keep=None if previous is None else previous.index))
            if isinstance(ref, WorkloadVerdict):
                return ref, False
            phases["reference"] = time.monotonic() - began
            began = time.monotonic()
            rounds: dict[str, Any] = {}

            async def candidate_rounds() -> None:
                try:
                    rounds["reply"] = await slot.candidate.request(
                        Run(index, seeds, str(exchange), list(ref.mutates), keep_inputs=job.timing is not None),
                        self.workload_timeout_s)
                except WorkerGone as gone:
                    rounds["gone"] = gone

            async with anyio.create_task_group() as beside:
                beside.start_soon(check_previous)
                await candidate_rounds()
            self._spent(slot, "run", began)
            if "gone" in rounds:
                slot.replace_candidate()
                return WorkloadVerdict(index, rounds["gone"].status, rounds["gone"].reason), True
            ran = rounds["reply"]
            if not isinstance(ran, Ran):
                return _candidate_refused(slot, index, ran)
            phases["run"] = time.monotonic() - began
            _add_phases(phases, "run", ran)
            timed = _Timed()
            if job.timing is not None:
                for op, message in (("time", Time(index, asdict(job.timing))),
                                    # Which elements of the timed calls' outputs are spot-checked reaches the
                                    # candidate's process only once the timed calls are over.
                                    ("spot", Spot(index, str(exchange), secrets.randbits(63)))):
                    began = time.monotonic()
                    try:
                        reply = await self._held_in(slot, op, slot.candidate.request(message, self.workload_timeout_s))
                    except WorkerGone as gone:
                        slot.replace_candidate()
                        return WorkloadVerdict(index, gone.status, gone.reason), True
                    if not isinstance(reply, (Timed, Spotted)):
                        return _candidate_refused(slot, index, reply)
                    phases[op] = time.monotonic() - began
                    _add_phases(phases, "run", reply)
                    if isinstance(reply, Timed):
                        timed.timing = reply.timing
                    else:
                        timed.spot, timed.sample_seed = reply.spot, message.sample_seed
            return _Unchecked(index, ran.files, timed, phases, judge)
        finally:
            await check_previous()  # whatever became of this workload, the previous one gets its verdict

    async def _reference(self, slot: _DeviceSlot, common: dict[str, Any], index: int, seeds: list[int],
                         keep: int | None = None, attempt: int = 0) -> ReferenceMade | WorkloadVerdict:
        """The judge's reference outputs of ``index`` (it keeps those of ``keep`` too); a failure is the
        workload's verdict. Out of memory, it is made again when memory is free (``oom_retry``)."""
        try:
            ref = await slot.judge.request(Reference(**common, workload=index, seeds=seeds, keep_workload=keep),
                                           self.workload_timeout_s)
        except WorkerGone as gone:
            slot.replace_judge()
            return WorkloadVerdict(index, Status.INVALID_REFERENCE, f"reference: {gone.reason}")
        if not isinstance(ref, ReferenceMade):
            if ref.fatal:
                slot.replace_judge()
            if _our_out_of_memory(ref) and attempt < self.oom_retry.tries:
                await self._room_after_our_oom(slot, attempt, f"the reference of workload {index}", ref.reason)
                return await self._reference(slot, common, index, seeds, keep, attempt + 1)
            return WorkloadVerdict(index, Status.INVALID_REFERENCE, ref.reason, code=ReasonCode.read(ref.code))
        return ref

    def _tell(self, line: str) -> None:
        """A line for the run's log (``take_news``), and for this process's logger."""
        log.warning("%s", line)
        self._news.append(line)

    def take_news(self) -> list[str]:
        """What the pool has told since the last call (our own out-of-memory retries), oldest first."""
        lines = list(self._news)
        self._news.clear()
        return lines

    async def _room_after_our_oom(self, slot: _DeviceSlot, attempt: int, what: str, reason: str) -> None:
        """Before ``what`` is tried again after our judge ran out of device memory: wait, up to the retry's backoff,
        for the device's other reservations to end (the job's then is the whole budget), lending the device
        meanwhile to the T_b steps that hold them (they need it to finish), unless the candidate's rounds run beside
        (a check of the workload before): nothing else may run on the device then."""
        wait_s = self.oom_retry.waits_s[attempt]
        self._tell(f"{what}: the judge ran out of device memory ({reason[:300]}); tried again when memory is free, "
                   f"within {wait_s:g} s (try {attempt + 1} of {self.oom_retry.tries})")
        if slot.memory is None or slot.held_memory is None:
            await anyio.sleep(wait_s)
            return

        async def lend() -> None:
            if slot.candidate.in_request:
                return
            lent = await self._gates.lend(slot.index, LEND_TO_ANY)
            slot.lent_s += lent
            self.usage.lent_s += lent

        await wait_alone(slot.memory, slot.held_memory, lend, wait_s)

    async def _check_workload(self, slot: _DeviceSlot, job: EvalJob, unchecked: _Unchecked, seeds: list[int],
                              exchange: Path, common: dict[str, Any]) -> WorkloadVerdict:
        """The judge's comparison of a workload's files with its reference outputs, and the workload's verdict.
        A judge replaced since it computed that reference computes it again first."""
        index, phases = unchecked.index, dict(unchecked.phases)
        try:
            if slot.judge is not unchecked.judge:
                ref = await self._reference(slot, common, index, seeds)
                if isinstance(ref, WorkloadVerdict):
                    return ref
            began = time.monotonic()
            check = Check(**common, workload=index, files=unchecked.files, spot=unchecked.timed.spot,
                          sample_seed=unchecked.timed.sample_seed)
            try:
                checked = await self._held_in(slot, "check", slot.judge.request(check, self.workload_timeout_s))
                for attempt in range(self.oom_retry.tries):
                    if not _our_out_of_memory(checked):
                        break
                    await self._room_after_our_oom(slot, attempt, f"the check of workload {index}", checked.reason)
                    checked = await self._held_in(slot, "check", slot.judge.request(check, self.workload_timeout_s))
            except WorkerGone as gone:
                slot.replace_judge()
                return WorkloadVerdict(index, Status.RUNTIME_ERROR, f"judge: {gone.reason}")
            phases["check"] = time.monotonic() - began
        finally:
            # Outputs can be gigabytes: a workload's files go as soon as they are checked.
            for leftover in exchange.glob(f"w{index}_*"):
                leftover.unlink(missing_ok=True)
        _add_phases(phases, "check", checked)
        errors = _errors(checked.errors)
        timing_result = _timing(unchecked.timed.timing)
        if isinstance(checked, Checked):
            status, reason, code = Status.PASSED, "", ReasonCode.NONE
        else:
            status, reason, code = _status(checked.status), checked.reason, ReasonCode.read(checked.code)
        if status is Status.PASSED and timing_result and job.sol_ms and index in job.sol_ms \
                and timing_result.median_ms < IMPOSSIBLE_FRACTION * job.sol_ms[index]:
            status, code = Status.REWARD_HACK, ReasonCode.UNDER_SPEED_OF_LIGHT
            reason = (f"measured {timing_result.median_ms * 1e3:.2f} us is under {IMPOSSIBLE_FRACTION:g} x the "
                      f"speed-of-light bound {job.sol_ms[index] * 1e3:.2f} us: physically impossible")
        return WorkloadVerdict(index, status, reason, errors, timing_result, phases, code)


@dataclass
class _Timed:
    """What a workload's "time" and "spot" requests answered: the timing's fields, the spot-check files and the
    seed of their sample."""
    timing: dict[str, Any] | None = None
    spot: list[list[Any]] = field(default_factory=list)
    sample_seed: int | None = None


@dataclass
class _Unchecked:
    """A workload evaluated up to its check: the candidate's files per seed, its timing and spot-check answers,
    the phases so far, and the judge process that holds its reference outputs."""
    index: int
    files: dict[str, str]
    timed: _Timed
    phases: dict[str, float]
    judge: WorkerProcess


def _add_phases(phases: dict[str, float], request: str, reply: Any) -> None:
    """The worker's own account of its parts (``phase_s``), as ``request.part``."""
    reported = getattr(reply, "phase_s", None)
    if isinstance(reported, dict):
        phases.update({f"{request}.{k}": float(v) for k, v in reported.items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool)})


def _pipelined(job: EvalJob, checked: int, next_index: int) -> bool:
    """Whether ``checked``'s check may go beside ``next_index``'s rounds: both workloads' data at once, on the GPU
    and in the exchange folder, stay under PIPELINE_MAX_BYTES."""
    try:
        return _exchange_bytes(job, checked) + _exchange_bytes(job, next_index) <= PIPELINE_MAX_BYTES
    except (KeyError, ValueError):
        return False


def _again(first, again):
    """A T_b measured once more (``forget``: no cache lookup) keeps why the first measurement was not the cached
    figure: without it, a run that found its cached T_b stale and then measured twice said neither."""
    return again if again.remeasured or not first.remeasured else again.replace(remeasured=first.remeasured)


def _candidate_refused(slot: _DeviceSlot, index: int, reply: Any) -> tuple[WorkloadVerdict, bool]:
    """The verdict of a workload whose candidate request did not succeed, and whether the job stops there (a
    fatal fault). A process that faulted or was caught cheating is replaced: it may have left anything behind."""
    if not isinstance(reply, Failed):  # a success of another request's kind: not an answer to this one
        reply = Failed("RUNTIME_ERROR", "the candidate process answered out of turn")
    forged = _status(reply.status) not in _CANDIDATE_FAILURES or ReasonCode.read(reply.code).ours
    if reply.fatal or reply.status == "REWARD_HACK" or forged:  # forged: its code wrote on the harness's channel
        slot.replace_candidate()
    return _failed_verdict(index, reply), reply.fatal


# What a candidate's process may say of its own workload; anything else only the judge or the pool may say.
_CANDIDATE_FAILURES = frozenset({Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.INCORRECT_SHAPE,
                                 Status.INCORRECT_DTYPE, Status.INCORRECT_NUMERICAL, Status.TIMEOUT,
                                 Status.REWARD_HACK})


def _failed_verdict(index: int, reply: Failed) -> WorkloadVerdict:
    """A candidate's process's failure. It may claim anything (its code shares the process's channel): a verdict
    only the judge gives (a pass, an invalid reference, a workload that cannot be built here, which would drop it
    from the candidate's verdict and speedup) or a fault of ours (a code that ``ReasonCode.ours``) is never taken
    from it; whatever ran out of memory there is the candidate's (core.evaluate.memory_budget)."""
    status, code = _status(reply.status), ReasonCode.read(reply.code)
    status = status if status in _CANDIDATE_FAILURES else Status.RUNTIME_ERROR
    return WorkloadVerdict(index, status, reply.reason, code=ReasonCode.NONE if code.ours else code)


def _exchange_bytes(job: EvalJob, index: int) -> int:
    """The most one workload's output files take: a file per round, and per timing buffer (at most rounds + 1) a
    spot-check sample (core.evaluate.spot: at most SPOT_SAMPLES elements of 8 bytes per output)."""
    from core.evaluate.spot import SPOT_SAMPLES
    from core.roofline.counting import analytic_io_bytes

    samples = (job.rounds + 1) * len(job.problem.definition.outputs) * (SPOT_SAMPLES * 8 + 4096)
    return analytic_io_bytes(job.problem, job.problem.workloads[index])[1] * job.rounds + samples


def _device_memory(device: str, gpu: int | None, budget: float, processes: int
                   ) -> tuple[float | None, MemoryLedger | None]:
    """A device's cap for each of its ``processes`` workers (the budget's share of its memory) and the ledger of its
    reservations; no ledger where the device's memory cannot be read, neither on the CPU."""
    if not device.startswith("cuda") or gpu is None:
        return None, None
    total = device_total_bytes(physical_gpu(gpu))
    if total is None:
        log.warning("GPU %s: its memory could not be read (NVML, nvidia-smi): its workers are capped at %g of it, "
                    "but work is admitted without a memory budget", gpu, budget)
        return budget, None
    return budget, MemoryLedger(capacity_bytes(total, budget, processes))


def _our_out_of_memory(reply: Any) -> bool:
    """A judge's reply saying it ran out of device memory itself (``ReasonCode.OUR_OUT_OF_MEMORY``)."""
    return isinstance(reply, Failed) and ReasonCode.read(reply.code) is ReasonCode.OUR_OUT_OF_MEMORY


def _baseline_out_of_memory(result) -> bool:
    """Whether a T_b, or its compiled half, was lost to an out-of-memory of the process measuring it (ours: it runs
    the reference, never candidate code)."""
    return is_out_of_memory(result.error) or (result.ok and is_out_of_memory(result.compile_reason))


def baseliners_for(device: str, devices: int, shared_cores: int) -> int:
    """T_b measurements per device side by side: on a GPU, one per two of the cores left to judges and compiles
    for it, at most MAX_BASELINERS (each compile is CPU work, its timing holds the GPU alone); on the CPU one (a
    compile beside a timing would share the cores it times on)."""
    if not device.startswith("cuda"):
        return 1
    return max(1, min(MAX_BASELINERS, shared_cores // (2 * max(1, devices))))


def _baseliner_lost(helper: _Baseliner, gone: WorkerGone) -> Failed:
    helper.replace()
    return Failed("error", f"baseline process: {gone.reason}")


def _lost_while_compiling(message: Any, process: str, gone: WorkerGone) -> str:
    """The reason to record when a process measuring T_b was lost with torch.compile on (most likely the compile:
    it is asked again without), else ""."""
    return f"torch.compile: {process} was lost ({gone.reason}); eager used" if message.compile else ""


MAX_BASELINERS = 4
LEND_TO_ANY = -sys.maxsize  # a priority every borrower's is above
log = logging.getLogger("kernelfleet.memory")

# Above this, a workload's T_b is measured by the judge holding the device rather than by a third process beside a
# running candidate (input and output bytes, times the input sets plus one).
SEPARATE_BASELINE_MAX_BYTES = 8 << 30
EXCHANGE_RESERVE_BYTES = 2 << 30
SHARED_MEMORY = Path("/dev/shm")
SHARED_MEMORY_MAX_BYTES = 1 << 30  # two workloads' files at once
PIPELINE_MAX_BYTES = 8 << 30


def _status(value: Any) -> Status:
    try:
        return Status(value)
    except ValueError:
        return Status.RUNTIME_ERROR


def _errors(fields: Any) -> ErrorStats:
    try:
        return ErrorStats(**fields) if isinstance(fields, dict) else ErrorStats()
    except TypeError:
        return ErrorStats()


def _timing(fields: Any) -> Timing | None:
    if not isinstance(fields, dict):
        return None
    try:
        return Timing(float(fields["median_ms"]), float(fields["spread"]), int(fields["calls"]), str(fields["method"]),
                      TimingMethod.from_dict(fields.get("how")))
    except (KeyError, TypeError, ValueError):
        return None
