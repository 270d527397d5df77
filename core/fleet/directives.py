"""The planner model's directives: a short instruction with its reason, to one agent or to every agent on a problem.

A directive is an event of kind ``DIRECTIVE`` (no table of its own): its agent is the agent it is addressed to (and
its problem that agent's problem at the time), or no agent and the problem it is addressed to. An agent's brief
shows the directives addressed to it or to its problem since its previous turn began (``Workbench`` keeps when
that was); the TUI shows them in the log like any event. Pure, apart from the store read in ``directives_for``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from core.store.model import DIRECTIVE, EventRow
MAX_INSTRUCTION_CHARS = 300
MAX_SHOWN = 5  # the newest directives a brief shows


@dataclass(frozen=True)
class Directive:
    event_id: int
    ts: float
    to_agent: bool  # to the agent itself; else to every agent on its problem
    text: str  # the instruction and its reason, as recorded


def directive_message(instruction: str, reason: str) -> str:
    """The event's message: what to do, then why."""
    return f"{' '.join(instruction.split())} (why: {' '.join(reason.split())})"


class EventsAddressed(Protocol):
    def events_addressed(self, kind: str, agent_id: int, problem_id: int, *, since_id: int = 0,
                         limit: int = 500) -> list[EventRow]: ...


def directives_for(store: EventsAddressed, agent_id: int, problem_id: int, since_id: int,
                   limit: int = MAX_SHOWN) -> tuple[Directive, ...]:
    """The newest ``limit`` directives after event ``since_id`` to agent ``agent_id`` or to problem
    ``problem_id``, oldest first."""
    return tuple(Directive(e.id, e.ts, e.agent_id is not None, e.message)
                 for e in store.events_addressed(DIRECTIVE, agent_id, problem_id, since_id=since_id, limit=limit))
