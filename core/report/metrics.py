"""Fleet metrics of a run: per problem its seed ("before") and best ("after") speedup and SOL score, and over the
fleet the geometric-mean speedup, how many problems beat the baseline (speedup > 1) or doubled it (> 2), and the
median and mean SOL score. The fleet's figures and which problems count in them are ``core.report.figures``'s (see
its docstring for the rule), the same the TUI's header, the run's metric samples and the planner show.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from core.report.figures import (busy_sample, counted_sol, counted_speedup, device_word, fleet_figures,
                                  problem_figures, subset_figures)
from core.roofline.sol import is_better
from core.store.model import AgentRow, AttemptRow, DeviceUsage, LlmUsage, MetricRow, ProblemRow, RunInfo
from core.store.queries import Queries


@dataclass(frozen=True)
class ProblemSummary:
    key: str
    name: str
    subset: str
    status: str
    attempts: int
    best_speedup: float | None
    best_sol: float | None
    seed_speedup: float | None
    seed_sol: float | None
    # The best's re-verification with upstream's 10 rounds (core.fleet.verify): "" not re-verified, else its outcome
    best_verified: str = ""
    best_by: str = ""  # the kind of its maker (``maker_kind``); "" without a best


@dataclass(frozen=True)
class FleetSummary:
    problems: int  # every problem of the run
    with_result: int  # problems with a speedup or a SOL score
    geomean_speedup: float | None  # over problems with a speedup; None when none has one
    beating_baseline: int  # speedup > 1
    share_beating: float  # beating_baseline / problems (0.0 for no problems)
    above_2x: int  # speedup > 2
    median_sol: float | None
    mean_sol: float | None
    attempts: int  # finished attempts of the run
    tokens: int
    dollars: float
    gpu_seconds: float


@dataclass(frozen=True)
class RunReport:
    """Everything a report shows: per problem rows, the fleet before (seeds) and after (bests), the run itself and
    the metric samples over time."""

    problems: list[ProblemSummary]
    before: FleetSummary
    after: FleetSummary
    run: RunInfo | None = None
    metrics: list[MetricRow] = field(default_factory=list)
    devices: list[DeviceUsage] = field(default_factory=list)  # where the attempts were evaluated
    progress: Progress | None = None  # the bests over time, from the attempts
    # problem key -> (workload index, why) of the workloads its attempts could not evaluate (UNAVAILABLE: on the
    # CPU the GPU-sized ones, a missing safetensors blob): its speedup and SOL are over the other workloads
    not_evaluated: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    # problem key -> (workload index, why) of the workloads whose T_b was taken in another machine state than the
    # run's start (core.evaluate.baseline.machine): their speedups are flagged, not comparable
    state_moved: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    llm: LlmUsage = field(default_factory=LlmUsage)  # every model call summed, cached and reasoning tokens apart

    @property
    def device_word(self) -> str:
        """What the run's devices are called in its figures (``core.report.figures.device_word``)."""
        return device_word(self.run)


@dataclass(frozen=True)
class BestChange:
    """A problem's best changed: at ``ts`` (the attempt's finish) it became ``attempt_id``'s figures."""

    ts: float
    problem: str
    attempt_id: int
    speedup: float
    sol: float | None


@dataclass(frozen=True)
class FleetPoint:
    """The fleet right after a best changed: the geomean of the problems' best speedups and the mean of their
    best SOL scores (``core.report.figures.fleet_figures``), over the problems with one."""

    ts: float
    geomean_speedup: float
    mean_sol: float | None
    with_speedup: int
    with_sol: int


@dataclass(frozen=True)
class Progress:
    changes: list[BestChange]
    fleet: list[FleetPoint]
    passing: int  # passing attempts read
    with_sol: int  # of which have an SOL score


def progress_over_time(attempts: Sequence[AttemptRow], keys: dict[int, str]) -> Progress:
    """Each problem's best over time, replayed from its attempts in the order they finished with the run's own
    rule (a full, passing attempt faster than the best so far: ``core.roofline.sol.is_better``) on the figures
    the run recorded for them (``core.roofline.sol.overall_figures``); and after every change, the fleet's."""
    finished = sorted((a for a in attempts if a.state == "done" and a.finished_at is not None),
                      key=lambda a: (a.finished_at, a.id))
    best: dict[int, tuple[float, float | None]] = {}
    changes, fleet = [], []
    passing = with_sol = 0
    for attempt in finished:
        if not attempt.passed:
            continue
        passing += 1
        with_sol += attempt.sol is not None
        old = best.get(attempt.problem_id)
        if not attempt.full or not is_better(old[0] if old else None, attempt.speedup):
            continue
        best[attempt.problem_id] = (attempt.speedup, attempt.sol)
        changes.append(BestChange(attempt.finished_at, keys.get(attempt.problem_id, str(attempt.problem_id)),
                                  attempt.id, attempt.speedup, attempt.sol))
        figures = fleet_figures(best.values())
        if figures.geomean_speedup is None:  # not for a speedup is_better took (T_b / T_k, above 0)
            continue
        fleet.append(FleetPoint(attempt.finished_at, figures.geomean_speedup, figures.mean_sol,
                                figures.with_speedup, figures.with_sol))
    return Progress(changes, fleet, passing, with_sol)


