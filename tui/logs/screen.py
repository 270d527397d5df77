"""The fleet's event log (`l`): every agent's log lines, the planner's decisions and applied controls, newest at
the bottom. The app keeps one instance: hidden, it writes nothing; shown again, it catches up from the app's last
``LOG_LINES`` events. Memory stays bounded and only the visible lines are drawn (see LogView)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer

from core.store.model import EventRow
from tui.logs.model import event_line
from tui.logs.view import LogView
from tui.snapshot import Delta, Snapshot

LOG_LINES = 1000


class LogsScreen(Screen):
    AUTO_FOCUS = "#log"
    BINDINGS = [Binding("escape,l", "app.pop_screen", "back")]

    def __init__(self):
        super().__init__()
        self.last_event_id = 0  # the newest event written to the log

    def compose(self) -> ComposeResult:
        yield LogView(LOG_LINES, id="log")
        yield Footer()

    def on_screen_resume(self) -> None:
        self._catch_up()

    def show(self, snapshot: Snapshot, delta: Delta | None) -> None:
        self._catch_up()

    def _catch_up(self) -> None:
        """Write the app's events newer than the last one written (the app has the newest LOG_LINES)."""
        new: list[EventRow] = []
        for event in reversed(self.app.events):
            if event.id <= self.last_event_id:
                break
            new.append(event)
        if not new:
            return
        self.last_event_id = new[0].id
        snapshot = self.app.snapshot
        self.query_one(LogView).write_lines(event_line(e, snapshot) for e in reversed(new))
