"""Rows of the run store as frozen dataclasses: what the planner, the reports and the UI read."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

from core.errors import StoreRowError


def device_word(device: str) -> str:
    """What a run's devices are called in its figures ("GPU busy", "GPU seconds"): "CPU" on the cpu device."""
    return "CPU" if device == "cpu" else "GPU"


@dataclass(frozen=True)
class RunInfo:
    created_at: float
    config: dict[str, Any]
    problem_paths: tuple[str, ...]
    device: str
    gpus: tuple[int, ...]
    gpu_name: str
    state: str  # starting | running | stopping | stopped | finished
    ended_at: float | None

    @property
    def device_word(self) -> str:
        return device_word(self.device)


@dataclass(frozen=True)
class WorkloadInfo:
    """One workload of a problem as the run measured it once: the baseline and the speed-of-light time."""

    index: int
    axes: str
    t_b_ms: float | None = None
    t_sol_ms: float | None = None
    baseline_method: str = ""
    eager_ms: float | None = None
    compiled_ms: float | None = None
    compile_reason: str = ""  # why torch.compile has no time: failed, abandoned, mismatched, skipped
    timing_method: str = ""  # how T_b was timed (says "host-bound" when no lead could cover the launch)
    bound: str = ""  # what bounds T_sol: "memory", "compute" or "floor" (the fixed latency); "" not known
    t_b_unreliable: str = ""  # why a measured T_b was not trusted (core.evaluate.baseline.sanity); t_b_ms is None
    # The machine's state (core.evaluate.baseline.machine) when T_b was measured, and at the start of the run that
    # measured or looked it up; ``state_moved``: why the two are not comparable ("" when they are), so a speedup
    # counted against this T_b is flagged; ``remeasured``: why a cached T_b was measured again.
    probe_ms: float | None = None
    load_1m: float | None = None
    run_probe_ms: float | None = None
    run_load_1m: float | None = None
    state_moved: str = ""
    remeasured: str = ""
    # Whether T_b's timing was host-bound (core.evaluate.timing_method.TimingMethod.host_bound), stored beside the
    # sentence; None in a row written before the flag (or by a caller that passes only the sentence), read from
    # ``timing_method`` once, here.
    timing_host_bound: bool | None = None

    def __post_init__(self) -> None:
        if self.timing_host_bound is None:  # the sentence has said "host-bound" since the flag's first day
            object.__setattr__(self, "timing_host_bound", "host-bound" in self.timing_method)


@dataclass(frozen=True)
class FrontierMember:
    """A passing attempt on a problem's per-workload frontier (``core.fleet.frontier``): the workloads it leads and
    its time on each of them."""

    attempt_id: int
    leads: tuple[int, ...]  # workload indices, ascending
    lead_ms: tuple[float, ...]  # its median time on each of ``leads``
    speedup: float | None  # the attempt's geomean speedup over the workloads it was evaluated on
    full: bool  # evaluated on every workload


@dataclass(frozen=True)
class ProblemRow:
    id: int
    key: str  # "subset/name", unique in the run
    name: str
    subset: str
    path: str
    op: str
    priority: int
    paused: bool
    pinned: bool
    status: str  # waiting | active | plateaued | over budget | failed | paused
    best_attempt_id: int | None
    best_speedup: float | None
    best_sol: float | None
    seed_attempt_id: int | None
    seed_speedup: float | None
    seed_sol: float | None
    attempts: int
    failures_in_row: int
    since_improvement: int  # attempts since the best SOL last rose by the planner's minimum gain
    tokens: int
    dollars: float
    gpu_seconds: float
    wall_seconds: float
    last_change_at: float | None
    workloads: tuple[WorkloadInfo, ...] = ()
    frontier: tuple[FrontierMember, ...] = ()
    baseline_model: str = ""  # the GPU model ``workloads``' T_b was measured on ("" before store version 8)
    preparation_s: float | None = None  # how long its preparation took (None: not prepared, or before version 11)