def problem_summary(row: ProblemRow, best: AttemptRow | None, agents: dict[int, AgentRow]) -> ProblemSummary:
    return ProblemSummary(row.key, row.name, row.subset, row.status, row.attempts, row.best_speedup, row.best_sol,
                          row.seed_speedup, row.seed_sol, best.verified if best is not None else "",
                          maker_kind(best, agents) if best is not None else "")


def problem_summaries(reader: Queries) -> list[ProblemSummary]:
    summaries = []
    agents = {a.id: a for a in reader.agents()}
    for row in reader.problems():
        best = reader.attempt(row.best_attempt_id) if row.best_attempt_id is not None else None
        summaries.append(problem_summary(row, best, agents))
    return summaries


def maker_kind(row: AttemptRow, agents: dict[int, AgentRow]) -> str:
    """Who made an attempt: its agent's kind ("tuner", "compiler", "llm", ...), else "composite" (assembled by the
    run from frontier members) or "seed"."""
    agent = agents.get(row.agent_id) if row.agent_id is not None else None
    return agent.kind if agent is not None else "composite" if row.composite else "seed"


def first_calls_s(verdict: dict[str, Any] | None) -> float | None:
    """The seconds of each workload's first call, summed (the worker's "first_call" phase): where a compiled
    solution compiles, autotunes and captures for each shape, so a compiler candidate's build time. None when the
    verdict has none."""
    workloads = (verdict or {}).get("workloads") or ()
    found = [w["phase_s"]["run.first_call"] for w in workloads if isinstance(w, dict)
             and isinstance(w.get("phase_s"), dict) and isinstance(w["phase_s"].get("run.first_call"), (int, float))]
    return float(sum(found)) if found else None


def bests_by_kind(problems: Sequence[ProblemSummary]) -> list[tuple[str, int]]:
    """How many problems' bests each kind of maker holds (the compiler agents' apart from the kernels agents wrote
    or tuned), most first."""
    counts: dict[str, int] = {}
    for problem in problems:
        if problem.best_by:
            counts[problem.best_by] = counts.get(problem.best_by, 0) + 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def bests_by_line(problems: Sequence[ProblemSummary]) -> str:
    """"bests by: compiler 12, tuner 3, seed 5" ("" without a best): the compiler's bests are the reference
    compiled, no hand-written kernel."""
    counts = bests_by_kind(problems)
    return "bests by: " + ", ".join(f"{kind} {n}" for kind, n in counts) if counts else ""


def verified_label(p: ProblemSummary) -> str:
    """The report's "re-verified" column: yes, no (not yet), or — without a best."""
    if p.best_speedup is None and p.best_sol is None:
        return "—"
    return "yes" if p.best_verified.startswith("passed") else "no"


def fleet_summary(problems: Sequence[ProblemSummary], totals: dict[str, float] | None = None, *,
                  seed: bool = False) -> FleetSummary:
    """The fleet over ``problems`` (``core.report.figures.problem_figures``): from their best results, or with
    ``seed`` from their seeds'."""
    figures = problem_figures(problems, seed=seed)
    totals = totals or {}
    return FleetSummary(
        problems=figures.problems,
        with_result=figures.with_result,
        geomean_speedup=figures.geomean_speedup,
        beating_baseline=figures.beating_baseline,
        share_beating=figures.share_beating,
        above_2x=figures.above_2x,
        median_sol=figures.median_sol,
        mean_sol=figures.mean_sol,
        attempts=int(totals.get("attempts", 0)),
        tokens=int(totals.get("tokens", 0)),
        dollars=float(totals.get("dollars", 0.0)),
        gpu_seconds=float(totals.get("gpu_seconds", 0.0)),
    )


def summarize(reader: Queries, *, seed: bool = False) -> tuple[list[ProblemSummary], FleetSummary]:
    """Per problem rows and the fleet summary of the best results (``seed=True``: of the seeds, "before").
    The totals (attempts, tokens, dollars, GPU seconds) are the run's in both."""
    problems = problem_summaries(reader)
    return problems, fleet_summary(problems, reader.totals(), seed=seed)


