"""What crosses between the head and a node's actor: plain dicts of JSON-ready values (bytes aside, in content), so
either side depends on the other's field names, not on its classes pickling alike. The inverses of
``Verdict.to_dict`` and friends live here."""

from __future__ import annotations

from dataclasses import asdict, fields
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