@dataclass(frozen=True)
class AgentRow:
    id: int
    name: str
    kind: str  # a registered agent kind: tuner, compiler, llm, ...
    model: str
    state: str  # idle | working | paused | backoff | stopped
    problem_id: int | None
    paused: bool
    attempts: int
    failures_in_row: int
    tokens: int
    dollars: float
    updated_at: float
    profile: str = ""  # its model profile now (LLM agents; core.config.schema.ModelProfile)


@dataclass(frozen=True)
class AttemptRow:
    id: int
    problem_id: int
    agent_id: int | None
    parent_id: int | None
    state: str  # pending | done
    created_at: float
    finished_at: float | None
    language: str
    solution: dict[str, Any]
    diff: str
    tunables: dict[str, Any]
    note: str
    workloads: tuple[int, ...] | None  # None: every workload
    build: dict[str, Any] | None
    verdict: dict[str, Any] | None
    status: str | None
    reason: str
    times_ms: dict[int, float] = field(default_factory=dict)  # per passed workload
    speedup: float | None = None
    sol: float | None = None
    full: bool = True
    gpu_seconds: float = 0.0
    content_hash: str = ""  # of the spec and sources (``core.fleet.workbench.content_hash``)
    parents: tuple[int, ...] = ()  # parent_id first; a composite lists each of its members
    profile: str = ""  # the model profile of its agent when it was made ("" for seeds and tuners)
    gain: float = 0.0  # the best-SOL gain the planner counts for it (core.fleet.record): > 0 only for a new best
    node: str = ""  # where it was evaluated: the host or Ray node ("" before it was, or when nothing ran)
    gpu: int | None = None  # the GPU index there (None on the CPU)
    device_model: str = ""  # e.g. "NVIDIA H200", or "cpu"
    verified: str = ""  # "" not re-verified with upstream's full rules, else "passed: ..." or "failed: ..."

    @property
    def passed(self) -> bool:
        return self.status == "PASSED"

    @property
    def composite(self) -> bool:
        """Assembled by the run from frontier members (``core.fleet.composite``), not written by an agent."""
        return len(self.parents) > 1


@dataclass(frozen=True)
class PassingTimes:
    """A passing attempt's median time per workload, as a frontier reads it (``Queries.passing_times``)."""

    attempt_id: int
    times_ms: dict[int, float]
    full: bool
    speedup: float | None
    composite: bool = False
    spreads: dict[int, float] = field(default_factory=dict)  # the timing's relative spread per workload


# How a model call's HTTP try ended: the first three are answers (the endpoint is up), the last two are not.
ANSWER_OUTCOMES = ("answer", "tool_calls", "garbage")
CALL_OUTCOMES = ANSWER_OUTCOMES + ("error", "retry")


@dataclass(frozen=True)
class LlmCall:
    """One HTTP try of a model call as it returned: what it cost, how long it took and how it ended.

    outcome: "answer" (text), "tool_calls", "garbage" (an answer the agent could not use), "error" (the call gave
    up) or "retry" (it is tried again). Tokens are the endpoint's usage, else an estimate (``tokens_estimated``):
    ``cached_tokens`` are part of ``prompt_tokens``, ``reasoning_tokens`` part of ``completion_tokens``, and
    ``cached_dollars`` and ``reasoning_dollars`` part of ``dollars`` (``core.llm.usage.cost_parts``).
    """

    outcome: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_estimated: bool = False
    dollars: float = 0.0
    latency_s: float = 0.0
    detail: str = ""
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cached_dollars: float = 0.0
    reasoning_dollars: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def answered(self) -> bool:
        return self.outcome in ANSWER_OUTCOMES