def build_report(reader: Queries) -> RunReport:
    problems = problem_summaries(reader)
    totals = reader.totals()
    keys = {row.id: row.key for row in reader.problems()}
    return RunReport(problems, fleet_summary(problems, totals, seed=True), fleet_summary(problems, totals),
                     reader.run_info(), reader.metrics(), reader.device_usage(),
                     progress_over_time(reader.attempts(state="done"), keys), not_evaluated(reader),
                     state_moved(reader), reader.llm_usage())


def state_moved(reader: Queries) -> dict[str, list[tuple[int, str]]]:
    """Per problem, the workloads whose T_b stands in another machine state than the start that measured or
    looked it up (``WorkloadInfo.state_moved``)."""
    out: dict[str, list[tuple[int, str]]] = {}
    for row in reader.problems():
        moved = [(w.index, w.state_moved) for w in row.workloads if w.state_moved]
        if moved:
            out[row.key] = moved
    return out


def not_evaluated(reader: Queries) -> dict[str, list[tuple[int, str]]]:
    """Per problem, the workloads its latest evaluated attempt reports UNAVAILABLE, with the reason recorded."""
    out: dict[str, list[tuple[int, str]]] = {}
    for row in reader.problems():
        latest = next((a for a in reversed(reader.attempts(row.id, state="done", limit=20)) if a.verdict), None)
        if latest is None:
            continue
        skipped = [(int(w["index"]), str(w.get("reason", ""))) for w in latest.verdict.get("workloads", [])
                   if w.get("status") == "UNAVAILABLE"]
        if skipped:
            out[row.key] = skipped
    return out


def report_to_dict(report: RunReport) -> dict[str, Any]:
    """A JSON-ready form of the report (non-finite numbers become None)."""
    run = report.run
    return _finite({
        "run": None if run is None else {"created_at": run.created_at, "state": run.state, "device": run.device,
                                         "gpus": list(run.gpus), "gpu_name": run.gpu_name,
                                         "ended_at": run.ended_at},
        "before": asdict(report.before),
        "after": asdict(report.after),
        "problems": [asdict(p) for p in report.problems],
        "subsets": {subset: asdict(figures) for subset, figures in subset_figures(report.problems).items()},
        "devices": [asdict(d) for d in report.devices],
        "not_evaluated": {key: [{"workload": i, "reason": why} for i, why in skipped]
                          for key, skipped in report.not_evaluated.items()},
        "state_moved": {key: [{"workload": i, "reason": why} for i, why in moved]
                        for key, moved in report.state_moved.items()},
        # The pool's own account since the run's last start (a resume starts a new pool).
        "pool": pool_to_dict(busy_sample(report.metrics)),
        "llm": asdict(report.llm),
    })


def llm_usage_line(usage: LlmUsage) -> str:
    """The model calls' cached and reasoning tokens with what they cost ("model tokens: 12,000 prompt, 3,000 of
    them cached ($0.0011); 4,000 completion, 2,500 of them reasoning ($0.0250)"); "" when there are none."""
    if not (usage.cached_tokens or usage.reasoning_tokens):
        return ""
    parts = [f"{usage.prompt_tokens:,} prompt" + (f", {usage.cached_tokens:,} of them cached "
                                                    f"({_dollars(usage.cached_dollars)})" if usage.cached_tokens
                                                    else ""),
             f"{usage.completion_tokens:,} completion" + (f", {usage.reasoning_tokens:,} of them reasoning "
                                                          f"({_dollars(usage.reasoning_dollars)})"
                                                          if usage.reasoning_tokens else "")]
    return ("model tokens: " + "; ".join(parts) + f"; {_dollars(usage.dollars)} in all"
            + (" (some estimated)" if usage.estimated else ""))


def _dollars(x: float) -> str:
    return f"${x:.4f}" if 0 < x < 0.01 else f"${x:.2f}"


def kernel_time_line(sample: MetricRow | None, device: str) -> str:
    """The devices' kernel time beside their busy fraction, from the sample whose busy fraction the run shows
    (``core.report.figures.busy_sample``): "GPU kernels running while work waited: 52% (how), held but idle 39%",
    or "GPU kernel time: not measured (why)"; "" without a sample."""
    from core.evaluate.usage import held_but_idle  # here: the package brings in the pool (0.2 s to import)

    if sample is None:
        return ""
    if sample.gpu_kernel is None:
        why = sample.gpu_kernel_note or "not recorded: an older kernelfleet ran the last start"
        return f"{device} kernel time: not measured ({why})"
    idle = held_but_idle(sample.gpu_busy, sample.gpu_kernel)
    return (f"{device} kernels running while work waited: {sample.gpu_kernel:.0%} ({sample.gpu_kernel_note})"
            + (f", held but idle {idle:.0%}" if idle is not None else ""))


