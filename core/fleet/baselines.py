"""The one owner of a problem's T_b and T_sol in a run, per GPU model.

At preparation the problem is measured on the evaluator's ``baseline_model`` (the one model of a single host, a
cluster's most common one) and recorded in ``problems.workloads_json``. On a cluster of several models, the first
attempt that runs on another model has that model's T_b and T_sol measured (on a GPU of it) and recorded apart
(``model_baselines``); that attempt's figures, and every later one's on that model, are counted against them. A model
that cannot be measured (no GPU of it left, nothing measured) falls back to the recorded model's figures, said once
in the log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

import anyio

from core.evaluate.baseline import METHOD_COMPILED, WorkloadBaseline, sanity
from core.evaluate.baseline.machine import MachineState, state_moved
from core.evaluate.evaluator import Evaluator, Placement
from core.evaluate.timing_policy import TimingPolicy
from core.problem.schema import Problem
from core.store.model import WorkloadInfo
from core.store.writer import RunStore

# A problem's preparation (T_b's inputs and timing, T_b on another GPU model, the seed's evaluation) goes ahead of
# every candidate on the GPU: agents can work on a problem only once it is prepared, and each of its holds is short.
# Measured on one H200 with two tuners busy, equal priority left the baseline timings waiting 845 s in all for the
# GPU while 12 of 21 problems were prepared in 6 min 19 s.
PREPARATION_PRIORITY = 1 << 20


class ModelBaselines:
    def __init__(self, store: RunStore, evaluator: Evaluator, *, timing: TimingPolicy | None,
                 compile_timeout_s: float, blob_roots: tuple[str, ...] = (),
                 log: Callable[..., None] = lambda line, problem_id=None: None):
        self.store = store
        self.evaluator = evaluator
        self.timing = timing
        self.compile_timeout_s = compile_timeout_s
        self.blob_roots = blob_roots
        self.log = log
        self._locks: dict[tuple[int, str], anyio.Lock] = {}
        self._fallback: set[tuple[int, str]] = set()

    async def measure(self, problem_id: int, problem: Problem) -> None:
        """T_b and T_sol of every runnable workload on the evaluator's baseline model, recorded with the problem."""
        model = self.evaluator.baseline_model()
        infos, line = await self._measured(problem, None)
        self.store.set_problem_workloads(problem_id, [asdict(i) for i in infos], model)
        self.log(line, problem_id=problem_id)

    async def workloads(self, problem_id: int, problem: Problem,
                        placement: Placement | None) -> tuple[WorkloadInfo, ...]:
        """The T_b and T_sol an attempt evaluated at ``placement`` is counted against."""
        row = self.store.problem(problem_id)
        model = placement.device_model if placement is not None else ""
        if not model or not row.baseline_model or model == row.baseline_model or not row.workloads:
            return row.workloads
        known = self.store.model_workloads(problem_id, model)
        if known is not None:
            return known
        key = (problem_id, model)
        if key in self._fallback:
            return row.workloads
        async with self._locks.setdefault(key, anyio.Lock()):
            known = self.store.model_workloads(problem_id, model)
            if known is not None:
                return known
            try:
                infos, line = await self._measured(problem, model)
            except Exception as exc:  # noqa: BLE001 - counted against the recorded model's T_b instead, and said
                self._fallback.add(key)
                self.log(f"T_b on {model} could not be measured ({type(exc).__name__}: {str(exc)[:200]}); attempts "
                         f"there are counted against the T_b of {row.baseline_model}", problem_id=problem_id)
                return row.workloads
            self.store.set_model_workloads(problem_id, model, [asdict(i) for i in infos])
            self.log(f"on {model}: {line}", problem_id=problem_id)
            return infos

    async def _measured(self, problem: Problem, model: str | None) -> tuple[list[WorkloadInfo], str]:
        runnable = [w.index for w in problem.workloads if not w.unavailable]
        sol = await self.evaluator.speed_of_light(problem, runnable, device_model=model)
        baselines = await self.evaluator.baseline(problem, runnable, timing=self.timing,
                                                  compile_timeout_s=self.compile_timeout_s,
                                                  blob_roots=self.blob_roots, priority=PREPARATION_PRIORITY,
                                                  device_model=model)
        baselines = [sanity.distrusted(b, sanity.below_roofline(b, sol.t_sol_ms.get(b.index))) for b in baselines]
        infos = [_info(problem, b, sol) for b in baselines]
        cached = sum(b.cached for b in baselines)
        measured = (f"baseline measured on {len(infos)} workloads" if not cached else
                    f"baseline from the cache for {len(infos)} workloads" if cached == len(infos) else
                    f"baseline measured on {len(infos) - cached} workloads, from the cache for {cached}")
        line = (measured
                + (f", T_sol on {len(sol.t_sol_ms)}" if sol.t_sol_ms else f" ({sol.unavailable})" if sol.unavailable
                   else "") + compile_outcome(baselines) + machine_outcome(baselines))
        return infos, line


