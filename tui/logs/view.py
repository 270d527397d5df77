"""A bounded log widget: the last ``max_lines`` lines as plain strings, drawn only when on screen.

RichLog renders every line into segments as it is written (and schedules a scroll per line), and keeps the rendered
lines plus a cache of 1024 more: at 200 lines a second that is most of the watcher's work and memory for lines
nobody sees. Here writing appends strings to a deque, and ``render_line`` draws the few lines in view."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from rich.cells import cell_len
from rich.control import strip_control_codes
from rich.segment import Segment
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip


class LogView(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    LogView {
        background: $surface;
        color: $foreground;
        overflow-y: scroll;
        &:focus { background-tint: $foreground 5%; }
    }
    """

    def __init__(self, max_lines: int, **kwargs):
        super().__init__(**kwargs)
        self.lines: deque[str] = deque(maxlen=max_lines)
        self._widest = 0  # the widest line written since the last clear (the horizontal scroll range)

    def write_lines(self, lines: Iterable[str]) -> None:
        """Append ``lines`` (a line with newlines becomes several); the view follows the end if it was there."""
        follow = self.scroll_y >= self.max_scroll_y
        added = [strip_control_codes(part.expandtabs()) for line in lines for part in line.split("\n")]
        if not added:
            return
        self.lines.extend(added)
        self._widest = max(self._widest, max(map(cell_len, added)))
        self.virtual_size = Size(self._widest, len(self.lines))
        if follow:
            self.scroll_end(animate=False, immediate=False, x_axis=False)
        self.refresh()

    def clear(self) -> None:
        self.lines.clear()
        self._widest = 0
        self.virtual_size = Size(0, 0)
        self.scroll_to(0, 0, animate=False, immediate=True)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.scrollable_content_region.width
        style = self.rich_style
        if index >= len(self.lines):
            return Strip.blank(width, style)
        return Strip([Segment(self.lines[index], style)]).crop_extend(scroll_x, scroll_x + width, style)
