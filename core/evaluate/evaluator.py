"""The one door to GPUs: an ``Evaluator`` builds and evaluates a candidate, measures T_b, gives T_sol and reports
how busy its devices were. ``core.evaluate.local.LocalEvaluator`` is this machine's GPUs (the evaluation pool); ``core.cluster`` puts
a Ray cluster's GPUs behind the same interface. Requests carry content, not paths into the caller's disk, except
the problem's folder, which an evaluator elsewhere ships as content (``core.cluster.content``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from core.build.process import ProcessOutcome
from core.evaluate.usage import PoolUsage
from core.evaluate.timing_policy import TimingPolicy
from core.evaluate.verdict import Verdict
from core.problem.schema import Problem
from core.roofline.problem_sol import SolModel
from core.solution.schema import Solution


@dataclass(frozen=True)
class EvaluationRequest:
    problem: Problem
    solution: Solution
    workloads: tuple[int, ...] | None = None  # indices in workload.jsonl order; None: all
    rounds: int = 5
    timing: TimingPolicy | None = field(default_factory=TimingPolicy)
    priority: int = 0
    blob_roots: tuple[str, ...] = ()


@dataclass(frozen=True)
class Placement:
    """Where a job ran: the host (or Ray node), the GPU index there (None on the CPU) and the device's model."""

    node: str
    gpu: int | None
    device_model: str

    def describe(self) -> str:
        where = f"GPU {self.gpu}" if self.gpu is not None else "cpu"
        return f"{self.node} {where}" + (f" ({self.device_model})" if self.device_model else "")


@dataclass(frozen=True)
class Evaluation:
    verdict: Verdict
    build: dict[str, Any] | None  # the build report (build_report), None when nothing was built
    placement: Placement | None = None


@runtime_checkable
class Evaluator(Protocol):
    """What the fleet and ``kernelfleet eval`` need from GPUs. Used as ``async with``: started on entry, every
    process it owns ended on exit."""

    device: str  # "cuda" or "cpu"
    usage: PoolUsage

    async def __aenter__(self) -> Evaluator: ...

    async def __aexit__(self, *exc_info: Any) -> None: ...

    async def evaluate(self, request: EvaluationRequest) -> Evaluation:
        """Build the candidate and evaluate it; a spec fault or a failed build is a COMPILE_ERROR verdict."""
        ...

    async def evaluate_prepared(self, request: EvaluationRequest, prepared: Any) -> Evaluation:
        """``evaluate`` of a candidate ``core.solution.prepare.prepare`` built here already; an evaluator whose
        devices are elsewhere may build it again where the job runs."""
        ...

    async def baseline(self, problem: Problem, workload_indices: Sequence[int] | None = None, *,
                       timing: TimingPolicy | None = None, compile_timeout_s: float = 120.0,
                       blob_roots: tuple[str, ...] = (), priority: int = 0,
                       device_model: str | None = None) -> list:
        """T_b per workload (``core.evaluate.baseline.WorkloadBaseline``), in the order given, measured on a device of
        ``device_model`` (None: ``baseline_model()``); an error when no device of that model is left."""
        ...

    async def speed_of_light(self, problem: Problem, workload_indices: Sequence[int], *,
                             device_model: str | None = None) -> SolModel:
        """T_sol per workload on this evaluator's devices of ``device_model`` (None: ``baseline_model()``); enforced
        by ``evaluate`` when it is a strict bound."""
        ...

    def baseline_model(self) -> str:
        """The device model T_b is measured on when none is asked for: the model of a run's recorded figures."""
        ...

    def remember_sol(self, problem: Problem, t_sol_ms: dict[int, float]) -> None:
        """T_sol known from an earlier start (the store), enforced without counting the reference again."""
        ...

    def placements(self) -> list[Placement]:
        """Every device this evaluator can run on now."""
        ...

    def baselines_at_once(self) -> int:
        """How many problems' T_b it measures side by side (their torch.compile is CPU work apart from the devices)."""
        ...

    def describe(self) -> list[str]:
        """Lines for the run's log at start: the confinement, the cores kept for timing, the nodes."""
        ...

    def news(self) -> list[str]:
        """Lines for the run's log since the last call: devices lost, joined or replaced."""
        ...

    async def run_confined(self, command: list[str], scratch: Path, env: dict[str, str], timeout_s: float,
                           priority: int = 0, *, problem: Problem | None = None,
                           blob_roots: tuple[str, ...] = ()) -> ProcessOutcome:
        """``command`` (an instrument around candidate code: ncu, compute-sanitizer, one run) on a device, confined
        like a candidate: it writes only ``scratch``, sees no secret, and is stopped at ``timeout_s``. Its files are
        in ``scratch``'s parent folder and ``problem``'s; an evaluator whose devices are elsewhere ships both, runs
        it there with their paths as they are there, and brings ``scratch`` back."""
        ...
