"""The problem grid: a light line-API widget (not a DataTable) whose rows are keyed by problem key.

Only the visible lines are ever rendered, one strip per line, from a cache holding each row's last strip with the
cells and style variant it was drawn from: a poll that changes a row re-renders that row alone (and only when it is
on screen), where a DataTable drops its whole render cache on any cell update. The cache holds one strip per
problem at most, so it stays as large as the grid however long the run goes on (the age column changes every
second). The header line stays put; the key column is the fixed one. An unrunnable problem's row says why after
its status, in place of the figures it has none of; a click on a column's header asks the screen to sort by it."""

from __future__ import annotations

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.strip import Strip

from tui.problems.model import GRID_COLUMNS, NOTE
from tui.rows import ROW_BINDINGS, CursorRows

# column key -> width (the key column is as wide as the longest key)
_WIDTHS = {"subset": 10, "priority": 3, "status": 11, "agents": 2, "attempts": 4, "speedup": 7, "bar": 8, "sol": 4,
           "change": 4}
_LABELS = dict(GRID_COLUMNS)
_INDEX = {key: i for i, (key, _) in enumerate(GRID_COLUMNS)}
NARROW_STATUS = 9  # "over budget" reads "over budg"
# What gives way, in order, when the row is wider than the grid: the subset (the key holds it), the SOL bar (the
# number stays), the last change's age, the status's last cells, the priority. Only then is the key cut.
GIVE_WAY = ("subset", "bar", "change", "status", "priority")
# The columns an unrunnable problem's row draws before its note (why it cannot run), which takes the rest.
BEFORE_NOTE = ("key", "subset", "priority", "status")

# row variants
_EVEN, _ODD, _CURSOR = 0, 1, 2


def _cut(text: str, width: int) -> str:
    """``text`` in ``width`` cells, ending in "…" when it is cut."""
    return set_cell_size(text, width) if cell_len(text) <= width else set_cell_size(text, width - 1) + "…"


