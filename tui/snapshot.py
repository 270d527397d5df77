"""The watcher's view of a run: a frozen :class:`Snapshot` of the store at one moment, the :class:`Delta` one poll
brought, and the :class:`Poller` that reads the store incrementally to make them. Plain data, no Textual."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property

from core.store import model
from core.store.model import AgentRow, AttemptRow, ControlRow, EventRow, LlmCall, LlmCallRow, MetricRow, ProblemRow, \
    RunInfo
from core.store.queries import Queries
from tui.fleet.lifecycle import Lifecycle

Clock = Callable[[], float]

METRICS_KEPT = 120  # metric samples kept for the sparkline
CONTROLS_KEPT = 50


@dataclass(frozen=True)
class Totals:
    """Finished attempts and their GPU seconds; tokens and dollars of every model call (as each returned)."""

    attempts: int = 0
    tokens: int = 0
    dollars: float = 0.0
    gpu_seconds: float = 0.0
    estimated: bool = False  # some tokens are estimates (the endpoint reported no usage)
    # Of the tokens and dollars: reasoning tokens and cached prompt tokens, with what they cost.
    reasoning_tokens: int = 0
    reasoning_dollars: float = 0.0
    cached_tokens: int = 0
    cached_dollars: float = 0.0

    def plus(self, attempt: AttemptRow) -> Totals:
        return replace(self, attempts=self.attempts + 1, gpu_seconds=self.gpu_seconds + attempt.gpu_seconds)

    def plus_call(self, call: LlmCall) -> Totals:
        return replace(self, tokens=self.tokens + call.tokens, dollars=self.dollars + call.dollars,
                       estimated=self.estimated or call.tokens_estimated,
                       reasoning_tokens=self.reasoning_tokens + call.reasoning_tokens,
                       reasoning_dollars=self.reasoning_dollars + call.reasoning_dollars,
                       cached_tokens=self.cached_tokens + call.cached_tokens,
                       cached_dollars=self.cached_dollars + call.cached_dollars)


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
    lifecycle: Lifecycle = Lifecycle()

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
        self.lifecycle_cursor = 0
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
        lifecycle = self.snapshot.lifecycle
        for event in r.lifecycle_events(since_id=self.lifecycle_cursor):
            self.lifecycle_cursor = event.id
            lifecycle = lifecycle.after(event)
        controls, applied = self._controls()
        self.snapshot = Snapshot(self.run_name, run, problems, agents, metrics, controls, totals, self.clock(),
                                 endpoint, lifecycle)
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
