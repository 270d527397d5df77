"""What the line-API tables (the problem grid, the detail's tables) share: a header line over keyed rows, a row
cursor with keys, clicks and scrolling, and component styles resolved once per look."""

from __future__ import annotations

from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Region
from textual.message import Message
from textual.scroll_view import ScrollView

ROW_BINDINGS = [
    Binding("up", "cursor_up", "up", show=False),
    Binding("down", "cursor_down", "down", show=False),
    Binding("pageup", "page_up", "page up", show=False),
    Binding("pagedown", "page_down", "page down", show=False),
    Binding("home", "first", "first", show=False),
    Binding("end", "last", "last", show=False),
]


class CursorRows(ScrollView):
    """Line 0 is the header; row i is drawn on line i + 1 - scroll_y. Subclasses provide ``row_count``,
    ``selected_key``, ``render_line`` and ``_forget_render`` (which must reset ``_styles``)."""

    show_cursor = True

    class RowSelected(Message):
        """Enter (or a click on the cursor row) on a row."""

        def __init__(self, rows: CursorRows, key: str):
            super().__init__()
            self.rows = rows
            self.key = key

        @property
        def control(self) -> CursorRows:
            return self.rows

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.cursor_row = 0
        self._styles: dict[str, Style] | None = None

    @property
    def row_count(self) -> int:
        raise NotImplementedError

    @property
    def selected_key(self) -> str | None:
        raise NotImplementedError

    def _forget_render(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------ cursor

    def move_cursor(self, row: int, scroll: bool = True) -> None:
        if not self.row_count or not self.show_cursor:
            return
        row = max(0, min(row, self.row_count - 1))
        old, self.cursor_row = self.cursor_row, row
        if scroll:
            self._scroll_to_cursor()
        self._refresh_row(old)
        self._refresh_row(row)

    def _refresh_row(self, row: int) -> None:
        line = row - int(self.scroll_y) + 1
        if 1 <= line < self.scrollable_content_region.height:
            self.refresh(Region(0, line, self.scrollable_content_region.width, 1))

    def _scroll_to_cursor(self) -> None:
        visible = self.scrollable_content_region.height - 1
        if visible < 1:
            if self.is_mounted:
                self.call_after_refresh(self._scroll_to_cursor)
            return
        top = int(self.scroll_y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False, immediate=True)
        elif self.cursor_row >= top + visible:
            self.scroll_to(y=self.cursor_row - visible + 1, animate=False, immediate=True)

    def _page(self) -> int:
        return max(1, self.scrollable_content_region.height - 2)

    def _step(self, by: int) -> None:
        if self.show_cursor:
            self.move_cursor(self.cursor_row + by)
        else:
            self.scroll_to(y=self.scroll_y + by, animate=False)

    def action_cursor_up(self) -> None:
        self._step(-1)

    def action_cursor_down(self) -> None:
        self._step(1)

    def action_page_up(self) -> None:
        self._step(-self._page())

    def action_page_down(self) -> None:
        self._step(self._page())

    def action_first(self) -> None:
        self._step(-self.row_count)

    def action_last(self) -> None:
        self._step(self.row_count)

    def action_select_cursor(self) -> None:
        key = self.selected_key
        if key is not None:
            self.post_message(self.RowSelected(self, key))

    def on_click(self, event: events.Click) -> None:
        row = int(self.scroll_y) + event.y - 1
        if event.y < 1 or row >= self.row_count or not self.show_cursor:
            return
        if row == self.cursor_row:
            self.action_select_cursor()
        else:
            self.move_cursor(row, scroll=False)

    # ------------------------------------------------------------ styles

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._forget_render()
        self.refresh()

    def on_focus(self) -> None:
        self._forget_render()
        self.refresh()

    def on_blur(self) -> None:
        self._forget_render()
        self.refresh()

    def _style(self, name: str) -> Style:
        if self._styles is None:
            base = self.rich_style
            self._styles = {"base": base}
            for component in self.COMPONENT_CLASSES:
                self._styles[component] = base + self.get_component_rich_style(component)
        return self._styles[name]
