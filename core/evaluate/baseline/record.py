"""What T_b of one workload is: the record every part of the baseline passes around."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from core.evaluate.timing_method import host_bound_in

from core.problem.schema import Problem

DEFAULT_COMPILE_TIMEOUT_S = 120.0
DEFAULT_INPUT_SETS = 5

METHOD_EAGER = "eager"
METHOD_COMPILED = "torch.compile"


@dataclass(frozen=True)
class WorkloadBaseline:
    """T_b of one workload, with what it was chosen from."""

    index: int
    uuid: str = ""
    baseline_ms: float | None = None  # T_b = min(eager_ms, compiled_ms); None when even eager failed
    method: str = ""  # METHOD_EAGER or METHOD_COMPILED: which one T_b is
    eager_ms: float | None = None
    compiled_ms: float | None = None
    compile_reason: str = ""  # why compiled_ms is None: failed, abandoned, mismatched, skipped
    compile_attempted: bool = False  # False only when the request skipped torch.compile
    compile_seconds: float | None = None  # the warm-up call that compiled, when it finished
    eager_spread: float | None = None
    compiled_spread: float | None = None
    timing_method: str = ""  # the timing's method sentence (core.evaluate.timing_method.TimingMethod.describe)
    error: str = ""  # why there is no T_b at all (the reference failed, the workload is unavailable, ...)
    unreliable: str = ""  # why a measured T_b was not trusted (core.evaluate.baseline.sanity); then baseline_ms is None
    cached: bool = False
    device_name: str = ""
    torch_version: str = ""
    policy: Mapping[str, Any] | None = None  # asdict(TimingPolicy) it was measured with
    input_sets: int = 0
    measured_at: float = 0.0
    # The machine's state (core.evaluate.baseline.machine.MachineState as a dict) when T_b was measured, at the start
    # of the run that measured it, and at this start; ``remeasured``: why a cached T_b was measured again.
    machine: Mapping[str, Any] | None = None
    machine_start: Mapping[str, Any] | None = None
    machine_now: Mapping[str, Any] | None = None
    remeasured: str = ""
    # Whether T_b's timing was host-bound (TimingMethod.host_bound); None in an entry cached before the flag, which
    # reads it from ``timing_method`` once, here.
    timing_host_bound: bool | None = None
    # The method (METHOD_EAGER or METHOD_COMPILED) timed only briefly: it was more than RACE_MARGIN times slower
    # than the other (core.evaluate.baseline.measure), so its figure is a brief timing's; "" when both were timed
    # in full.
    brief: str = ""

    def __post_init__(self) -> None:
        if self.timing_host_bound is None:
            object.__setattr__(self, "timing_host_bound", host_bound_in(self.timing_method))

    @property
    def ok(self) -> bool:
        return self.baseline_ms is not None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("policy", "machine", "machine_start", "machine_now"):
            data[name] = dict(data[name]) if data[name] is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkloadBaseline:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def replace(self, **changes: Any) -> WorkloadBaseline:
        return WorkloadBaseline.from_dict({**self.to_dict(), **changes})


# ---------------------------------------------------------------- cache key and store


def failed(problem: Problem, index: int, reason: str) -> WorkloadBaseline:
    return WorkloadBaseline(index=index, uuid=problem.workloads[index].uuid, error=reason)
