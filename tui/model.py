"""The watcher's model: frozen dataclasses built from a run's store and pure functions over them (sorting,
filtering, formatting rows, SOL bars, sparklines, histograms, side-by-side diffs). No Textual here: everything in
this module is plain data in, plain data out, so it is tested without an app."""

from __future__ import annotations

import difflib
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from core.store import model
from core.config.schema import DEFAULT_PROFILE
from core.roofline.sol import geomean
from core.store.model import AgentRow, AttemptRow, ControlRow, EventRow, LlmCall, LlmCallRow, MetricRow, ProblemRow, \
    RunInfo
from core.store.queries import Queries

Clock = Callable[[], float]

DONE_STATUSES = ("done", "plateaued", "over budget", "failed")  # core.planner.model: no agent works on these
METRICS_KEPT = 120  # metric samples kept for the sparkline
CONTROLS_KEPT = 50


# ---------------------------------------------------------------- the snapshot


@dataclass(frozen=True)
class Totals:
    """Finished attempts and their GPU seconds; tokens and dollars of every model call (as each returned)."""

    attempts: int = 0
    tokens: int = 0
    dollars: float = 0.0
    gpu_seconds: float = 0.0
    estimated: bool = False  # some tokens are estimates (the endpoint reported no usage)

    def plus(self, attempt: AttemptRow) -> Totals:
        return replace(self, attempts=self.attempts + 1, gpu_seconds=self.gpu_seconds + attempt.gpu_seconds)

    def plus_call(self, call: LlmCall) -> Totals:
        return replace(self, tokens=self.tokens + call.tokens, dollars=self.dollars + call.dollars,
                       estimated=self.estimated or call.tokens_estimated)


@dataclass(frozen=True)
class Endpoint:
    """The LLM endpoint as the run's call records show it."""

    calls: int = 0
    failing: int = 0  # failed tries since the last answer
    last_error: str = ""
    last_ts: float | None = None

    def after(self, row: LlmCallRow) -> Endpoint:
        if row.call.answered:
            return Endpoint(self.calls + 1, 0, "", row.ts)
        return Endpoint(self.calls + 1, self.failing + 1, row.call.detail, row.ts)


@dataclass(frozen=True)
class Snapshot:
    """What the watcher shows at one moment."""

    run_name: str
    run: RunInfo | None
    problems: tuple[ProblemRow, ...] = ()
    agents: tuple[AgentRow, ...] = ()
    metrics: tuple[MetricRow, ...] = ()
    controls: tuple[ControlRow, ...] = ()
    totals: Totals = Totals()
    now: float = 0.0
    endpoint: Endpoint = Endpoint()

    # Lookups by key and id, built once per snapshot: formatting a log line looks its agent and problem up.
    @cached_property
    def _by_key(self) -> dict[str, ProblemRow]:
        return {p.key: p for p in self.problems}

    @cached_property
    def _by_id(self) -> dict[int, ProblemRow]:
        return {p.id: p for p in self.problems}

    @cached_property
    def _agent_names(self) -> dict[int, str]:
        return {a.id: a.name for a in self.agents}

    def problem(self, key: str) -> ProblemRow | None:
        return self._by_key.get(key)

    def problem_by_id(self, problem_id: int | None) -> ProblemRow | None:
        return self._by_id.get(problem_id)

    def agents_on(self, problem_id: int) -> tuple[AgentRow, ...]:
        return tuple(a for a in self.agents if a.problem_id == problem_id)

    def agent_name(self, agent_id: int | None) -> str:
        name = self._agent_names.get(agent_id)
        return name if name is not None else "—" if agent_id is None else f"#{agent_id}"


@dataclass(frozen=True)
class Delta:
    """What one poll brought that is not part of the snapshot's state: new events, attempts that were added or
    finished, and controls the orchestrator has applied since the last poll."""

    events: tuple[EventRow, ...] = ()
    attempts: tuple[AttemptRow, ...] = ()
    applied: tuple[ControlRow, ...] = ()


