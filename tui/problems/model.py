"""The problem grid's rows: the view (sort and filters), each problem as a row of cells, and the rows of each
snapshot, formatted again only where a problem changed. No Textual."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from core.planner.model import ACTIVE, DONE, FAILED, OVER_BUDGET, PAUSED, PLATEAUED, UNRUNNABLE, WAITING
from core.report.figures import counted_speedup
from core.store.model import EventRow, ProblemRow
from core.store.queries import Queries
from tui.formatting import fmt_ago, fmt_sol, fmt_x, plural, sol_bar
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
# A row's cells are GRID_COLUMNS' then its note: why an unrunnable problem cannot run, drawn after its status in
# place of the columns it has no figures for ("" for the others).
NOTE = len(GRID_COLUMNS)
# The sort a click on a column's header picks (the columns not here do not sort).
COLUMN_SORTS = {"key": "key", "subset": "key", "priority": "priority", "status": "status", "attempts": "attempts",
                "speedup": "speedup", "bar": "SOL", "sol": "SOL", "change": "last change"}

OPEN = "open"  # the status filter of the problems an agent works on or can be given
OPEN_STATUSES = (ACTIVE, WAITING)
# The status filter's cycle, after every status and OPEN; a status no problem has is skipped.
STATUS_ORDER = (ACTIVE, WAITING, DONE, PLATEAUED, OVER_BUDGET, FAILED, PAUSED, UNRUNNABLE)
BEATS_T_B = "beats T_b"


def beats_baseline(p: ProblemRow) -> bool:
    """The problem's best is faster than T_b: its speedup counts (as the report counts it) and is above 1."""
    speedup = counted_speedup(p.best_speedup)
    return speedup is not None and speedup > 1


@dataclass(frozen=True)
class GridView:
    """What the grid shows: its sort and its filters ("" or False: that filter is off)."""

    sort: int = 0
    text: str = ""  # words the key or status contains
    status: str = ""  # a status, or OPEN
    subset: str = ""
    beats: bool = False  # only the problems whose best beats T_b

    def shows(self, p: ProblemRow) -> bool:
        if self.status and (p.status not in OPEN_STATUSES if self.status == OPEN else p.status != self.status):
            return False
        return (not self.subset or p.subset == self.subset) and (not self.beats or beats_baseline(p))

    def shown(self, problems: Iterable[ProblemRow]) -> list[ProblemRow]:
        return [p for p in filter_problems(problems, self.text) if self.shows(p)]

    @property
    def filtered(self) -> bool:
        return bool(self.text or self.status or self.subset or self.beats)

    def cleared(self) -> GridView:
        return GridView(self.sort)


def _next(choices: list[str], current: str) -> str:
    return choices[(choices.index(current) + 1) % len(choices)] if current in choices else choices[0]


def status_choices(problems: Iterable[ProblemRow]) -> list[str]:
    """The status filter's cycle for these problems: every status ("") first, then OPEN and each status some
    problem has (STATUS_ORDER first, any other after it)."""
    present = {p.status for p in problems}
    statuses = [s for s in STATUS_ORDER if s in present] + sorted(present - set(STATUS_ORDER))
    return ["", *([OPEN] if present & set(OPEN_STATUSES) else []), *statuses]


def subset_choices(problems: Iterable[ProblemRow]) -> list[str]:
    """The subset filter's cycle: every subset ("") first, then each subset of the run in name order, as the
    report's per-subset figures list them."""
    return ["", *sorted({p.subset for p in problems})]


def next_status(view: GridView, problems: Iterable[ProblemRow]) -> GridView:
    return replace(view, status=_next(status_choices(problems), view.status))


def next_subset(view: GridView, problems: Iterable[ProblemRow]) -> GridView:
    return replace(view, subset=_next(subset_choices(problems), view.subset))


def view_summary(problems: tuple[ProblemRow, ...], view: GridView, shown: int) -> str:
    """The grid's count line: "12/12 problems" without a filter; with filters, what they are and the problems shown
    of the subset's (or of all when no subset is picked, or it is the only filter): "L1 · beats T_b: 41 of 94"."""
    if not view.filtered:
        return f"{shown}/{plural(len(problems), 'problem')}"
    labels = [view.subset, view.status, BEATS_T_B if view.beats else "", repr(view.text) if view.text else ""]
    labels = [label for label in labels if label]
    of = len(problems)
    if view.subset and len(labels) > 1:
        of = sum(p.subset == view.subset for p in problems)
    return f"{' · '.join(labels)}: {shown} of {of}"


def status_text(p: ProblemRow) -> str:
    """The status, "(p)" when paused but not yet shown as such, "*" when pinned."""
    return p.status + (" (p)" if p.paused and p.status != "paused" else "") + ("*" if p.pinned else "")