@dataclass(frozen=True)
class LlmUsage:
    """Every model call of a run summed (``Queries.llm_usage``): tokens as ``LlmCall`` counts them, and dollars."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    dollars: float = 0.0
    cached_dollars: float = 0.0
    reasoning_dollars: float = 0.0
    estimated: bool = False  # some counts are estimates (an endpoint reported no usage)


@dataclass(frozen=True)
class LlmCallRow:
    id: int
    ts: float
    agent_id: int | None
    problem_id: int | None
    call: LlmCall
    profile: str = ""  # the model profile it went to ("" before profiles were recorded, or the planner's)
    model: str = ""


@dataclass(frozen=True)
class DeviceUsage:
    """The finished attempts evaluated on one device (``Queries.device_usage``)."""

    node: str
    gpu: int | None
    device_model: str
    attempts: int
    gpu_seconds: float

    @property
    def device_word(self) -> str:
        return device_word("cpu" if self.gpu is None else "cuda")

    def describe(self) -> str:
        where = f"GPU {self.gpu}" if self.gpu is not None else "cpu"
        model = f" ({self.device_model})" if self.device_model and self.device_model != "cpu" else ""
        return f"{self.node or '?'} {where}{model}"


@dataclass(frozen=True)
class ProfileUsage:
    """What the agents of one model profile did (``Queries.profile_usage``): their finished attempts with the
    best-SOL gain and GPU seconds those counted, and their model calls with what those cost."""

    profile: str
    attempts: int = 0
    sol_gain: float = 0.0
    gpu_seconds: float = 0.0
    calls: int = 0
    dollars: float = 0.0


# The event kind of the planner model's directives (core.fleet.directives); here so the UI reads it without the fleet.
DIRECTIVE = "directive"


@dataclass(frozen=True)
class EventRow:
    id: int
    ts: float
    kind: str  # log | decision | control | run | attempt | llm | DIRECTIVE
    agent_id: int | None
    problem_id: int | None
    message: str


@dataclass(frozen=True)
class NoteRow:
    """A short finding an agent recorded on the notes board of an op family."""

    id: int
    ts: float
    family: str
    agent_id: int | None
    problem_id: int | None
    text: str
    agent_name: str = ""
    problem_key: str = ""


@dataclass(frozen=True)
class ControlRow:
    id: int
    ts: float
    command: str
    target: str
    value: str
    applied_at: float | None
    result: str


@dataclass(frozen=True)
class MetricRow:
    ts: float
    fleet_mean_sol: float | None
    geomean_speedup: float | None
    gpu_busy: float | None
    queue_wait_s: float | None
    attempts: int
    tokens: int
    dollars: float
    active_problems: int
    # The time the devices ran kernels while work waited, over the time work wanted them (None: not measured;
    # ``gpu_kernel_note``: how it was measured, or why not), and what the held time went to (share of the wanted
    # time per ``core.evaluate.usage.HELD_LABELS`` key).
    gpu_kernel: float | None = None
    gpu_kernel_note: str = ""
    gpu_held: dict[str, float] = field(default_factory=dict)



def _row_of(table: str):
    """Turn what a row's parse raises on bad content into a StoreRowError naming ``table`` and the row."""
    def wrap(parse):
        @functools.wraps(parse)
        def parsed(r):
            try:
                return parse(r)
            except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
                if isinstance(exc, StoreRowError):
                    raise
                row_id = r["id"] if "id" in r.keys() else "?"
                raise StoreRowError(table, row_id, exc) from None
        return parsed
    return wrap


def _loads(text: str | None, default: Any) -> Any:
    return json.loads(text) if text else default


@_row_of("run")
def run_from_row(r) -> RunInfo:
    return RunInfo(r["created_at"], _loads(r["config_json"], {}), tuple(_loads(r["problem_paths_json"], [])),
                   r["device"], tuple(_loads(r["gpus_json"], [])), r["gpu_name"], r["state"], r["ended_at"])


