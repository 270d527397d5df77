"""What each agent is doing now and how its last attempt went, kept up to date from the polls' deltas: its newest
attempt still being evaluated, its newest finished one and its newest log line. Pure data, no Textual."""

from __future__ import annotations

from core.store.model import AgentRow, AttemptRow, EventRow
from tui.formatting import fmt_ago, fmt_x
from tui.snapshot import Delta, Snapshot

_LINE_KINDS = ("log", "attempt", "decision")


class Activity:
    def __init__(self) -> None:
        self.pending: dict[int, AttemptRow] = {}  # agent id -> its newest attempt in evaluation
        self.finished: dict[int, AttemptRow] = {}  # agent id -> its newest finished attempt
        self.lines: dict[int, EventRow] = {}  # agent id -> its newest log line

    def add(self, delta: Delta) -> None:
        for a in delta.attempts:
            agent = a.agent_id
            if agent is None:
                continue
            if a.state == "pending":
                if agent not in self.pending or self.pending[agent].id < a.id:
                    self.pending[agent] = a
                continue
            if agent in self.pending and self.pending[agent].id == a.id:
                del self.pending[agent]
            if agent not in self.finished or self.finished[agent].id < a.id:
                self.finished[agent] = a
        for e in delta.events:
            if e.agent_id is not None and e.kind in _LINE_KINDS:
                self.lines[e.agent_id] = e


def verdict_text(a: AttemptRow | None, now: float) -> str:
    """An attempt's verdict, short: "#58 PASSED 1.32x 12s ago", "#59 INCORRECT 3s ago" ("no verdict yet")."""
    if a is None:
        return "no verdict yet"
    result = f"{a.status} {fmt_x(a.speedup)}" if a.passed else a.status or a.state
    return f"#{a.id} {result} {fmt_ago(a.finished_at, now)} ago"


def doing_text(agent: AgentRow, activity: Activity) -> str:
    """What the agent is doing now: the attempt it has in evaluation, else its newest log line."""
    pending = activity.pending.get(agent.id)
    if pending is not None and agent.state == "working":
        return f"evaluating #{pending.id}" + (f" ({pending.note.splitlines()[0]})" if pending.note else "")
    line = activity.lines.get(agent.id)
    return line.message.splitlines()[0] if line is not None and line.message else "—"


def activity_lines(s: Snapshot, activity: Activity, two_lines: bool) -> list[str]:
    """A line per agent (name, state, last verdict, problem), or two: name, state and problem, then the last
    verdict and what it is doing now."""
    agents = s.agents
    name_w = max((len(a.name) for a in agents), default=0)
    states = {a.id: a.state + (" (paused)" if a.paused and a.state != "paused" else "") for a in agents}
    state_w = max((len(v) for v in states.values()), default=0)
    verdicts = {a.id: verdict_text(activity.finished.get(a.id), s.now) for a in agents}
    verdict_w = max((len(v) for v in verdicts.values()), default=0)
    lines = []
    for a in agents:
        problem = s.problem_by_id(a.problem_id)
        where = problem.key if problem is not None else "—"
        head = f"{a.name:<{name_w}}  {states[a.id]:<{state_w}}"
        if two_lines:
            lines.append(f"{head}  {where}")
            now = "now" if a.state == "working" else f"{states[a.id]}:"  # an idle agent's newest line says why
            lines.append(f"{'':<{name_w}}  last {verdicts[a.id]} · {now} {doing_text(a, activity)}")
        else:
            lines.append(f"{head}  {verdicts[a.id]:<{verdict_w}}  {where}")
    return lines
