"""The fleet header: elapsed time, problems, attempts, GPU busy (and running kernels, where measured), spend, fleet
SOL with its sparkline, geomean."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from tui.fleet.model import header_lines
from tui.snapshot import Snapshot


class FleetHeader(Static):
    DEFAULT_CSS = """
    FleetHeader {
        height: 2;
        background: $boost;
        color: $text;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """

    def __init__(self, **kwargs):
        super().__init__("", **kwargs)
        self._lines: list[str] = []

    def show(self, snapshot: Snapshot) -> None:
        lines = header_lines(snapshot, self.size.width or None)  # its screen shows it again when resized
        if lines != self._lines:
            self._lines = lines
            text = Text(lines[0], style="bold")
            text.append("\n")
            text.append(lines[1])
            self.update(text)