@_row_of("problems")
def problem_from_row(r) -> ProblemRow:
    workloads = tuple(WorkloadInfo(**w) for w in _loads(r["workloads_json"], []))
    frontier = tuple(frontier_member_from_dict(m) for m in _loads(r["frontier_json"], []))
    return ProblemRow(r["id"], r["key"], r["name"], r["subset"], r["path"], r["op"], r["priority"], bool(r["paused"]),
                      bool(r["pinned"]), r["status"], r["best_attempt_id"], r["best_speedup"], r["best_sol"],
                      r["seed_attempt_id"], r["seed_speedup"], r["seed_sol"], r["attempts"], r["failures_in_row"],
                      r["since_improvement"], r["tokens"], r["dollars"], r["gpu_seconds"], r["wall_seconds"],
                      r["last_change_at"], workloads, frontier, r["baseline_model"], r["preparation_s"])


def frontier_member_to_dict(member: FrontierMember) -> dict[str, Any]:
    return {"attempt_id": member.attempt_id, "leads": list(member.leads), "lead_ms": list(member.lead_ms),
            "speedup": member.speedup, "full": member.full}


def frontier_member_from_dict(data: dict[str, Any]) -> FrontierMember:
    return FrontierMember(int(data["attempt_id"]), tuple(data["leads"]), tuple(data["lead_ms"]), data["speedup"],
                          bool(data["full"]))


@_row_of("agents")
def agent_from_row(r) -> AgentRow:
    return AgentRow(r["id"], r["name"], r["kind"], r["model"], r["state"], r["problem_id"], bool(r["paused"]),
                    r["attempts"], r["failures_in_row"], r["tokens"], r["dollars"], r["updated_at"], r["profile"])


@_row_of("attempts")
def attempt_from_row(r) -> AttemptRow:
    workloads = _loads(r["workloads_json"], None)
    return AttemptRow(r["id"], r["problem_id"], r["agent_id"], r["parent_id"], r["state"], r["created_at"],
                      r["finished_at"], r["language"], _loads(r["solution_json"], {}), r["diff"],
                      _loads(r["tunables_json"], {}), r["note"], tuple(workloads) if workloads is not None else None,
                      _loads(r["build_json"], None), _loads(r["verdict_json"], None), r["status"], r["reason"],
                      {int(k): v for k, v in _loads(r["times_json"], {}).items()}, r["speedup"], r["sol"],
                      bool(r["full"]), r["gpu_seconds"], r["content_hash"], tuple(_loads(r["parents_json"], [])),
                      r["profile"], r["gain"], r["node"], r["gpu"], r["device_model"], r["verified"])


@_row_of("llm_calls")
def llm_call_from_row(r) -> LlmCallRow:
    return LlmCallRow(r["id"], r["ts"], r["agent_id"], r["problem_id"],
                      LlmCall(r["outcome"], r["prompt_tokens"], r["completion_tokens"], bool(r["tokens_estimated"]),
                              r["dollars"], r["latency_s"], r["detail"], r["cached_tokens"], r["reasoning_tokens"],
                              r["cached_dollars"], r["reasoning_dollars"]), r["profile"], r["model"])


@_row_of("events")
def event_from_row(r) -> EventRow:
    return EventRow(r["id"], r["ts"], r["kind"], r["agent_id"], r["problem_id"], r["message"])


@_row_of("notes")
def note_from_row(r) -> NoteRow:
    return NoteRow(r["id"], r["ts"], r["family"], r["agent_id"], r["problem_id"], r["text"], r["agent_name"] or "",
                   r["problem_key"] or "")


@_row_of("controls")
def control_from_row(r) -> ControlRow:
    return ControlRow(r["id"], r["ts"], r["command"], r["target"], r["value"], r["applied_at"], r["result"])


@_row_of("metrics")
def metric_from_row(r) -> MetricRow:
    return MetricRow(r["ts"], r["fleet_mean_sol"], r["geomean_speedup"], r["gpu_busy"], r["queue_wait_s"],
                     r["attempts"], r["tokens"], r["dollars"], r["active_problems"], r["gpu_kernel"],
                     r["gpu_kernel_note"], {str(k): float(v) for k, v in _loads(r["gpu_held_json"], {}).items()})
