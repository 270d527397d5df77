"""The fleet's event log (`l`): every agent's log lines, the planner's decisions and applied controls, newest at
the bottom. A RichLog with ``max_lines``: memory stays bounded and only the visible lines are rendered."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, RichLog

from tui.model import Delta, Snapshot, event_line

LOG_LINES = 1000


class LogsScreen(Screen):
    BINDINGS = [Binding("escape,l", "app.pop_screen", "back")]

    def compose(self) -> ComposeResult:
        yield RichLog(id="log", max_lines=LOG_LINES, wrap=False, markup=False, auto_scroll=True)
        yield Footer()

    def on_mount(self) -> None:
        log = self.query_one(RichLog)
        for e in self.app.events:
            log.write(event_line(e, self.app.snapshot))
        log.focus()

    def show(self, snapshot: Snapshot, delta: Delta | None) -> None:
        if delta is None or not delta.events:
            return
        log = self.query_one(RichLog)
        for e in delta.events:
            log.write(event_line(e, snapshot))