class Poller:
    """Reads a run incrementally: the append-only tables (attempts, events, metrics, controls) through since-id
    cursors; the small mutable tables (problems, agents) whole. ``poll()`` returns the next snapshot and delta."""

    def __init__(self, reader: Queries, run_name: str, clock: Clock | None = None, event_limit: int = 500):
        self.reader = reader
        self.run_name = run_name
        self.clock = clock or time.time
        self.event_limit = event_limit
        self.attempt_cursor = 0
        self.event_cursor = 0
        self.metric_ts = 0.0
        self.control_cursor = 0
        self.call_cursor = 0
        self.pending_attempts: set[int] = set()
        self.pending_controls: set[int] = set()
        self.snapshot = Snapshot(run_name, None, now=self.clock())
        self.first = True
        self._rows: dict[tuple[str, int], tuple] = {}  # (table, id) -> the raw row last turned into a dataclass
        self._objects: dict[tuple[str, int], object] = {}

    def _table(self, table: str, convert) -> tuple:
        """Every row of a small mutable table; only rows whose raw values changed are converted again."""
        out = []
        for raw in self.reader.conn.execute(f"SELECT * FROM {table} ORDER BY id"):
            values = tuple(raw)
            key = (table, values[0])
            if self._rows.get(key) != values:
                self._rows[key] = values
                self._objects[key] = convert(raw)
            out.append(self._objects[key])
        return tuple(out)

    def poll(self) -> tuple[Snapshot, Delta]:
        r = self.reader
        run = r.run_info()
        problems = self._table("problems", model.problem_from_row)
        agents = self._table("agents", model.agent_from_row)
        totals = self.snapshot.totals
        # Attempts: new ones since the cursor, plus the ones still pending at the last poll.
        changed: list[AttemptRow] = []
        for attempt_id in sorted(self.pending_attempts):
            row = r.attempt(attempt_id)
            if row is not None and row.state == "done":
                self.pending_attempts.discard(attempt_id)
                totals = totals.plus(row)
                changed.append(row)
        for row in r.attempts(since_id=self.attempt_cursor):
            self.attempt_cursor = max(self.attempt_cursor, row.id)
            if row.state == "done":
                totals = totals.plus(row)
            else:
                self.pending_attempts.add(row.id)
            changed.append(row)
        endpoint = self.snapshot.endpoint
        for call in r.llm_calls(since_id=self.call_cursor):
            self.call_cursor = call.id
            totals = totals.plus_call(call.call)
            endpoint = endpoint.after(call)
        events = tuple(r.events(since_id=self.event_cursor, limit=self.event_limit))
        if events:
            self.event_cursor = events[-1].id
        new_metrics = r.metrics(since_ts=self.metric_ts)
        metrics = self.snapshot.metrics
        if new_metrics:
            self.metric_ts = new_metrics[-1].ts
            metrics = (metrics + tuple(new_metrics))[-METRICS_KEPT:]
        controls, applied = self._controls()
        self.snapshot = Snapshot(self.run_name, run, problems, agents, metrics, controls, totals, self.clock(),
                                 endpoint)
        self.first = False
        return self.snapshot, Delta(events, tuple(changed), applied)

    def _controls(self) -> tuple[tuple[ControlRow, ...], tuple[ControlRow, ...]]:
        conn = self.reader.conn
        rows = [model.control_from_row(c) for c in conn.execute(
            "SELECT * FROM controls WHERE id > ? OR id IN (%s) ORDER BY id"
            % ",".join(str(i) for i in sorted(self.pending_controls) or [0]), (self.control_cursor,))]
        known = {c.id: c for c in self.snapshot.controls}
        applied = []
        for c in rows:
            self.control_cursor = max(self.control_cursor, c.id)
            if c.applied_at is None:
                self.pending_controls.add(c.id)
            else:
                if c.id in self.pending_controls and not self.first:
                    applied.append(c)
                self.pending_controls.discard(c.id)
            known[c.id] = c
        controls = tuple(known[i] for i in sorted(known))[-CONTROLS_KEPT:]
        return controls, tuple(applied)


def load_snapshot(reader: Queries, run_name: str, clock: Clock | None = None) -> Snapshot:
    return Poller(reader, run_name, clock).poll()[0]


# ---------------------------------------------------------------- formatting


