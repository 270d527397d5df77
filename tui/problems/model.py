"""The problem grid's rows: sorting, filtering and each problem as a row of cells. Pure functions."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from core.store.model import ProblemRow
from tui.formatting import fmt_ago, fmt_sol, fmt_x, sol_bar
from tui.snapshot import Snapshot


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
                ("agents", "ag"), ("attempts", "att"), ("speedup", "best"), ("bar", ""), ("sol", "SOL"),
                ("change", "chg"))


def status_text(p: ProblemRow) -> str:
    """The status, "(p)" when paused but not yet shown as such, "*" when pinned."""
    return p.status + (" (p)" if p.paused and p.status != "paused" else "") + ("*" if p.pinned else "")


def problem_cells(p: ProblemRow, agents: int, now: float, bar_width: int = 8) -> tuple[str, ...]:
    """One grid row as plain strings, in GRID_COLUMNS order."""
    return (p.key, p.subset, f"{p.priority:+d}" if p.priority else "0", status_text(p), str(agents) if agents else "",
            str(p.attempts), fmt_x(p.best_speedup), sol_bar(p.best_sol, bar_width), fmt_sol(p.best_sol),
            fmt_ago(p.last_change_at, now))


def column(name: str) -> int:
    """The index of the GRID_COLUMNS column ``name`` in a row's cells."""
    return next(i for i, (key, _) in enumerate(GRID_COLUMNS) if key == name)


def _speedups(problems: Iterable[ProblemRow], filter_text: str) -> list[ProblemRow]:
    return sorted((p for p in filter_problems(problems, filter_text) if p.best_speedup is not None),
                  key=lambda p: (p.best_speedup, p.key))


def best_key(s: Snapshot, filter_text: str = "") -> str | None:
    """The shown problem with the highest best speedup (None when no shown problem has one)."""
    rows = _speedups(s.problems, filter_text)
    return rows[-1].key if rows else None


def worst_key(s: Snapshot, filter_text: str = "") -> str | None:
    """The shown problem with the lowest best speedup among those that have one."""
    rows = _speedups(s.problems, filter_text)
    return rows[0].key if rows else None


def grid_rows(s: Snapshot, sort: int, filter_text: str) -> list[tuple[str, tuple[str, ...]]]:
    """(row key, cells) for every shown problem, in display order."""
    counts: dict[int, int] = {}
    for a in s.agents:
        if a.problem_id is not None:
            counts[a.problem_id] = counts.get(a.problem_id, 0) + 1
    rows = sort_problems(filter_problems(s.problems, filter_text), sort)
    return [(p.key, problem_cells(p, counts.get(p.id, 0), s.now)) for p in rows]
