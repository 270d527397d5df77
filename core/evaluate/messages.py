"""What crosses the private socket between the pool and its worker processes (candidate, judge, baseline), and the
file a confined instrument run reads (``core.inspect.run_once``): one frozen dataclass per request kind and per
answer kind, and one codec (``encode``, ``decode_request``, ``decode_answer``) every side uses.

On the wire a message is a JSON object: a request carries its kind as ``"op"``, an answer its kind as ``"status"``
(what the workers have always sent). Requests come from the trusted pool and are decoded strictly: an unknown kind,
a missing or unknown field or a field of the wrong type is refused with ``MessageError``. Answers come from a
process that may have run hostile candidate code: ``decode_answer`` refuses what is not an object or names no known
kind, and fields of the wrong type read as absent, as the pool has always read them.
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Union


class MessageError(ValueError):
    """A message that is not one of the kinds below, or not well formed."""


# ---------------------------------------------------------------- requests (pool -> worker)


@dataclass(frozen=True)
class Exit:
    OP: ClassVar[str] = "exit"


@dataclass(frozen=True)
class Load:
    """Load a candidate into the candidate process."""
    OP: ClassVar[str] = "load"
    problem_dir: str
    solution: dict[str, Any]  # core.solution.io.solution_to_dict
    solution_dir: str
    blob_roots: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Run:
    """The correctness rounds of one workload on fresh seeded inputs; outputs go to files in ``exchange_dir``."""
    OP: ClassVar[str] = "run"
    workload: int
    seeds: list[int]
    exchange_dir: str
    mutable_inputs: list[str] = field(default_factory=list)
    keep_inputs: bool = False


@dataclass(frozen=True)
class Time:
    """Time the candidate on the input sets the last ``Run`` kept; ``timing``: TimingPolicy's fields."""
    OP: ClassVar[str] = "time"
    workload: int
    timing: dict[str, Any]


@dataclass(frozen=True)
class Spot:
    """Hand the judge samples of the timed calls' outputs, at indices drawn from ``sample_seed``."""
    OP: ClassVar[str] = "spot"
    workload: int
    exchange_dir: str
    sample_seed: int


@dataclass(frozen=True)
class Reference:
    """The judge's reference outputs of a workload (it keeps those of ``keep_workload`` too)."""
    OP: ClassVar[str] = "reference"
    problem_dir: str
    workload: int
    seeds: list[int]
    blob_roots: list[str] = field(default_factory=list)
    keep_workload: int | None = None


@dataclass(frozen=True)
class Check:
    """Compare a workload's output files (per seed, and the spot-check samples) with the reference outputs."""
    OP: ClassVar[str] = "check"
    problem_dir: str
    workload: int
    files: dict[str, str]
    blob_roots: list[str] = field(default_factory=list)
    spot: list[list[Any]] = field(default_factory=list)  # [seed, path] per timed buffer
    sample_seed: int | None = None


@dataclass(frozen=True)
class _BaselineFields:
    """One workload's T_b request (``core.evaluate.baseline.judge``); the kinds below differ in what is done."""
    problem_dir: str
    workload: int
    blob_roots: list[str] = field(default_factory=list)
    timing: dict[str, Any] | None = None  # TimingPolicy's fields; None: the default
    input_sets: int = 0  # 0: the default
    compile: bool = True
    compile_timeout_s: float = 120.0
    compile_skip_reason: str = ""
    compile_attempted: bool | None = None
    use_cache: bool = True
    forget: bool = False
    machine_now: dict[str, Any] | None = None
    # The share of the device's memory the pool reserved for a T_b made in steps: its process's cap while it makes
    # the inputs and compiles. None: the share's estimate (``core.evaluate.memory_budget.baseline_bytes``).
    memory_bytes: int | None = None


@dataclass(frozen=True)
class Baseline(_BaselineFields):
    """T_b from the cache, or measured in one go."""
    OP: ClassVar[str] = "baseline"


@dataclass(frozen=True)
class BaselineLookup(_BaselineFields):
    """T_b from the cache, or ``BaselineMiss``."""
    OP: ClassVar[str] = "baseline_lookup"


@dataclass(frozen=True)
class BaselineForget(_BaselineFields):
    """Drop the cached T_b."""
    OP: ClassVar[str] = "baseline_forget"


@dataclass(frozen=True)
class BaselineInputs(_BaselineFields):
    """The inputs and the eager reference's first run (sent holding the GPU), kept for ``BaselinePrepare``."""
    OP: ClassVar[str] = "baseline_inputs"


