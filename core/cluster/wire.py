"""What crosses between the head and a node's actor: plain dicts of JSON-ready values (bytes aside, in content), so
either side depends on the other's field names, not on its classes pickling alike. The actor's replies are typed on
both sides (``EvaluateReply``, ``BaselineReply``, ``ConfinedReply``: ``to_wire`` on the node, ``from_wire`` on the
head); the inverses of ``Verdict.to_dict`` and friends live here."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from core.evaluate.baseline import WorkloadBaseline
from core.evaluate.evaluator import Placement
from core.evaluate.timing_policy import TimingPolicy
from core.evaluate.timing_method import TimingMethod
from core.evaluate.verdict import ErrorStats, ReasonCode, Status, Timing, Verdict, WorkloadVerdict


def verdict_from_dict(data: dict[str, Any]) -> Verdict:
    """The inverse of ``Verdict.to_dict``."""
    return Verdict(Status(data["status"]), str(data.get("reason", "")),
                   tuple(workload_verdict_from_dict(w) for w in data.get("workloads", ())),
                   tuple(data.get("protections", ())), float(data.get("seconds", 0.0)))


def workload_verdict_from_dict(data: dict[str, Any]) -> WorkloadVerdict:
    timing = data.get("timing")
    return WorkloadVerdict(int(data["index"]), Status(data["status"]), str(data.get("reason", "")),
                           ErrorStats(**(data.get("errors") or {})),
                           timing_result_from_dict(timing) if isinstance(timing, dict) else None,
                           {str(k): float(v) for k, v in (data.get("phase_s") or {}).items()},
                           ReasonCode.read(data.get("code", "")))


def timing_result_from_dict(data: dict[str, Any]) -> Timing:
    """The inverse of a verdict's ``Timing`` as ``asdict`` wrote it (its structured method as a dict, when any)."""
    return Timing(float(data["median_ms"]), float(data["spread"]), int(data["calls"]), str(data["method"]),
                  TimingMethod.from_dict(data.get("how")))


def placement_to_dict(placement: Placement) -> dict[str, Any]:
    return asdict(placement)


def placement_from_dict(data: dict[str, Any]) -> Placement:
    gpu = data.get("gpu")
    return Placement(str(data["node"]), None if gpu is None else int(gpu), str(data.get("device_model", "")))


def baseline_to_dict(baseline: WorkloadBaseline) -> dict[str, Any]:
    data = asdict(baseline)
    data["policy"] = dict(baseline.policy) if baseline.policy is not None else None
    return data


def baseline_from_dict(data: dict[str, Any]) -> WorkloadBaseline:
    known = {f.name for f in fields(WorkloadBaseline)}
    return WorkloadBaseline(**{k: v for k, v in data.items() if k in known})


def timing_to_dict(timing: TimingPolicy | None) -> dict[str, Any] | None:
    return asdict(timing) if timing is not None else None


def timing_from_dict(data: dict[str, Any] | None) -> TimingPolicy | None:
    return TimingPolicy(**data) if data is not None else None


@dataclass(frozen=True)
class EvaluateReply:
    """A candidate built and evaluated on a node: its verdict, build report and where it ran."""

    verdict: Verdict
    build: dict[str, Any] | None
    placement: Placement | None
    usage: dict[str, Any]  # the node's pool use (core.cluster.usage), every reply's
    started_wall: float  # when the actor began the job (wall clock), every reply's
    elapsed_s: float  # how long the actor took, every reply's

    def to_wire(self) -> dict[str, Any]:
        return {"verdict": self.verdict.to_dict(), "build": self.build,
                "placement": None if self.placement is None else placement_to_dict(self.placement),
                **_times(self)}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> EvaluateReply:
        return cls(verdict_from_dict(data["verdict"]), data.get("build"),
                   placement_from_dict(data["placement"]) if data.get("placement") else None, **_times_from(data))


@dataclass(frozen=True)
class BaselineReply:
    """T_b of a problem's workloads, measured on the node's GPU."""

    baselines: tuple[WorkloadBaseline, ...]
    placement: Placement
    usage: dict[str, Any]
    started_wall: float
    elapsed_s: float

    def to_wire(self) -> dict[str, Any]:
        return {"baselines": [baseline_to_dict(b) for b in self.baselines],
                "placement": placement_to_dict(self.placement), **_times(self)}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> BaselineReply:
        return cls(tuple(baseline_from_dict(b) for b in data["baselines"]), placement_from_dict(data["placement"]),
                   **_times_from(data))


@dataclass(frozen=True)
class ConfinedReply:
    """A confined command run on the node (``RayEvaluator.run_confined``): its outcome, in the head's paths, and the
    files it left in its scratch folder (those over the size that comes back named in ``left_out``)."""

    returncode: int | None
    output: str
    scratch: dict[str, bytes]
    left_out: tuple[str, ...]
    usage: dict[str, Any]
    started_wall: float
    elapsed_s: float

    def to_wire(self) -> dict[str, Any]:
        return {"returncode": self.returncode, "output": self.output, "scratch": dict(self.scratch),
                "left_out": list(self.left_out), **_times(self)}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ConfinedReply:
        code = data.get("returncode")
        return cls(None if code is None else int(code), str(data.get("output", "")),
                   {str(k): bytes(v) for k, v in (data.get("scratch") or {}).items()},
                   tuple(str(n) for n in data.get("left_out") or ()), **_times_from(data))


ActorReply = EvaluateReply | BaselineReply | ConfinedReply


def _times(reply: ActorReply) -> dict[str, Any]:
    return {"usage": reply.usage, "started_wall": reply.started_wall, "elapsed_s": reply.elapsed_s}


def _times_from(data: dict[str, Any]) -> dict[str, Any]:
    return {"usage": dict(data["usage"]), "started_wall": float(data["started_wall"]),
            "elapsed_s": float(data["elapsed_s"])}
