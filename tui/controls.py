"""What a key sends: the :class:`Control` each key makes for the selected problem or agent, and how a control
row reads in the status line and notifications. Pure functions."""

from __future__ import annotations

from dataclasses import dataclass

from core.store.model import AgentRow, ControlRow, ProblemRow
from tui.snapshot import Snapshot


def control_line(c: ControlRow, over: bool = False) -> str:
    """``over``: the control's effect is over (a stop_run whose run has stopped or was resumed since)."""
    what = f"{c.command} {c.target} {c.value}".strip()
    if c.applied_at is None:
        return f"{what}: pending"
    return f"{what}: stopped" if over else f"{what}: {c.result or 'applied'}"


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