@dataclass(frozen=True)
class BaselinePrepare(_BaselineFields):
    """The untimed half (torch.compile), kept for ``BaselineTime``."""
    OP: ClassVar[str] = "baseline_prepare"


@dataclass(frozen=True)
class BaselineTime:
    """The timed half of the prepared workload (sent holding the GPU)."""
    OP: ClassVar[str] = "baseline_time"


@dataclass(frozen=True)
class MachineProbe:
    """The machine's state (``core.evaluate.baseline.machine``), sent holding the device."""
    OP: ClassVar[str] = "machine_probe"


BaselineRequest = Union[Baseline, BaselineLookup, BaselineForget, BaselineInputs, BaselinePrepare]
Request = Union[Exit, Load, Run, Time, Spot, Reference, Check, Baseline, BaselineLookup, BaselineForget,
                BaselineInputs, BaselinePrepare, BaselineTime, MachineProbe]
REQUESTS: dict[str, type] = {kind.OP: kind for kind in typing.get_args(Request)}
CANDIDATE_REQUESTS = (Load, Run, Time, Spot)
BASELINE_REQUESTS = (Baseline, BaselineLookup, BaselineForget, BaselineInputs, BaselinePrepare, BaselineTime,
                     MachineProbe)


def as_kind(request: _BaselineFields, kind: type) -> Any:
    """The same baseline request as another kind (a lookup of what would be measured, say)."""
    return kind(**{f.name: getattr(request, f.name) for f in fields(_BaselineFields)})


# ---------------------------------------------------------------- answers (worker -> pool)


@dataclass(frozen=True)
class Ready:
    """A worker process is started and listening."""
    STATUS: ClassVar[str] = "ready"  # also BaselineReady's: told apart by when it comes (first, or after a step)
    pid: int = 0


@dataclass(frozen=True)
class Failed:
    """A request that did not go through: ``status`` is a verdict status (core.evaluate.verdict.Status) or
    "error"; ``code`` a ReasonCode value where the failure has one; ``fatal``: the process cannot run another job."""
    STATUS: ClassVar[str] = ""  # any status not a success of the request's kind
    status: str
    reason: str = ""
    code: str = ""
    fatal: bool = False
    errors: dict[str, Any] | None = None  # ErrorStats' fields of a failed comparison


@dataclass(frozen=True)
class Done:
    """A request that has nothing more to say than that it went through (a load, a forgotten T_b)."""
    STATUS: ClassVar[str] = "ok"


@dataclass(frozen=True)
class Ran:
    STATUS: ClassVar[str] = "ok"
    files: dict[str, str] = field(default_factory=dict)  # seed -> output file
    phase_s: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Timed:
    STATUS: ClassVar[str] = "ok"
    timing: dict[str, Any] | None = None  # median_ms, spread, calls, method (and its structured form)
    phase_s: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Spotted:
    STATUS: ClassVar[str] = "ok"
    spot: list[list[Any]] = field(default_factory=list)  # [input seed, file] per timed buffer
    phase_s: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ReferenceMade:
    STATUS: ClassVar[str] = "ok"
    mutates: list[str] = field(default_factory=list)  # inputs the reference updates in place


@dataclass(frozen=True)
class Checked:
    """The comparison passed (a failed one is ``Failed`` with its errors)."""
    STATUS: ClassVar[str] = "PASSED"
    errors: dict[str, Any] | None = None
    phase_s: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class BaselineMeasured:
    """A T_b (``WorkloadBaseline.to_dict``); ``restart``: the process must be replaced (a compile still runs)."""
    STATUS: ClassVar[str] = "ok"
    baseline: dict[str, Any] | None = None
    restart: bool = False


@dataclass(frozen=True)
class BaselineAbandoned:
    """torch.compile was abandoned while preparing: the pool asks again, eager only, in a fresh process."""
    STATUS: ClassVar[str] = "ok"
    abandoned: str = ""
    restart: bool = True


@dataclass(frozen=True)
class BaselineMiss:
    STATUS: ClassVar[str] = "miss"


@dataclass(frozen=True)
class BaselineReady:
    """A baseline step done, its result kept in the process for the next step."""
    STATUS: ClassVar[str] = "ready"


@dataclass(frozen=True)
class MachineProbed:
    STATUS: ClassVar[str] = "ok"
    machine: dict[str, Any] | None = None


Answer = Union[Ready, Failed, Done, Ran, Timed, Spotted, ReferenceMade, Checked, BaselineMeasured,
               BaselineAbandoned, BaselineMiss, BaselineReady, MachineProbed]

