"""The agents' activity under the problem grid, in the rows the grid leaves empty: each agent's state and problem,
its last verdict and what it is doing now (two lines an agent where there is room, else one)."""

from __future__ import annotations

from textual.widgets import Static

from tui.agents.activity import Activity, activity_lines
from tui.snapshot import Snapshot

TITLE = "agents now · last verdict"


class ActivityPanel(Static):
    DEFAULT_CSS = """
    ActivityPanel {
        height: auto;
        border-top: solid $secondary;
        border-title-color: $text-muted;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    def __init__(self, **kwargs):
        super().__init__("", markup=False, **kwargs)
        self.border_title = TITLE
        self._text = ""

    @staticmethod
    def rows_wanted(agents: int, two_lines: bool) -> int:
        """The panel's height for ``agents`` agents (with its title rule)."""
        return 1 + agents * (2 if two_lines else 1) if agents else 0

    def show(self, snapshot: Snapshot, activity: Activity, two_lines: bool) -> None:
        text = "\n".join(activity_lines(snapshot, activity, two_lines))
        if text != self._text:
            self._text = text
            self.update(text)