def held_by_line(sample: MetricRow | None, device: str) -> str:
    """What the devices' held time went to ("GPU held by: timing 30%, ..."), "" when the sample has no account."""
    from core.evaluate.usage import held_by_text

    text = held_by_text(sample.gpu_held) if sample is not None else ""
    return f"{device} {text}" if text else ""


def pool_to_dict(sample: MetricRow | None) -> dict[str, Any] | None:
    """The pool's figures of the sample the run shows, for ``report_to_dict``; None without one."""
    from core.evaluate.usage import held_but_idle

    if sample is None:
        return None
    return {"busy": sample.gpu_busy, "kernels": sample.gpu_kernel, "kernel_note": sample.gpu_kernel_note,
            "held_but_idle": held_but_idle(sample.gpu_busy, sample.gpu_kernel), "held_by": dict(sample.gpu_held),
            "mean_queue_wait_s": sample.queue_wait_s, "at": sample.ts}


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def comparison_rows(before: FleetSummary, after: FleetSummary, speedup: Callable[[float | None], str],
                    sol: Callable[[float | None], str]) -> list[tuple[str, str, str]]:
    """The seed experiment's fleet metrics as (name, before, after), numbers formatted by the caller's functions."""
    def share(s: FleetSummary) -> str:
        return f"{s.beating_baseline}/{s.problems} ({s.share_beating * 100:.0f}%)"

    return [
        ("problems with a result", f"{before.with_result}/{before.problems}", f"{after.with_result}/{after.problems}"),
        ("geomean speedup", speedup(before.geomean_speedup), speedup(after.geomean_speedup)),
        ("beating the baseline", share(before), share(after)),
        ("above 2x", str(before.above_2x), str(after.above_2x)),
        ("median SOL", sol(before.median_sol), sol(after.median_sol)),
        ("mean SOL", sol(before.mean_sol), sol(after.mean_sol)),
    ]


# ---------------------------------------------------------------- the HTML report's drill-down and distributions


@dataclass(frozen=True)
class AttemptLine:
    """One attempt as a problem's attempts table shows it: the stored row, who made it and its part in the run."""

    row: AttemptRow
    agent: str  # the agent's name; "seed" for a seed, "composite" for one the run assembled from frontier members
    model: str  # the model profile it was made with, else its agent's model ("" for seeds and composites)
    role: str  # "seed", "best" or ""
    kind: str = ""  # its agent's kind ("compiler", "tuner", "llm", ...), else "seed" or "composite"

    @property
    def status(self) -> str:
        return self.row.status or ("pending" if self.row.state == "pending" else "no verdict")

    @property
    def counted_speedup(self) -> float | None:
        """The speedup the run compares bests by: a passing attempt's, on every workload (else None)."""
        row = self.row
        return counted_speedup(row.speedup) if row.passed and row.full else None


@dataclass(frozen=True)
class ProblemDrill:
    """A problem with every attempt made on it (oldest first), its seed and its best."""

    summary: ProblemSummary
    row: ProblemRow
    attempts: tuple[AttemptLine, ...]
    seed: AttemptRow | None
    best: AttemptRow | None

    @property
    def parameters(self) -> tuple[str, ...]:
        return tuner_parameters(self.attempts)

    @property
    def timed_workloads(self) -> tuple[int, ...]:
        """The workloads of the problem with a time in any attempt, or recorded with the problem."""
        indices = {w.index for w in self.row.workloads}
        for line in self.attempts:
            indices.update(line.row.times_ms)
        return tuple(sorted(indices))


def attempt_line(row: AttemptRow, agents: dict[int, AgentRow], problem: ProblemRow) -> AttemptLine:
    agent = agents.get(row.agent_id) if row.agent_id is not None else None
    kind = maker_kind(row, agents)
    name, model = (agent.name, row.profile or agent.model) if agent is not None else (kind, "")
    role = "best" if row.id == problem.best_attempt_id else "seed" if row.id == problem.seed_attempt_id else ""
    return AttemptLine(row, name, model, role, kind)


