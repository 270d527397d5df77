"""The agents view (`A`): every agent's state and problem; `a` / space pause or resume the selected agent,
`+` / `-` raise or lower the priority of its problem."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer

from tui.agents.model import AGENT_COLUMNS, agent_cells
from tui.fleet.header import FleetHeader
from tui.snapshot import Delta, Snapshot


class AgentsScreen(Screen):
    BINDINGS = [
        Binding("escape,A", "app.pop_screen", "back"),
        Binding("a,space", "agent", "pause/resume agent"),
        Binding("plus", "bump(1)", "prio+"),
        Binding("minus", "bump(-1)", "prio-"),
    ]
    DEFAULT_CSS = "AgentsScreen DataTable { height: 1fr; }"

    def __init__(self):
        super().__init__()
        self._cells: dict[str, tuple[str, ...]] = {}

    def compose(self) -> ComposeResult:
        yield FleetHeader()
        yield DataTable(id="agents", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for column in AGENT_COLUMNS:
            table.add_column(column, key=column)
        table.focus()

    def on_screen_resume(self) -> None:
        self.show(self.app.snapshot, None)  # the app keeps this screen: it missed the polls while hidden

    def show(self, snapshot: Snapshot, delta: Delta | None) -> None:
        self.query_one(FleetHeader).show(snapshot)
        table = self.query_one(DataTable)
        with self.app.batch_update():
            for agent in snapshot.agents:
                cells = agent_cells(agent, snapshot)
                old = self._cells.get(agent.name)
                if old is None:
                    table.add_row(*cells, key=agent.name)
                elif old != cells:
                    for column, before, after in zip(AGENT_COLUMNS, old, cells):
                        if before != after:
                            table.update_cell(agent.name, column, after)
                self._cells[agent.name] = cells

    def selected(self):
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        name = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return next((a for a in self.app.snapshot.agents if a.name == name), None)

    def action_agent(self) -> None:
        self.app.toggle_agent(self.selected())

    def action_bump(self, by: int) -> None:
        agent = self.selected()
        problem = self.app.snapshot.problem_by_id(agent.problem_id) if agent else None
        if problem is None:
            self.app.notify("this agent has no problem")
            return
        self.app.bump(problem, by)