def problem_cells(p: ProblemRow, agents: int, now: float, bar_width: int = 8, reason: str = "") -> tuple[str, ...]:
    """One grid row as plain strings, in GRID_COLUMNS order, then its note (``reason`` for an unrunnable
    problem)."""
    note = reason if p.status == UNRUNNABLE else ""
    return (p.key, p.subset, f"{p.priority:+d}" if p.priority else "0", status_text(p), str(agents) if agents else "",
            str(p.attempts), fmt_x(p.best_speedup), sol_bar(p.best_sol, bar_width), fmt_sol(p.best_sol),
            fmt_ago(p.last_change_at, now), note)


def column(name: str) -> int:
    """The index of the GRID_COLUMNS column ``name`` in a row's cells."""
    return next(i for i, (key, _) in enumerate(GRID_COLUMNS) if key == name)


def _speedups(problems: Iterable[ProblemRow], view: GridView) -> list[ProblemRow]:
    return sorted((p for p in view.shown(problems) if p.best_speedup is not None),
                  key=lambda p: (p.best_speedup, p.key))


def best_key(s: Snapshot, view: GridView = GridView()) -> str | None:
    """The shown problem with the highest best speedup (None when no shown problem has one)."""
    rows = _speedups(s.problems, view)
    return rows[-1].key if rows else None


def worst_key(s: Snapshot, view: GridView = GridView()) -> str | None:
    """The shown problem with the lowest best speedup among those that have one."""
    rows = _speedups(s.problems, view)
    return rows[0].key if rows else None


UNRUNNABLE_PREFIX = f"{UNRUNNABLE}: "


def unrunnable_reason(message: str) -> str:
    """Why a problem is unrunnable, from the decision event that marked it (``core.fleet.setup``): "unrunnable: no
    workload can run here (WHY); no agent will be assigned" reads WHY."""
    text = message.removeprefix(UNRUNNABLE_PREFIX).removesuffix("; no agent will be assigned")
    head = "no workload can run here ("
    return text[len(head):-1] if text.startswith(head) and text.endswith(")") else text


class GridRows:
    """The grid's rows of each snapshot, for a view. A problem's cells are formatted again only when its row, the
    agents on it, its age's text or its unrunnable reason changed: a poll that changed one problem formats one
    row. Used from the poll thread and the main thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cells: dict[str, tuple[tuple, tuple[str, ...]]] = {}  # key -> (what the cells were made of, cells)
        self._last: tuple[Snapshot, GridView, list[tuple[str, tuple[str, ...]]]] | None = None
        self.reasons: dict[int, str] = {}  # problem id -> why it is unrunnable ("": no event says)

    def rows(self, s: Snapshot, view: GridView) -> list[tuple[str, tuple[str, ...]]]:
        """(row key, cells) for every shown problem, in display order."""
        with self._lock:
            last = self._last
            if last is not None and last[0] is s and last[1] == view:
                return last[2]
            counts: dict[int, int] = {}
            for a in s.agents:
                if a.problem_id is not None:
                    counts[a.problem_id] = counts.get(a.problem_id, 0) + 1
            cached, now = self._cells, s.now
            rows = []
            for p in sort_problems(view.shown(s.problems), view.sort):
                made_of = (p, counts.get(p.id, 0), fmt_ago(p.last_change_at, now), self.reasons.get(p.id, ""))
                entry = cached.get(p.key)
                if entry is None or entry[0] != made_of:
                    entry = cached[p.key] = (made_of, problem_cells(p, made_of[1], now, reason=made_of[3]))
                rows.append((p.key, entry[1]))
            if len(cached) > len(s.problems):  # a problem left the run's store (never, but bound the cache)
                keys = {p.key for p in s.problems}
                for key in [k for k in cached if k not in keys]:
                    del cached[key]
            self._last = (s, view, rows)
            return rows

    def read_reasons(self, s: Snapshot, events: Iterable[EventRow], reader: Queries) -> None:
        """Why each unrunnable problem cannot run: from the events a poll brought, else read once from the store
        (the event may be older than the events the watcher reads at its start)."""
        found = {e.problem_id: unrunnable_reason(e.message) for e in events
                 if e.kind == "decision" and e.problem_id is not None and e.message.startswith(UNRUNNABLE_PREFIX)}
        missing = [p.id for p in s.problems if p.status == UNRUNNABLE and p.id not in self.reasons
                   and p.id not in found]
        if missing:
            for pid in missing:
                found.setdefault(pid, "")
            rows = reader.conn.execute(
                "SELECT problem_id, message FROM events WHERE kind = 'decision' AND message LIKE ? AND problem_id IN "
                f"({','.join('?' * len(missing))}) ORDER BY id", (UNRUNNABLE_PREFIX + "%", *missing))
            for problem_id, message in rows:
                found[problem_id] = unrunnable_reason(message)
        if found:
            with self._lock:
                self.reasons.update(found)
                self._last = None


def grid_rows(s: Snapshot, sort: int, filter_text: str) -> list[tuple[str, tuple[str, ...]]]:
    """(row key, cells) for every shown problem, in display order, formatted afresh."""
    return GridRows().rows(s, GridView(sort, filter_text))