def problem_drills(reader: Queries) -> list[ProblemDrill]:
    """Every problem of the run with its attempts, in the order of the problems table."""
    agents = {a.id: a for a in reader.agents()}
    by_problem: dict[int, list[AttemptRow]] = {}
    for row in reader.attempts():
        by_problem.setdefault(row.problem_id, []).append(row)
    drills = []
    for problem in reader.problems():
        rows = by_problem.get(problem.id, [])
        by_id = {r.id: r for r in rows}
        best = by_id.get(problem.best_attempt_id) if problem.best_attempt_id is not None else None
        drills.append(ProblemDrill(problem_summary(problem, best, agents), problem,
                                   tuple(attempt_line(r, agents, problem) for r in rows),
                                   by_id.get(problem.seed_attempt_id) if problem.seed_attempt_id is not None
                                   else None, best))
    return drills


def tuner_parameters(lines: Sequence[AttemptLine]) -> tuple[str, ...]:
    """The names of the tunables the attempts set, in the order they first appear."""
    names: dict[str, None] = {}
    for line in lines:
        for name in line.row.tunables:
            names.setdefault(str(name), None)
    return tuple(names)


@dataclass(frozen=True)
class ParameterPoint:
    """An attempt that set a tunable: its value and the speedup the run counts for it (None: it failed, or was
    evaluated on part of the workloads only)."""

    attempt_id: int
    value: Any
    speedup: float | None
    status: str


def parameter_points(lines: Sequence[AttemptLine], name: str) -> list[ParameterPoint]:
    return [ParameterPoint(line.row.id, line.row.tunables[name], line.counted_speedup, line.status)
            for line in lines if name in line.row.tunables and line.row.state == "done"]


def ordered_values(values: Sequence[Any]) -> list[Any]:
    """A parameter's distinct values in axis order: numbers ascending, else as text ascending (numbers first)."""
    distinct = list({json_key(v): v for v in values}.values())
    numbers = sorted((v for v in distinct if isinstance(v, (int, float)) and not isinstance(v, bool)))
    others = sorted((v for v in distinct if not (isinstance(v, (int, float)) and not isinstance(v, bool))), key=str)
    return [*numbers, *others]


def json_key(value: Any) -> str:
    """A hashable identity of a tunable's value (values come from JSON: numbers, text, booleans, lists)."""
    return f"{type(value).__name__}:{value!r}"


@dataclass(frozen=True)
class SpeedupBin:
    """Attempts whose speedup s is in [low, high), counted per problem (problem key -> count)."""

    low: float
    high: float
    counts: tuple[tuple[str, int], ...]

    @property
    def total(self) -> int:
        return sum(n for _, n in self.counts)


def speedup_distribution(drills: Sequence[ProblemDrill], per_octave: int = 2) -> list[SpeedupBin]:
    """The speedups the run counted (``AttemptLine.counted_speedup``) of every attempt, in bins of equal width on a
    log scale (``per_octave`` bins per doubling) from the lowest to the highest; per bin, how many of each
    problem's attempts fall in it. Empty when no attempt has a counted speedup."""
    values = [(d.summary.key, s) for d in drills for s in (line.counted_speedup for line in d.attempts)
              if s is not None]
    if not values:
        return []
    first = math.floor(math.log2(min(s for _, s in values)) * per_octave)
    last = math.floor(math.log2(max(s for _, s in values)) * per_octave)
    bins = []
    for k in range(first, last + 1):
        low, high = 2.0 ** (k / per_octave), 2.0 ** ((k + 1) / per_octave)
        counts: dict[str, int] = {}
        for key, s in values:
            if math.floor(math.log2(s) * per_octave) == k:
                counts[key] = counts.get(key, 0) + 1
        bins.append(SpeedupBin(low, high, tuple(counts.items())))
    return bins


@dataclass(frozen=True)
class SubsetSol:
    """A subset's problems' best SOL scores and their mean and median as the fleet summary counts them."""

    subset: str
    problems: int
    sols: tuple[tuple[str, float], ...]  # problem key -> best SOL, for those with one
    mean_sol: float | None
    median_sol: float | None


def subset_sols(problems: Sequence[ProblemSummary]) -> list[SubsetSol]:
    """Per subset (in the order subsets first appear): ``fleet_summary`` over its problems."""
    subsets: dict[str, list[ProblemSummary]] = {}
    for p in problems:
        subsets.setdefault(p.subset, []).append(p)
    out = []
    for subset, members in subsets.items():
        summary = fleet_summary(members)
        sols = tuple((p.key, p.best_sol) for p in members if counted_sol(p.best_sol) is not None)
        out.append(SubsetSol(subset, len(members), sols, summary.mean_sol, summary.median_sol))
    return out
