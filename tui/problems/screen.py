"""The main screen: the fleet header over the problem grid, with a filter input, and the agents' activity in the
rows the grid leaves empty. The line over the grid says its sort, its filters (text, status, subset, beats T_b)
and how many problems they show."""

from __future__ import annotations

from dataclasses import replace

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input, Static

from tui.controls import control_line
from tui.agents.panel import ActivityPanel
from tui.fleet.header import FleetHeader
from tui.fleet.lifecycle import stop_done
from tui.problems.footer import KeyFooter
from tui.problems.grid import ProblemGrid
from tui.problems.model import (COLUMN_SORTS, SORTS, GridView, best_key, next_status, next_subset, view_summary,
                                worst_key)
from tui.snapshot import Delta, Snapshot


class ProblemsScreen(Screen):
    AUTO_FOCUS = "#grid"
    BINDINGS = [
        Binding("b", "jump('best')", "best"),
        Binding("w", "jump('worst')", "worst"),
        Binding("space", "pause", "pause"),
        Binding("a", "agent", "agent"),
        Binding("plus", "bump(1)", "prio+"),
        Binding("minus", "bump(-1)", "prio-"),
        Binding("P", "pin", "pin"),
        Binding("s", "sort", "sort"),
        Binding("slash", "filter", "filter"),
        Binding("f", "status_filter", "status"),
        Binding("u", "subset_filter", "subset"),
        Binding("x", "beats_filter", "beats T_b"),
        Binding("escape", "clear_filter", "clear filters", show=False),
    ]
    DEFAULT_CSS = """
    ProblemsScreen #gridbar { height: 1; padding: 0 1; color: $text-muted; text-wrap: nowrap;
                              text-overflow: ellipsis; }
    ProblemsScreen #filter { display: none; height: 3; }
    ProblemsScreen #filter.shown { display: block; }
    ProblemsScreen ProblemGrid { height: 1fr; }
    ProblemsScreen ActivityPanel { display: none; height: 1fr; }
    ProblemsScreen ActivityPanel.shown { display: block; }
    """
    FIXED_ROWS = 4  # the header's two, the sort line and the footer

    def __init__(self):
        super().__init__()
        self.view = GridView()
        self._bar = ""
        self._stale = False
        self._panel: tuple[int, bool, int] = (0, False, 0)  # the activity panel's (height, two lines an agent) and
        # the grid's rows it was laid out for

    def compose(self) -> ComposeResult:
        yield FleetHeader(id="header")
        yield Static(id="gridbar")
        yield Input(placeholder="filter on key or status (enter: keep, escape: clear)", id="filter")
        yield ProblemGrid(id="grid")
        yield ActivityPanel(id="activity")
        yield KeyFooter()

    @property
    def grid(self) -> ProblemGrid:
        return self.query_one(ProblemGrid)

    def on_mount(self) -> None:
        self.show(self.app.snapshot, None)
        self.grid.focus()

    def on_resize(self) -> None:
        self.show(self.app.snapshot, None)

    def on_screen_resume(self) -> None:
        if self._stale:
            self.show(self.app.snapshot, None)

    def _view_changed(self) -> None:
        self.app.grid_view = self.view  # what the poll thread prepares rows for
        self.show(self.app.snapshot, None)

    def show(self, snapshot: Snapshot, delta: Delta | None) -> None:
        if delta is not None and not self.is_current:
            self._stale = True  # hidden under another screen: caught up when it comes back
            return
        self._stale = False
        self.query_one(FleetHeader).show(snapshot)
        rows = self.app.grid_rows(snapshot, self.view)
        self.grid.show(rows)
        parts = [f"sort: {SORTS[self.view.sort].name}", view_summary(snapshot.problems, self.view, len(rows))]
        if snapshot.controls:
            last = snapshot.controls[-1]
            parts.append("last control: " + control_line(last, stop_done(last, snapshot.run, snapshot.lifecycle)))
        bar = " · ".join(parts)
        if bar != self._bar:
            self._bar = bar
            self.query_one("#gridbar", Static).update(bar)
        self._show_activity(snapshot, len(rows))

    def _show_activity(self, snapshot: Snapshot, grid_rows: int) -> None:
        """The activity panel in the rows the grid (its header and rows) leaves empty: two lines an agent where
        they fit, else one; none when not even one agent's line fits."""
        agents = len(snapshot.agents)
        free = self.size.height - self.FIXED_ROWS - (3 if self.query_one("#filter").has_class("shown") else 0) \
            - (grid_rows + 1)
        two = free >= ActivityPanel.rows_wanted(agents, True)
        height = min(free, ActivityPanel.rows_wanted(agents, two))
        if height < 2:
            height = 0
        panel = self.query_one(ActivityPanel)
        if (height, two, grid_rows) != self._panel:
            self._panel = (height, two, grid_rows)
            panel.set_class(height > 0, "shown")
            # The grid as tall as its rows and the panel right under it, taking the rest; without the panel the
            # grid takes it all.
            self.grid.styles.height = grid_rows + 1 if height else "1fr"
        if height:
            panel.show(snapshot, self.app.activity, two)

    def selected(self):
        key = self.grid.selected_key
        return self.app.snapshot.problem(key) if key else None

    # ------------------------------------------------------------ actions

    def action_pause(self) -> None:
        self.app.toggle_pause(self.selected())

    def action_agent(self) -> None:
        self.app.toggle_agent_of(self.selected())

    def action_bump(self, by: int) -> None:
        self.app.bump(self.selected(), by)

    def action_pin(self) -> None:
        self.app.toggle_pin(self.selected())

    def action_jump(self, which: str) -> None:
        """The cursor to the shown problem with the highest (best) or lowest (worst) best speedup."""
        key = (best_key if which == "best" else worst_key)(self.app.snapshot, self.view)
        if key is None:
            self.app.notify("no shown problem has a speedup yet")
            return
        self.grid.select(key)

    def action_sort(self) -> None:
        self.view = replace(self.view, sort=(self.view.sort + 1) % len(SORTS))
        self._view_changed()

    @on(ProblemGrid.HeaderClicked, "#grid")
    def _sort_by_column(self, event: ProblemGrid.HeaderClicked) -> None:
        name = COLUMN_SORTS.get(event.column)
        if name is not None:
            self.view = replace(self.view, sort=[s.name for s in SORTS].index(name))
            self._view_changed()

    def action_status_filter(self) -> None:
        self.view = next_status(self.view, self.app.snapshot.problems)
        self._view_changed()

    def action_subset_filter(self) -> None:
        self.view = next_subset(self.view, self.app.snapshot.problems)
        self._view_changed()

    def action_beats_filter(self) -> None:
        self.view = replace(self.view, beats=not self.view.beats)
        self._view_changed()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.focus()
        self.show(self.app.snapshot, None)  # the box takes rows from the activity panel

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("shown")
        self.view = self.view.cleared()
        self._view_changed()
        self.grid.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.view = replace(self.view, text=event.value.strip())
        self._view_changed()

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        if not self.view.text:
            event.input.remove_class("shown")
        self.grid.focus()

    @on(ProblemGrid.RowSelected, "#grid")
    def _open(self, event: ProblemGrid.RowSelected) -> None:
        problem = self.app.snapshot.problem(event.key)
        if problem is not None:
            self.app.open_detail(problem.key)
