"""A problem's detail: per workload T_b / T_sol and the best attempt's times, the frontier (which attempt leads
which workloads), the attempt history, the planner's reasons and directives (decision and directive events)
and the problem's log.

The app keeps one instance and points it at the problem to show (``load``): opening a detail refills its widgets
from the store instead of composing and mounting new ones, which on a busy run cost more than the key's budget."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Static

from core.store.model import DIRECTIVE, AttemptRow, EventRow, ProblemRow
from tui.detail.model import ATTEMPT_COLUMNS, WORKLOAD_COLUMNS, attempt_cells, problem_summary_line, workload_rows
from tui.detail.table import LineTable
from tui.formatting import fmt_x
from tui.logs.model import event_line
from tui.logs.view import LogView
from tui.snapshot import Delta, Snapshot

ATTEMPTS_LOADED = 500
LOG_LINES = 300
DECISIONS_SHOWN = 40


def frontier_text(problem: ProblemRow) -> str:
    """One line: each frontier member, the workloads it leads and its geomean speedup."""
    if not problem.frontier:
        return "Frontier: none yet"
    return "Frontier: " + " · ".join(f"#{m.attempt_id} leads {', '.join(map(str, m.leads))} ({fmt_x(m.speedup)}"
                                     + ("" if m.full else ", partial") + ")" for m in problem.frontier)


class DetailScreen(Screen):
    AUTO_FOCUS = "#attempts"
    BINDINGS = [
        Binding("escape", "app.pop_screen", "back"),
        Binding("d", "diff", "diffs"),
        Binding("space", "pause", "pause/resume"),
        Binding("a", "agent", "agent"),
        Binding("plus", "bump(1)", "prio+"),
        Binding("minus", "bump(-1)", "prio-"),
        Binding("P", "pin", "pin"),
    ]
    DEFAULT_CSS = """
    DetailScreen #summary { height: auto; max-height: 4; padding: 0 1; background: $boost; }
    DetailScreen #workloads { height: auto; max-height: 7; }
    DetailScreen #frontier { height: auto; max-height: 2; padding: 0 1; }
    DetailScreen #attempts { height: 1fr; min-height: 4; }
    DetailScreen #bottom { height: 7; }
    DetailScreen #decisions { width: 1fr; height: 100%; border-top: solid $secondary; border-right: vkey $secondary;
                              padding: 0 1 0 0; }
    DetailScreen #log { width: 1fr; height: 100%; border-top: solid $secondary; padding: 0 0 0 1; }
    """

    def __init__(self):
        super().__init__()
        self.key = ""
        self.problem_id = -1
        self.attempts: dict[int, AttemptRow] = {}
        self.decisions: list[str] = []
        self._summary = ""
        self._workloads: list[tuple[str, ...]] = []
        self._frontier = ""

    def compose(self) -> ComposeResult:
        yield Static(id="summary", markup=False)
        yield LineTable(WORKLOAD_COLUMNS, cursor=False, id="workloads")
        yield Static(id="frontier", markup=False)
        yield LineTable(ATTEMPT_COLUMNS, id="attempts")
        with Horizontal(id="bottom"):
            yield Static(id="decisions", markup=False)
            yield LogView(LOG_LINES, id="log")
        yield Footer()

    def on_mount(self) -> None:
        self._fill()

    def load(self, key: str) -> None:
        """Show the problem ``key`` (its widgets are refilled now if mounted, else when they mount)."""
        problem = self.app.snapshot.problem(key)
        self.key = key
        self.problem_id = problem.id if problem else -1
        if self.is_mounted:
            self._fill()

    def _fill(self) -> None:
        self.attempts = {}
        self.decisions = []
        self._summary = ""
        self._workloads = []
        self._frontier = ""
        table = self.query_one("#attempts", LineTable)
        table.clear()
        self.query_one("#log", LogView).clear()
        pid = self.problem_id
        attempts, decisions, logs = self.app.read(lambda r: (
            r.attempts(problem_id=pid, limit=ATTEMPTS_LOADED),
            r.events(problem_id=pid, kind="decision", limit=DECISIONS_SHOWN),
            r.events(problem_id=pid, limit=LOG_LINES)))
        self.show(self.app.snapshot, Delta(events=(*decisions, *logs), attempts=tuple(attempts)), initial=True)
        table.move_cursor(table.row_count - 1)

    def show(self, snapshot: Snapshot, delta: Delta | None, initial: bool = False) -> None:
        problem = snapshot.problem(self.key)
        if problem is None:
            return
        if delta is not None:
            self._add_attempts(snapshot, [a for a in delta.attempts if a.problem_id == self.problem_id])
            events = [e for e in delta.events if e.problem_id == self.problem_id]
            self._add_events(snapshot, events, initial)
        best = self.attempts.get(problem.best_attempt_id) if problem.best_attempt_id else None
        if best is None and problem.best_attempt_id:
            best = self.app.read(lambda r: r.attempt(problem.best_attempt_id))
            if best is not None:
                self.attempts[best.id] = best
        summary = problem_summary_line(problem, snapshot, best)
        if summary != self._summary:
            self._summary = summary
            self.query_one("#summary", Static).update(summary)
        rows = workload_rows(problem, best)
        if rows != self._workloads:
            self._workloads = rows
            table = self.query_one("#workloads", LineTable)
            table.clear()
            for row in rows:
                table.set_row(row[0], row)
        frontier = frontier_text(problem)
        if frontier != self._frontier:
            self._frontier = frontier
            self.query_one("#frontier", Static).update(frontier)

    def _add_attempts(self, snapshot: Snapshot, attempts: list[AttemptRow]) -> None:
        if not attempts:
            return
        table = self.query_one("#attempts", LineTable)
        at_end = table.row_count == 0 or table.cursor_row >= table.row_count - 1
        for a in attempts:
            table.set_row(str(a.id), attempt_cells(a, snapshot))
            self.attempts[a.id] = a
        if at_end:
            table.move_cursor(table.row_count - 1)

    def _add_events(self, snapshot: Snapshot, events: list[EventRow], initial: bool) -> None:
        seen_decisions = False
        logged = set()
        lines = []
        for e in sorted(events, key=lambda e: e.id):
            if e.kind in ("decision", DIRECTIVE):
                line = event_line(e, snapshot, with_problem=False)
                if not initial or line not in self.decisions:
                    self.decisions.append(line)
                    seen_decisions = True
            if e.id not in logged:
                logged.add(e.id)
                lines.append(event_line(e, snapshot, with_problem=False))
        self.query_one("#log", LogView).write_lines(lines)
        if seen_decisions:
            self.decisions = self.decisions[-DECISIONS_SHOWN:]
            self.query_one("#decisions", Static).update(
                "Planner:\n" + "\n".join(reversed(self.decisions[-6:])))
        elif initial:
            self.query_one("#decisions", Static).update("Planner: no decisions yet")

    # ------------------------------------------------------------ actions

    def _problem(self):
        return self.app.snapshot.problem(self.key)

    def action_pause(self) -> None:
        self.app.toggle_pause(self._problem())

    def action_agent(self) -> None:
        self.app.toggle_agent_of(self._problem())

    def action_bump(self, by: int) -> None:
        self.app.bump(self._problem(), by)

    def action_pin(self) -> None:
        self.app.toggle_pin(self._problem())

    def selected_attempt(self) -> int | None:
        key = self.query_one("#attempts", LineTable).selected_key
        return int(key) if key is not None else None

    def action_diff(self) -> None:
        ids = tuple(sorted(self.attempts))
        if not ids:
            self.app.notify("no attempts yet")
            return
        self.app.open_diff(self.key, ids, self.selected_attempt())

    @on(LineTable.RowSelected, "#attempts")
    def _open_diff(self, event: LineTable.RowSelected) -> None:
        self.action_diff()
