"""An event as one log line (the fleet log and a problem's detail both show them). Pure functions."""

from __future__ import annotations

import time

from core.store.model import DIRECTIVE, EventRow
from tui.snapshot import Snapshot


def event_line(e: EventRow, s: Snapshot, with_problem: bool = True) -> str:
    stamp = time.strftime("%H:%M:%S", time.gmtime(e.ts))  # UTC: the same on every machine
    who = s.agent_name(e.agent_id) if e.agent_id is not None else e.kind
    if e.kind == DIRECTIVE:  # the planner model's instruction: to whom, not by whom
        who = (f"directive to {who}" if e.agent_id is not None else "directive to every agent on"
               if with_problem and e.problem_id is not None else "directive to every agent here")
    where = ""
    if with_problem and e.problem_id is not None:
        p = s.problem_by_id(e.problem_id)
        where = f" {p.key}" if p else f" #{e.problem_id}"
    return f"{stamp} {who}{where}: {e.message}"