def fmt_x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def fmt_sol(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 100:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.3f}"
    return f"{value:.4f}"


def fmt_count(n: float) -> str:
    n = float(n)
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{int(n)}"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


def fmt_ago(ts: float | None, now: float) -> str:
    """A short age: "12s", "5m", "3h", "2d" ("—" for none)."""
    if ts is None:
        return "—"
    age = max(0.0, now - ts)
    if age >= 100 * 86400:
        return ">99d"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if age >= size:
            return f"{int(age // size)}{unit}"
    return f"{int(age)}s"


_EIGHTHS = " ▏▎▍▌▋▊▉"


def sol_bar(sol: float | None, width: int = 8) -> str:
    """A SOL score in [0, 1] as a bar of ``width`` cells with eighth-cell resolution, padded with spaces."""
    if sol is None or not math.isfinite(sol):
        return " " * width
    eighths = round(min(1.0, max(0.0, sol)) * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (_EIGHTHS[part] if part else "")
    return text.ljust(width)


_SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float | None], width: int = 20) -> str:
    """The last ``width`` values as block characters, scaled to their own min and max (gaps for None)."""
    values = list(values)[-width:]
    real = [v for v in values if v is not None and math.isfinite(v)]
    if not real:
        return ""
    lo, hi = min(real), max(real)
    span = hi - lo
    out = []
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(" ")
        else:
            out.append(_SPARK[int((v - lo) / span * (len(_SPARK) - 1)) if span > 0 else len(_SPARK) // 2])
    return "".join(out)


def histogram(values: Iterable[float | None], edges: Sequence[float], width: int = 30,
              label: Callable[[float, float], str] | None = None) -> list[str]:
    """Text bars counting ``values`` in the bins between consecutive ``edges`` (the last bin is closed; values
    beyond the edges fall in the first or last bin)."""
    real = [v for v in values if v is not None and math.isfinite(v)]
    counts = [0] * (len(edges) - 1)
    for v in real:
        i = next((i for i in range(len(counts)) if v < edges[i + 1]), len(counts) - 1)
        counts[max(0, i)] += 1
    top = max(counts, default=0) or 1
    label = label or (lambda a, b: f"{a:.1f}–{b:.1f}")
    labels = [label(edges[i], edges[i + 1]) for i in range(len(counts))]
    lw = max((len(s) for s in labels), default=0)
    return [f"{labels[i]:>{lw}} │{'█' * round(c / top * width):<{width}} {c}" for i, c in enumerate(counts)]


SOL_EDGES = tuple(i / 10 for i in range(11))
SPEEDUP_EDGES = (0.0, 0.5, 0.9, 1.1, 1.5, 2.0, 3.0, 5.0, 10.0, math.inf)


def speedup_label(a: float, b: float) -> str:
    return f"≥{a:g}x" if math.isinf(b) else f"{a:g}–{b:g}x"


# ---------------------------------------------------------------- the header


def done_count(problems: Iterable[ProblemRow]) -> int:
    return sum(p.status in DONE_STATUSES for p in problems)


def header_lines(s: Snapshot) -> list[str]:
    run = s.run
    state = run.state if run else "?"
    end = run.ended_at if run and run.ended_at else s.now
    elapsed = fmt_duration(end - run.created_at) if run else "—"
    active = sum(p.status == "active" for p in s.problems)
    latest = s.metrics[-1] if s.metrics else None
    busy = "—" if latest is None or latest.gpu_busy is None else f"{latest.gpu_busy * 100:.0f}%"
    sols = [p.best_sol for p in s.problems if p.best_sol is not None]
    mean_sol = latest.fleet_mean_sol if latest and latest.fleet_mean_sol is not None else (
        sum(sols) / len(sols) if sols else None)
    speedups = [p.best_speedup for p in s.problems if p.best_speedup and p.best_speedup > 0]
    geo = latest.geomean_speedup if latest and latest.geomean_speedup is not None else (
        geomean(speedups) if speedups else None)
    spark = sparkline([m.fleet_mean_sol for m in s.metrics], 16)
    line1 = (f"{s.run_name} [{state}] {elapsed} · problems {active} active, {done_count(s.problems)} done "
             f"/ {len(s.problems)} · attempts {s.totals.attempts}")
    llm = endpoint_text(s)
    tokens = ("~" if s.totals.estimated else "") + fmt_count(s.totals.tokens)
    device = "CPU" if run is not None and run.device == "cpu" else "GPU"  # the busy fraction is of the run's devices
    line2 = (f"{device} {busy} · {tokens} tok ${s.totals.dollars:.2f}{' · ' + llm if llm else ''} · "
             f"SOL {fmt_sol(mean_sol)} {spark} · geomean {fmt_x(geo)}")
    return [line1, line2]


def endpoint_text(s: Snapshot, error_chars: int = 40) -> str:
    """The LLM endpoint's state: "llm ok", "llm retrying (N failed): ERROR" or "llm down: ERROR" (down once the
    run has stopped agents after failing tries); "" before any model call."""
    e = s.endpoint
    if not e.calls:
        return ""
    if not e.failing:
        return "llm ok"
    error = e.last_error if len(e.last_error) <= error_chars else e.last_error[:error_chars - 1] + "…"
    if any(a.state == "stopped" for a in s.agents):
        return f"llm down: {error}"
    return f"llm retrying ({e.failing} failed): {error}"


def control_line(c: ControlRow) -> str:
    what = f"{c.command} {c.target} {c.value}".strip()
    return f"{what}: {c.result or 'applied'}" if c.applied_at is not None else f"{what}: pending"


# ---------------------------------------------------------------- the problem grid


@dataclass(frozen=True)
class SortKey:
    name: str  # shown in the grid's title
    key: Callable[[ProblemRow], object]
    descending: bool


def _num(v: float | None) -> float:
    return -math.inf if v is None else v


SORTS: tuple[SortKey, ...] = (
    SortKey("key", lambda p: p.key, False),
    SortKey("priority", lambda p: (p.priority, not p.paused), True),
    SortKey("status", lambda p: (p.status, p.key), False),
    SortKey("attempts", lambda p: p.attempts, True),
    SortKey("speedup", lambda p: _num(p.best_speedup), True),
    SortKey("SOL", lambda p: _num(p.best_sol), True),
    SortKey("last change", lambda p: _num(p.last_change_at), True),
)


def sort_problems(problems: Iterable[ProblemRow], sort: int) -> list[ProblemRow]:
    spec = SORTS[sort % len(SORTS)]
    rows = sorted(problems, key=lambda p: p.key)  # a stable tie-break by key
    return sorted(rows, key=spec.key, reverse=spec.descending)


def filter_problems(problems: Iterable[ProblemRow], text: str) -> list[ProblemRow]:
    """Problems whose key or status contains every word of ``text`` (case-insensitive)."""
    words = text.lower().split()
    return [p for p in problems if all(w in p.key.lower() or w in p.status.lower() for w in words)]


GRID_COLUMNS = (("key", "problem"), ("subset", "subset"), ("priority", "pri"), ("status", "status"),
                ("agents", "ag"), ("attempts", "att"), ("speedup", "best"), ("sol", "SOL"), ("change", "chg"))


def status_text(p: ProblemRow) -> str:
    """The status, "(p)" when paused but not yet shown as such, "*" when pinned."""
    return p.status + (" (p)" if p.paused and p.status != "paused" else "") + ("*" if p.pinned else "")


def problem_cells(p: ProblemRow, agents: int, now: float, bar_width: int = 8) -> tuple[str, ...]:
    """One grid row as plain strings, in GRID_COLUMNS order."""
    return (p.key, p.subset, f"{p.priority:+d}" if p.priority else "0", status_text(p), str(agents) if agents else "",
            str(p.attempts), fmt_x(p.best_speedup), f"{sol_bar(p.best_sol, bar_width)} {fmt_sol(p.best_sol)}",
            fmt_ago(p.last_change_at, now))


def grid_rows(s: Snapshot, sort: int, filter_text: str) -> list[tuple[str, tuple[str, ...]]]:
    """(row key, cells) for every shown problem, in display order."""
    counts: dict[int, int] = {}
    for a in s.agents:
        if a.problem_id is not None:
            counts[a.problem_id] = counts.get(a.problem_id, 0) + 1
    rows = sort_problems(filter_problems(s.problems, filter_text), sort)
    return [(p.key, problem_cells(p, counts.get(p.id, 0), s.now)) for p in rows]


# ---------------------------------------------------------------- agents


AGENT_COLUMNS = ("agent", "kind", "state", "problem", "att", "fails", "tokens", "$")


def agent_cells(a: AgentRow, s: Snapshot) -> tuple[str, ...]:
    p = s.problem_by_id(a.problem_id)
    state = a.state + (" (paused)" if a.paused and a.state != "paused" else "")
    profile = f" [{a.profile}]" if a.profile and a.profile != DEFAULT_PROFILE else ""  # with several profiles
    return (a.name, a.kind + profile + (f" {a.model}" if a.model else ""), state, p.key if p else "—", str(a.attempts),
            str(a.failures_in_row), fmt_count(a.tokens), f"{a.dollars:.2f}")


# ---------------------------------------------------------------- problem detail


WORKLOAD_COLUMNS = ("#", "axes", "T_b ms", "T_sol ms", "best ms", "speedup", "SOL")


def _score(t_k: float, t_b: float, t_sol: float) -> float | None:
    if t_b <= t_sol or t_k < t_sol:
        return None
    return 1.0 / (1.0 + (t_k - t_sol) / (t_b - t_sol))


def workload_rows(p: ProblemRow, best: AttemptRow | None) -> list[tuple[str, ...]]:
    times = best.times_ms if best is not None else {}
    rows = []
    for w in p.workloads:
        t_k = times.get(w.index)
        speed = w.t_b_ms / t_k if t_k and w.t_b_ms else None
        score = _score(t_k, w.t_b_ms, w.t_sol_ms) if t_k and w.t_b_ms and w.t_sol_ms is not None else None
        rows.append((str(w.index), w.axes, fmt_ms(w.t_b_ms), fmt_ms(w.t_sol_ms), fmt_ms(t_k), fmt_x(speed),
                     fmt_sol(score)))
    return rows


ATTEMPT_COLUMNS = ("id", "agent", "status", "speedup", "SOL", "took", "note")


def attempt_status(a: AttemptRow) -> str:
    return a.status or a.state


def attempt_cells(a: AttemptRow, s: Snapshot) -> tuple[str, ...]:
    took = f"{a.finished_at - a.created_at:.1f}s" if a.finished_at else "…"
    note = a.note or a.reason
    return (str(a.id), s.agent_name(a.agent_id), attempt_status(a), fmt_x(a.speedup), fmt_sol(a.sol), took,
            note.splitlines()[0][:60] if note else "")


def problem_summary_line(p: ProblemRow, s: Snapshot) -> str:
    agents = ", ".join(a.name for a in s.agents_on(p.id)) or "none"
    flags = " ".join(f for f, on in (("paused", p.paused), ("pinned", p.pinned)) if on)
    return (f"{p.key} [{p.status}{', ' + flags if flags else ''}] priority {p.priority:+d} · agents {agents}\n"
            f"best {fmt_x(p.best_speedup)} SOL {fmt_sol(p.best_sol)} (seed {fmt_x(p.seed_speedup)} SOL "
            f"{fmt_sol(p.seed_sol)}) · {p.attempts} attempts, {p.failures_in_row} failing in a row · "
            f"{fmt_count(p.tokens)} tok ${p.dollars:.2f} · {p.gpu_seconds:.1f} GPU s")


def event_line(e: EventRow, s: Snapshot, with_problem: bool = True) -> str:
    stamp = time.strftime("%H:%M:%S", time.gmtime(e.ts))  # UTC: the same on every machine
    who = s.agent_name(e.agent_id) if e.agent_id is not None else e.kind
    where = ""
    if with_problem and e.problem_id is not None:
        p = s.problem_by_id(e.problem_id)
        where = f" {p.key}" if p else f" #{e.problem_id}"
    return f"{stamp} {who}{where}: {e.message}"


# ---------------------------------------------------------------- diffs


def attempt_title(a: AttemptRow, index: int, count: int, s: Snapshot) -> str:
    parent = f" ← #{a.parent_id}" if a.parent_id else ""
    where = f" · on {a.node} " + (f"GPU {a.gpu}" if a.gpu is not None else "cpu") if a.node else ""
    return (f"attempt #{a.id}{parent} ({index + 1}/{count}) · {s.agent_name(a.agent_id)} · {attempt_status(a)} · "
            f"speedup {fmt_x(a.speedup)} · SOL {fmt_sol(a.sol)}{where}")


@dataclass(frozen=True)
class SideRow:
    """One row of a side-by-side diff. kind: "file" (a file header), "hunk" (a hunk header), "equal", "replace",
    "delete", "insert"."""

    kind: str
    left_no: int | None = None
    left: str = ""
    right_no: int | None = None
    right: str = ""


def _hunk_start(header: str) -> tuple[int, int]:
    # "@@ -12,7 +12,9 @@ ..."
    try:
        parts = header.split()
        return abs(int(parts[1].split(",")[0])), int(parts[2].split(",")[0].lstrip("+"))
    except (IndexError, ValueError):
        return 1, 1


def side_by_side(diff: str) -> list[SideRow]:
    """A unified diff as side-by-side rows: each hunk's old and new lines aligned by difflib's opcodes."""
    rows: list[SideRow] = []
    old: list[str] = []
    new: list[str] = []
    start = (1, 1)

    def flush() -> None:
        if not old and not new:
            return
        matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
        lo, ro = start
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            for k in range(max(i2 - i1, j2 - j1)):
                li, ri = i1 + k, j1 + k
                has_l, has_r = li < i2, ri < j2
                rows.append(SideRow(tag if tag != "replace" or (has_l and has_r) else ("delete" if has_l else "insert"),
                                    lo + li if has_l else None, old[li] if has_l else "",
                                    ro + ri if has_r else None, new[ri] if has_r else ""))
        old.clear()
        new.clear()

    lines = diff.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            flush()
            a, b = line[4:].strip(), lines[i + 1][4:].strip()
            rows.append(SideRow("file", left=a, right=b))
            i += 2
            continue
        if line.startswith("@@"):
            flush()
            start = _hunk_start(line)
            rows.append(SideRow("hunk", left=line, right=""))
        elif line.startswith("-"):
            old.append(line[1:])
        elif line.startswith("+"):
            new.append(line[1:])
        elif line.startswith(" ") or line == "":
            old.append(line[1:])
            new.append(line[1:])
        i += 1
    flush()
    return rows


@dataclass(frozen=True)
class DiffView:
    """The diff viewer's state: which of the problem's attempts is shown, and how."""

    attempt_ids: tuple[int, ...]
    index: int = 0
    split: bool = False

    def step(self, by: int) -> DiffView:
        if not self.attempt_ids:
            return self
        return replace(self, index=min(len(self.attempt_ids) - 1, max(0, self.index + by)))

    def toggled(self) -> DiffView:
        return replace(self, split=not self.split)

    @property
    def current(self) -> int | None:
        return self.attempt_ids[self.index] if self.attempt_ids else None


# ---------------------------------------------------------------- what a key sends


@dataclass(frozen=True)
class Control:
    command: str
    target: str = ""
    value: int | None = None


def pause_toggle(p: ProblemRow) -> Control:
    return Control("resume_problem" if p.paused else "pause_problem", p.key)


def pin_toggle(p: ProblemRow) -> Control:
    return Control("unpin_problem" if p.pinned else "pin_problem", p.key)


def bump(p: ProblemRow, by: int) -> Control:
    return Control("bump_priority", p.key, by)


def agent_toggle(a: AgentRow) -> Control:
    return Control("resume_agent" if a.paused else "pause_agent", a.name)


def agent_for_problem(s: Snapshot, p: ProblemRow, remembered: dict[str, str] | None = None) -> AgentRow | None:
    """The agent `a` acts on for a problem: the first agent working on it, else the one last paused from it (a
    paused agent leaves its problem, so the watcher remembers whom it paused)."""
    on = s.agents_on(p.id)
    if on:
        return on[0]
    name = (remembered or {}).get(p.key)
    return next((a for a in s.agents if a.name == name), None)
