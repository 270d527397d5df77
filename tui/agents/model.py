"""The agents view's rows. Pure functions."""

from __future__ import annotations

from core.config.schema import DEFAULT_PROFILE
from core.store.model import AgentRow
from tui.formatting import fmt_count
from tui.snapshot import Snapshot

AGENT_COLUMNS = ("agent", "kind", "state", "problem", "att", "fails", "tokens", "$")


def agent_cells(a: AgentRow, s: Snapshot) -> tuple[str, ...]:
    p = s.problem_by_id(a.problem_id)
    state = a.state + (" (paused)" if a.paused and a.state != "paused" else "")
    profile = f" [{a.profile}]" if a.profile and a.profile != DEFAULT_PROFILE else ""  # with several profiles
    return (a.name, a.kind + profile + (f" {a.model}" if a.model else ""), state, p.key if p else "—", str(a.attempts),
            str(a.failures_in_row), fmt_count(a.tokens), f"{a.dollars:.2f}")