# What a success looks like for each request; any other status is a Failed.
_SUCCESSES: dict[type, tuple[type, ...]] = {
    Load: (Done,), Run: (Ran,), Time: (Timed,), Spot: (Spotted,), Reference: (ReferenceMade,), Check: (Checked,),
    Baseline: (BaselineMeasured,), BaselineLookup: (BaselineMeasured, BaselineMiss), BaselineForget: (Done,),
    BaselineInputs: (BaselineReady, BaselineMeasured), BaselinePrepare: (BaselineReady, BaselineAbandoned,
                                                                        BaselineMeasured),
    BaselineTime: (BaselineMeasured,), MachineProbe: (MachineProbed,),
}


# ---------------------------------------------------------------- the codec


def encode(message: Any) -> dict[str, Any]:
    """A request or an answer as a JSON-ready dict."""
    data = {f.name: getattr(message, f.name) for f in fields(message)}
    if hasattr(type(message), "OP"):
        return {"op": type(message).OP, **data}
    if isinstance(message, Failed):
        data = {k: v for k, v in data.items() if v or k in ("status", "reason")}
        return data
    if isinstance(message, BaselineMeasured) and not message.restart:
        del data["restart"]
    return {"status": type(message).STATUS, **data}


def decode_request(data: Any) -> Request:
    """A request from its dict; refused with ``MessageError`` unless it is exactly one of the request kinds."""
    if not isinstance(data, dict):
        raise MessageError(f"a request must be an object, not {type(data).__name__}")
    kind = REQUESTS.get(data.get("op"))  # type: ignore[arg-type]
    if kind is None:
        raise MessageError(f"unknown request kind {data.get('op')!r}")
    return _build(kind, {k: v for k, v in data.items() if k != "op"}, strict=True)


def decode_answer(data: Any, request: Any) -> Answer:
    """The answer to ``request`` (an instance or a request kind) from the dict a worker sent. Refused with
    ``MessageError`` when it is not an object or has no string status; a status that is no success of the
    request's kind reads as ``Failed``; fields of the wrong type read as absent."""
    if not isinstance(data, dict):
        raise MessageError(f"an answer must be an object, not {type(data).__name__}")
    status = data.get("status")
    if not isinstance(status, str):
        raise MessageError("an answer must carry a string status")
    kind = request if isinstance(request, type) else type(request)
    candidates = [k for k in _SUCCESSES.get(kind, ()) if k.STATUS == status]
    if len(candidates) > 1:  # several successes share a status: the fields tell them apart
        candidates = [k for k in candidates if fields(k) and fields(k)[0].name in data] or candidates[-1:]
    chosen = candidates[0] if candidates else Failed
    return _build(chosen, {k: v for k, v in data.items() if k != "status" or chosen is Failed}, strict=False)


def decode_ready(data: Any) -> Ready:
    """The first message of a worker process."""
    if not isinstance(data, dict) or data.get("ready") is not True:
        raise MessageError("a worker's first message must be its ready signal")
    pid = data.get("pid")
    return Ready(pid if isinstance(pid, int) and not isinstance(pid, bool) else 0)


def encode_ready(ready: Ready) -> dict[str, Any]:
    return {"ready": True, "pid": ready.pid}


def _build(kind: type, values: dict[str, Any], *, strict: bool) -> Any:
    hints = typing.get_type_hints(kind)
    chosen: dict[str, Any] = {}
    for f in fields(kind):
        if f.name not in values:
            if strict and f.default is MISSING and f.default_factory is MISSING:
                raise MessageError(f"{_name(kind)}: missing field {f.name!r}")
            continue
        value = values[f.name]
        if _fits(value, hints[f.name]):
            chosen[f.name] = value
        elif strict:
            raise MessageError(f"{_name(kind)}: field {f.name!r} is {type(value).__name__}, not {hints[f.name]}")
        elif f.default is MISSING and f.default_factory is MISSING:
            chosen[f.name] = str(value)  # a Failed's status of another type: named, never trusted
    if strict:
        unknown = set(values) - {f.name for f in fields(kind)}
        if unknown:
            raise MessageError(f"{_name(kind)}: unknown field(s) {', '.join(sorted(unknown))}")
    return kind(**chosen)


def _name(kind: type) -> str:
    return getattr(kind, "OP", None) or kind.__name__


def _fits(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_fits(value, option) for option in typing.get_args(hint))
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(_fits(v, item) for v in value)
    if origin is dict:
        key, item = typing.get_args(hint) or (Any, Any)
        return isinstance(value, dict) and all(_fits(k, key) and _fits(v, item) for k, v in value.items())
    return isinstance(value, hint)
