"""What an evaluation concludes: statuses, per-workload results and the verdict (pure data, no torch)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from core.evaluate.timing_method import TimingMethod


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


class ReasonCode(str, Enum):
    """What kind of reason a workload's verdict gives, for code that acts on it (the sentence is for people)."""

    NONE = ""
    LOAD_FAILED = "load_failed"  # importing the solution raised
    IMPORT_TAMPERED = "import_tampered"  # importing the solution replaced what the harness relies on
    TIMED_OUTPUT_WRONG = "timed_output_wrong"  # a timed call's output failed its spot check
    UNDER_SPEED_OF_LIGHT = "under_speed_of_light"  # measured faster than physically possible
    # The judge, not the candidate, ran out of device memory (core.evaluate.memory_budget draws the line): no verdict
    # on the candidate.
    OUR_OUT_OF_MEMORY = "our_out_of_memory"

    @property
    def ours(self) -> bool:
        """A fault of the evaluation's own processes, which says nothing of the candidate."""
        return self is ReasonCode.OUR_OUT_OF_MEMORY

    @property
    def solution_wide(self) -> bool:
        """A property of the solution, the same on every workload: found once, it is every workload's verdict."""
        return self in (ReasonCode.LOAD_FAILED, ReasonCode.IMPORT_TAMPERED)

    @classmethod
    def read(cls, value: object) -> ReasonCode:
        """A code from a message or a stored verdict; anything unknown reads as NONE."""
        try:
            return cls(value)
        except ValueError:
            return cls.NONE


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
    method: str  # the sentence, e.g. "cuda events per call, L2 flushed, device-wide check": for display
    how: TimingMethod | None = None  # the same, structured, for code to ask; None where only the sentence came


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
    code: ReasonCode = ReasonCode.NONE

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
