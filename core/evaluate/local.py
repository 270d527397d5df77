"""This machine's devices as an ``Evaluator``: builds with a ``BuildService``, evaluates in an ``EvaluationPool``,
T_sol from ``core.roofline`` for the local GPU model."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from core.build import BuildService
from core.build.process import ProcessOutcome
from core.evaluate.evaluate import build_and_evaluate, evaluate_built
from core.evaluate.evaluator import Evaluation, EvaluationRequest, Placement
from core.evaluate.pool import EvaluationPool
from core.evaluate.timing_policy import TimingPolicy
from core.problem.schema import Problem
from core.roofline.problem_sol import SolModel
from core.solution.prepare import PreparedSolution

# torch's dispatch-mode stack (the flop counter behind T_sol) is per process, not per thread.
_TRACING = anyio.Lock()


class LocalEvaluator:
    """``gpus``: CUDA indices as this process sees them (empty: GPU 0, or the CPU); ``pool_options`` go to
    ``EvaluationPool`` (spare, workload_timeout_s, readable, ...)."""

    def __init__(self, device: str = "cuda", gpus: Sequence[int] | None = None, *, builds: BuildService | None = None,
                 node: str | None = None, device_model: str | None = None, **pool_options: Any):
        self.device = device
        self.gpus = list(gpus) if gpus else []
        self.builds = builds or BuildService()
        self.node = node or socket.gethostname()
        self._device_model = device_model
        self.pool = EvaluationPool(device, self.gpus or None, **pool_options)
        self.usage = self.pool.usage
        self._sol: dict[Path, dict[int, float]] = {}  # problem folder -> T_sol enforced, per workload

    async def __aenter__(self) -> LocalEvaluator:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self.close()

    def close(self) -> None:
        self.pool.close()

    @property
    def device_model(self) -> str:
        if self._device_model is None:
            from core.roofline.problem_sol import gpu_name_from_smi

            self._device_model = gpu_name_from_smi(self.gpus[0] if self.gpus else 0) \
                if self.device == "cuda" else "cpu"
        return self._device_model

    def baselines_at_once(self) -> int:
        return self.pool.baselines_at_once

    def placements(self) -> list[Placement]:
        if self.device != "cuda":
            return [Placement(self.node, None, "cpu")]
        return [Placement(self.node, gpu, self.device_model) for gpu in (self.gpus or [0])]

    def describe(self) -> list[str]:
        lines = [self.pool.confinement.summary()]
        if self.pool.core_plan is not None:
            lines.append(self.pool.core_plan.describe())
        return lines

    def news(self) -> list[str]:
        return self.pool.take_news()  # this machine's devices do not come and go; memory retries are news

    async def run_confined(self, command: list[str], scratch: Path, env: dict[str, str], timeout_s: float,
                           priority: int = 0, *, problem: Problem | None = None,
                           blob_roots: tuple[str, ...] = ()) -> ProcessOutcome:
        """An instrument around candidate code, confined on a device (``EvaluationPool.run_confined``); the
        problem's folder is read where it is."""
        return await self.pool.run_confined(command, scratch, env, timeout_s, priority, problem=problem,
                                            blob_roots=blob_roots)

    async def evaluate(self, request: EvaluationRequest) -> Evaluation:
        return await build_and_evaluate(self.pool, self.builds, request, sol_ms=self._sol.get(request.problem.path),
                                        node=self.node, device_model=self.device_model)

    async def evaluate_prepared(self, request: EvaluationRequest, prepared: PreparedSolution) -> Evaluation:
        """Evaluate a candidate built already (``core.solution.prepare.prepare`` with ``self.builds``)."""
        return await evaluate_built(self.pool, request, prepared, sol_ms=self._sol.get(request.problem.path),
                                    node=self.node, device_model=self.device_model)

    async def baseline(self, problem: Problem, workload_indices: Sequence[int] | None = None, *,
                       timing: TimingPolicy | None = None, compile_timeout_s: float = 120.0,
                       blob_roots: tuple[str, ...] = (), priority: int = 0,
                       device_model: str | None = None) -> list:
        self._check_model(device_model)
        return await self.pool.baseline(problem, workload_indices, timing=timing,
                                        compile_timeout_s=compile_timeout_s, blob_roots=blob_roots,
                                        priority=priority)

    async def speed_of_light(self, problem: Problem, workload_indices: Sequence[int], *,
                             device_model: str | None = None) -> SolModel:
        self._check_model(device_model)
        sol = await sol_for(problem, list(workload_indices), self.device, self.device_model)
        if sol.enforce:
            self._sol[problem.path] = dict(sol.t_sol_ms)
        return sol

    def remember_sol(self, problem: Problem, t_sol_ms: dict[int, float]) -> None:
        if self.device == "cuda" and t_sol_ms:
            self._sol[problem.path] = dict(t_sol_ms)

    def baseline_model(self) -> str:
        return self.device_model

    def _check_model(self, device_model: str | None) -> None:
        if device_model is not None and device_model != self.device_model:
            raise ValueError(f"no {device_model} here: this machine's devices are {self.device_model}")


async def sol_for(problem: Problem, indices: list[int], device: str, device_model: str) -> SolModel:
    """``core.roofline.problem_sol.speed_of_light`` in a thread, from the T_sol cache (``core.roofline.sol_cache``)
    or counted, one count at a time in this process (a cached one waits for no count)."""
    from core.roofline.sol_cache import cached_sol, counted_sol

    gpu_name = "" if device_model == "cpu" else device_model
    found = await anyio.to_thread.run_sync(cached_sol, problem, indices, device, gpu_name)
    if found is not None:
        return found
    async with _TRACING:
        return await anyio.to_thread.run_sync(counted_sol, problem, indices, device, gpu_name)


def from_options(options) -> LocalEvaluator:
    """The ``local`` host backend (``core.evaluate.hosts``): this machine's GPUs, or its CPU."""
    return LocalEvaluator(options.device, list(options.gpus), builds=options.builds, device_model=options.device_model,
                          spare=options.spare, workload_timeout_s=options.workload_timeout_s,
                          memory_budget=options.memory_budget, readable=list(options.readable))
