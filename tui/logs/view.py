"""A bounded log widget: the last ``max_lines`` lines as plain strings, wrapped to the widget's width (so a verdict
at the end of a long line is never cut off) and drawn only when on screen.

RichLog renders every line into segments as it is written (and schedules a scroll per line), and keeps the rendered
lines plus a cache of 1024 more: at 200 lines a second that is most of the watcher's work and memory for lines
nobody sees. Here writing appends strings to a deque and wraps only them; ``render_line`` draws the few rows in
view. A resize wraps the kept lines again (a thousand short strings)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from rich.cells import cell_len
from rich.control import strip_control_codes
from rich.segment import Segment
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

INDENT = 2  # a wrapped line's continuation rows are indented by this much


def _fit(text: str, cells: int) -> int:
    """How many characters of ``text`` fit in ``cells`` cells (at least one)."""
    if text.isascii():
        return max(1, min(len(text), cells))
    used = 0
    for i, char in enumerate(text):
        used += cell_len(char)
        if used > cells:
            return max(1, i)
    return len(text)


def wrap(line: str, width: int, indent: int = INDENT) -> list[str]:
    """``line`` as rows of at most ``width`` cells, broken after a space where one is near the end of a row, the
    rows after the first indented by ``indent``. A width under ``indent`` + 8 leaves the line whole."""
    if width < indent + 8 or cell_len(line) <= width:
        return [line]
    rows = []
    rest, room = line, width
    while cell_len(rest) > room:
        cut = _fit(rest, room)
        space = rest.rfind(" ", 0, cut + 1)
        if space > cut // 2:  # break at the space (it ends this row; the next starts after it)
            rows.append(rest[:space])
            rest = rest[space + 1:]
        else:
            rows.append(rest[:cut])
            rest = rest[cut:]
        if len(rows) == 1:
            room = width - indent
    rows.append(rest)
    return [rows[0]] + [" " * indent + row for row in rows[1:]]


class LogView(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    LogView {
        background: $surface;
        color: $foreground;
        overflow-y: scroll;
        overflow-x: hidden;
        &:focus { background-tint: $foreground 5%; }
    }
    """

    def __init__(self, max_lines: int, **kwargs):
        super().__init__(**kwargs)
        self.lines: deque[str] = deque(maxlen=max_lines)
        self._rows: deque[str] = deque()  # the lines' rows as drawn at ``_width``
        self._counts: deque[int] = deque()  # how many rows each kept line has, in order
        self._width = 0  # the width the rows were wrapped to (0: not laid out yet, a line is a row)

    def write_lines(self, lines: Iterable[str]) -> None:
        """Append ``lines`` (a line with newlines becomes several); the view follows the end if it was there."""
        follow = self.scroll_y >= self.max_scroll_y
        added = [strip_control_codes(part.expandtabs()) for line in lines for part in line.split("\n")]
        if not added:
            return
        for line in added:
            if len(self.lines) == self.lines.maxlen:
                self.lines.popleft()
                for _ in range(self._counts.popleft()):
                    self._rows.popleft()
            self.lines.append(line)
            self._add_rows(line)
        self._sized()
        if follow:
            self.scroll_end(animate=False, immediate=False, x_axis=False)
        self.refresh()

    def _add_rows(self, line: str) -> None:
        rows = wrap(line, self._width) if self._width else [line]
        self._rows.extend(rows)
        self._counts.append(len(rows))

    def _sized(self) -> None:
        self.virtual_size = Size(self._width, len(self._rows))

    def clear(self) -> None:
        self.lines.clear()
        self._rows.clear()
        self._counts.clear()
        self._sized()
        self.scroll_to(0, 0, animate=False, immediate=True)
        self.refresh()

    def on_resize(self) -> None:
        width = self.scrollable_content_region.width
        if width == self._width:
            return
        follow = self.scroll_y >= self.max_scroll_y
        self._width = width
        self._rows.clear()
        self._counts.clear()
        for line in self.lines:
            self._add_rows(line)
        self._sized()
        if follow:
            self.scroll_end(animate=False, immediate=False, x_axis=False)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        index = self.scroll_offset.y + y
        width = self.scrollable_content_region.width
        style = self.rich_style
        if index >= len(self._rows):
            return Strip.blank(width, style)
        return Strip([Segment(self._rows[index], style)]).crop_extend(0, width, style)