class ProblemGrid(CursorRows, can_focus=True):
    BINDINGS = [Binding("enter", "select_cursor", "detail", show=True), *ROW_BINDINGS]
    COMPONENT_CLASSES = {"problem-grid--header", "problem-grid--fixed", "problem-grid--fixed-cursor",
                         "problem-grid--even-row", "problem-grid--odd-row", "problem-grid--cursor"}
    DEFAULT_CSS = """
    ProblemGrid {
        background: $surface;
        color: $foreground;
        &:focus {
            background-tint: $foreground 5%;
            & > .problem-grid--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .problem-grid--header { background-tint: $foreground 5%; }
            & > .problem-grid--fixed-cursor {
                color: $block-cursor-foreground;
                background: $block-cursor-background;
            }
        }
        &:dark { & > .problem-grid--even-row { background: $surface-darken-1 40%; } }
        & > .problem-grid--header { text-style: bold; background: $panel; color: $foreground; }
        &:ansi > .problem-grid--header { background: ansi_bright_blue; color: ansi_default; }
        & > .problem-grid--fixed { background: $secondary-muted; color: $foreground; }
        & > .problem-grid--odd-row { }
        & > .problem-grid--even-row { background: $surface-lighten-1 50%; }
        & > .problem-grid--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        & > .problem-grid--fixed-cursor { background: $block-cursor-blurred-background; color: $foreground; }
    }
    """

    class HeaderClicked(Message):
        """A click on the header of the column ``column`` (a GRID_COLUMNS key)."""

        def __init__(self, grid: ProblemGrid, column: str):
            super().__init__()
            self.grid = grid
            self.column = column

        @property
        def control(self) -> ProblemGrid:
            return self.grid

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._order: list[str] | None = None
        self._index: dict[str, int] = {}
        self._cells: dict[str, tuple[str, ...]] = {}
        self._columns: tuple[str, ...] = ()  # the columns shown (GRID_COLUMNS keys), as laid out for the width
        self._picks: tuple[int, ...] = ()  # their indexes in a row's cells
        self._key_width = 12  # the longest key seen
        self._strips: dict[str, tuple[tuple[str, ...], int, Strip]] = {}  # row key -> (cells, variant, strip)
        self._layout: tuple[int, tuple[int, ...]] | None = None  # (widget width, column widths)
        self._header: Strip | None = None

    # ------------------------------------------------------------ state

    @property
    def row_count(self) -> int:
        return len(self._order or ())

    @property
    def selected_key(self) -> str | None:
        if not self._order or not 0 <= self.cursor_row < len(self._order):
            return None
        return self._order[self.cursor_row]

    def select(self, key: str) -> None:
        """The cursor to the row of ``key`` (nothing when it is not shown)."""
        if key in self._index:
            self.move_cursor(self._index[key])

    def _widths(self, width: int) -> tuple[int, ...]:
        """The columns shown and their widths (without the one-cell padding either side) in a grid ``width`` cells
        wide: the key column as wide as the longest key, the others giving way (GIVE_WAY) until the row fits."""
        if self._layout is not None and self._layout[0] == width:
            return self._layout[1]
        widths = {"key": self._key_width, **_WIDTHS}
        for column in GIVE_WAY:
            if sum(w + 2 for w in widths.values()) <= width:
                break
            if column == "status":
                widths["status"] = NARROW_STATUS
            else:
                del widths[column]
        over = sum(w + 2 for w in widths.values()) - width
        if over > 0:
            widths["key"] = max(8, widths["key"] - over)
        self._columns = tuple(widths)
        self._picks = tuple(_INDEX[c] for c in self._columns)
        self._layout = (width, tuple(widths.values()))
        self._strips.clear()
        self._header = None
        return self._layout[1]

    def show(self, rows: list[tuple[str, tuple[str, ...]]]) -> None:
        """Show ``rows`` ((key, cells in GRID_COLUMNS order), in display order). The same order: only the visible
        rows whose cells changed are repainted. A changed order or set of rows repaints the view, keeping the
        cursor on the same problem."""
        longest = max([self._key_width, *(cell_len(k) for k, _ in rows)])
        relayout = longest != self._key_width
        if relayout:
            self._key_width = longest
            self._forget_render()
        order = [k for k, _ in rows]
        if relayout or order != self._order:
            selected = self.selected_key
            self._order = order
            self._index = {k: i for i, k in enumerate(order)}
            self._cells = dict(rows)
            self.virtual_size = Size(0, len(order) + 1)
            if selected in self._index:
                self.cursor_row = self._index[selected]
            else:
                self.cursor_row = max(0, min(self.cursor_row, len(order) - 1))
            self._scroll_to_cursor()
            self.refresh()
            return
        cells_now = self._cells
        top = int(self.scroll_y)
        bottom = top + max(0, self.scrollable_content_region.height - 1)
        dirty: list[int] = []
        for i, (key, cells) in enumerate(rows):
            if cells_now[key] != cells:
                cells_now[key] = cells
                if top <= i < bottom:
                    dirty.append(i - top + 1)
        if dirty:
            width = self.scrollable_content_region.width
            lo, hi = min(dirty), max(dirty)
            self.refresh(Region(0, lo, width, hi - lo + 1))  # one region: one repaint of those lines

    # ------------------------------------------------------------ rendering

    def _forget_render(self) -> None:
        self._strips.clear()
        self._styles = None
        self._layout = None
        self._header = None

    def on_resize(self) -> None:
        self._layout = None
        self._header = None
        self._strips.clear()

    def _line(self, texts: tuple[str, ...], widths: tuple[int, ...], fixed: Style, rest: Style, width: int,
              note: str = "") -> Strip:
        first = " " + _cut(texts[0], widths[0]) + " " if texts else ""
        if note:
            # The status in full ("unrunnable" where a narrow grid cuts statuses), as nothing is aligned after it.
            others = "".join(" " + set_cell_size(t, max(w, cell_len(t)) if c == "status" else w) + " "
                             for c, t, w in zip(self._columns[1:], texts[1:], widths[1:]) if c in BEFORE_NOTE)
            room = width - cell_len(first) - cell_len(others) - 2
            if room > 0:
                others += " " + _cut(note, room) + " "
        else:
            others = "".join(" " + set_cell_size(t, w) + " " for t, w in zip(texts[1:], widths[1:]))
        segments = [Segment(first, fixed), Segment(others, rest)]
        return Strip(segments, cell_len(first) + cell_len(others)).adjust_cell_length(width, rest)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        widths = self._widths(width)
        if y == 0:
            if self._header is None:
                header = self._style("problem-grid--header")
                self._header = self._line(tuple(_LABELS[k] for k in self._columns), widths, header, header, width)
            return self._header
        row = int(self.scroll_y) + y - 1
        order = self._order or ()
        if row >= len(order):
            return Strip.blank(width, self._style("base"))
        key = order[row]
        cells = self._cells[key]
        variant = _CURSOR if row == self.cursor_row else (_ODD if row % 2 else _EVEN)
        cached = self._strips.get(key)
        if cached is not None and cached[0] == cells and cached[1] == variant:
            return cached[2]
        if variant == _CURSOR:
            fixed, rest = self._style("problem-grid--fixed-cursor"), self._style("problem-grid--cursor")
        else:
            rest = self._style("problem-grid--odd-row" if variant == _ODD else "problem-grid--even-row")
            fixed = rest + self.get_component_rich_style("problem-grid--fixed")
        strip = self._line(tuple(cells[i] for i in self._picks), widths, fixed, rest, width, cells[NOTE])
        self._strips[key] = (cells, variant, strip)
        return strip

    def on_click(self, event: events.Click) -> None:
        if event.y != 0:
            super().on_click(event)
            return
        widths = self._widths(self.scrollable_content_region.width)  # lays out self._columns first
        x = 0
        for column, width in zip(self._columns, widths):
            x += width + 2
            if event.x < x:
                self.post_message(self.HeaderClicked(self, column))
                return