def _info(problem: Problem, b: WorkloadBaseline, sol) -> WorkloadInfo:
    then, now = MachineState.from_dict(b.machine), MachineState.from_dict(b.machine_now)
    return WorkloadInfo(b.index, " ".join(f"{k}={v}" for k, v in problem.workloads[b.index].axes.items()),
                        b.baseline_ms, sol.t_sol_ms.get(b.index), b.method, b.eager_ms, b.compiled_ms,
                        b.compile_reason, b.timing_method, sol.bound.get(b.index, ""), b.unreliable,
                        then.probe_ms if then else None, then.load_1m if then else None,
                        now.probe_ms if now else None, now.load_1m if now else None,
                        state_moved(b) if b.ok else "", b.remeasured, b.timing_host_bound)


def machine_outcome(baselines: list[WorkloadBaseline]) -> str:
    """Where a cached T_b was measured again because the machine's state moved, and where a T_b still stands in
    another state than this start's (its speedups are flagged)."""
    parts = []
    again = [b for b in baselines if b.remeasured]
    if again:
        parts.append(f"T_b measured again on workload {', '.join(str(b.index) for b in again)}: {again[0].remeasured}")
    apart = [b for b in baselines if b.ok and state_moved(b)]
    if apart:
        parts.append(f"T_b of workload {', '.join(str(b.index) for b in apart)} taken in another machine state than "
                     f"this start's, twice, so their speedups are flagged: {state_moved(apart[0])}")
    return "".join(f"; {p}" for p in parts)


def compile_outcome(baselines: list[WorkloadBaseline]) -> str:
    """What a person checking T_b wants to know from the baseline line: where torch.compile had no time and why,
    where eager beat it, which figures were not trusted, where no lead could cover the launch, and how long the
    compiles took."""
    parts = []
    failed = [b for b in baselines if b.ok and b.compiled_ms is None and b.compile_reason]
    if failed:
        parts.append(f"torch.compile not timed on workload {', '.join(str(b.index) for b in failed)}: "
                     f"{failed[0].compile_reason[:200]}")
    slower = [b for b in baselines if b.ok and b.compiled_ms is not None and b.method != METHOD_COMPILED]
    if slower:
        parts.append("eager faster than torch.compile on workload "
                     + ", ".join(f"{b.index} ({b.eager_ms * 1e3:.3g} vs {b.compiled_ms * 1e3:.3g} us)" for b in slower))
    distrusted = [b for b in baselines if b.unreliable]
    if distrusted:
        parts.append(f"T_b not trusted on workload {', '.join(str(b.index) for b in distrusted)} (no speedup counted "
                     f"there): {distrusted[0].unreliable[:200]}")
    host_bound = [b for b in baselines if b.timing_host_bound]
    if host_bound:
        parts.append(f"T_b host-bound on workload {', '.join(str(b.index) for b in host_bound)}")
    compiled = [b for b in baselines if b.compile_seconds and not b.cached]
    total = sum(b.compile_seconds for b in compiled)
    if total >= 1.0:  # where a preparation's time went; a cached T_b cost nothing this time
        longest = max(compiled, key=lambda b: b.compile_seconds)
        parts.append(f"torch.compile took {total:.0f} s over {len(compiled)} workloads (longest "
                     f"{longest.compile_seconds:.0f} s, workload {longest.index})")
    return "".join(f"; {p}" for p in parts)
