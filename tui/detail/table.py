"""The detail's tables (workloads, attempts): a light line-API widget with DataTable's look, keyed rows of plain
strings, drawn only when visible from one cached strip per row.

The detail is refilled each time it opens. A DataTable refilled drops its caches and renders every visible cell
through Rich again, and it restyles a dozen component classes when its screen comes back; together that was about
half the cost of opening a problem's detail."""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from textual.binding import Binding
from textual.geometry import Size
from textual.strip import Strip

from tui.rows import ROW_BINDINGS, CursorRows

# a row's look -> its component class
_VARIANTS = {"even": "line-table--even-row", "odd": "line-table--odd-row", "cursor": "line-table--cursor"}


class LineTable(CursorRows, can_focus=True):
    BINDINGS = [Binding("enter", "select_cursor", "select", show=False), *ROW_BINDINGS]
    COMPONENT_CLASSES = {"line-table--header", "line-table--even-row", "line-table--odd-row", "line-table--cursor"}
    DEFAULT_CSS = """
    LineTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;
        &:focus {
            background-tint: $foreground 5%;
            & > .line-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .line-table--header { background-tint: $foreground 5%; }
        }
        &:dark { & > .line-table--even-row { background: $surface-darken-1 40%; } }
        & > .line-table--header { text-style: bold; background: $panel; color: $foreground; }
        &:ansi > .line-table--header { background: ansi_bright_blue; color: ansi_default; }
        & > .line-table--odd-row { }
        & > .line-table--even-row { background: $surface-lighten-1 50%; }
        & > .line-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """

    def __init__(self, columns: Sequence[str], *, cursor: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.columns = tuple(columns)
        self.show_cursor = cursor
        self._keys: list[str] = []
        self._index: dict[str, int] = {}
        self._cells: dict[str, tuple[str, ...]] = {}
        self._widths = [cell_len(c) for c in self.columns]  # grow with the widest cell, as a DataTable's do
        self._strips: dict[str, tuple[tuple[str, ...], str, Strip]] = {}  # row key -> (cells, variant, strip)
        self._header: Strip | None = None
        self._resize()

    # ------------------------------------------------------------ rows

    @property
    def row_count(self) -> int:
        return len(self._keys)

    @property
    def selected_key(self) -> str | None:
        return self._keys[self.cursor_row] if self.show_cursor and self._keys else None

    def clear(self) -> None:
        self._keys.clear()
        self._index.clear()
        self._cells.clear()
        self._strips.clear()
        self._widths = [cell_len(c) for c in self.columns]
        self._header = None
        self.cursor_row = 0
        self._resize()
        self.scroll_to(0, 0, animate=False, immediate=True)
        self.refresh()

    def set_row(self, key: str, cells: tuple[str, ...]) -> None:
        """Update the row ``key``, or add it at the end; only a visible row that changed is repainted."""
        if self._cells.get(key) == cells:
            return
        widened = False
        for i, cell in enumerate(cells):
            if cell_len(cell) > self._widths[i]:
                self._widths[i] = cell_len(cell)
                widened = True
        self._cells[key] = cells
        if key not in self._index:
            self._index[key] = len(self._keys)
            self._keys.append(key)
            self._resize()
        if widened:
            self._strips.clear()
            self._header = None
            self._resize()
            self.refresh()
        else:
            self._refresh_row(self._index[key])

    def _resize(self) -> None:
        self.virtual_size = Size(sum(w + 2 for w in self._widths), len(self._keys) + 1)

    # ------------------------------------------------------------ rendering

    def _forget_render(self) -> None:
        self._strips.clear()
        self._styles = None
        self._header = None

    def _line(self, cells: Sequence[str], style) -> Strip:
        text = "".join(" " + set_cell_size(c, w) + " " for c, w in zip(cells, self._widths))
        return Strip([Segment(text, style)], cell_len(text))

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        if y == 0:
            style = self._style("line-table--header")
            if self._header is None:
                self._header = self._line(self.columns, style)
            strip = self._header
        else:
            row = scroll_y + y - 1
            if row >= len(self._keys):
                return Strip.blank(width, self._style("base"))
            key = self._keys[row]
            cells = self._cells[key]
            variant = "cursor" if self.show_cursor and row == self.cursor_row else "odd" if row % 2 else "even"
            style = self._style(_VARIANTS[variant])
            cached = self._strips.get(key)
            if cached is not None and cached[0] == cells and cached[1] == variant:
                strip = cached[2]
            else:
                strip = self._line(cells, style)
                self._strips[key] = (cells, variant, strip)
        return strip.crop_extend(scroll_x, scroll_x + width, style)  # a row's look spans the width, as in a DataTable
