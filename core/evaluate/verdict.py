"""What an evaluation concludes: statuses, per-workload results and the verdict (pure data, no torch)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    PASSED = "PASSED"
    COMPILE_ERROR = "COMPILE_ERROR"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    INCORRECT_SHAPE = "INCORRECT_SHAPE"
    INCORRECT_DTYPE = "INCORRECT_DTYPE"
    INCORRECT_NUMERICAL = "INCORRECT_NUMERICAL"
    TIMEOUT = "TIMEOUT"
    REWARD_HACK = "REWARD_HACK"
    INVALID_REFERENCE = "INVALID_REFERENCE"
    UNAVAILABLE = "UNAVAILABLE"  # the workload cannot be built here (e.g. its safetensors blob is absent)
    REJECTED = "REJECTED"  # refused by the run's reviewer model before any build or evaluation


@dataclass(frozen=True)
class ErrorStats:
    """The worst comparison over all rounds and outputs of a workload. As upstream reports them, the errors are 0 when
    a NaN or Inf decided the comparison, and ``has_nan`` or ``has_inf`` says which (NaN when both)."""

    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    matched_ratio: float = 1.0
    output: str = ""  # which output the worst figures belong to
    has_nan: bool = False
    has_inf: bool = False


@dataclass(frozen=True)
class Timing:
    median_ms: float
    spread: float  # interquartile range / median
    calls: int
    method: str  # e.g. "cuda events, L2 flushed, device-wide check"


@dataclass(frozen=True)
class WorkloadVerdict:
    index: int
    status: Status
    reason: str = ""
    errors: ErrorStats = field(default_factory=ErrorStats)
    timing: Timing | None = None
    # Where the evaluation's wall time went, in seconds: the requests as the pool saw them ("reference", "run",
    # "check") and the workers' own accounts of their parts ("run.timing", "check.load", ...). For tuning, not trust.
    phase_s: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED


@dataclass(frozen=True)
class Verdict:
    status: Status  # PASSED only when every evaluated workload passed
    reason: str
    workloads: tuple[WorkloadVerdict, ...] = ()
    protections: tuple[str, ...] = ()  # what isolation was in force for the candidate
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def overall(workloads: tuple[WorkloadVerdict, ...]) -> tuple[Status, str]:
    """The verdict's status: the first non-passing workload's status and reason, else PASSED."""
    for verdict in workloads:
        if not verdict.passed and verdict.status is not Status.UNAVAILABLE:
            return verdict.status, f"workload {verdict.index}: {verdict.reason}"
    if workloads and all(v.status is Status.UNAVAILABLE for v in workloads):
        return Status.UNAVAILABLE, "no workload could be built here"
    return Status.PASSED, ""
