"""The problem grid: a DataTable whose rows are keyed by problem key and updated cell by cell."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from tui.model import GRID_COLUMNS

NARROW = 110  # below this width the subset column is left out (the key holds it)

# column key -> width (None: sized from the content)
_WIDTHS = {"key": None, "subset": 10, "priority": 3, "status": 9, "agents": 2, "attempts": 4, "speedup": 7,
           "sol": 13, "change": 4}


class ProblemGrid(DataTable):
    BINDINGS = [Binding("enter", "select_cursor", "detail", show=True)]

    def __init__(self, **kwargs):
        super().__init__(cursor_type="row", zebra_stripes=True, fixed_columns=1, **kwargs)
        self._order: list[str] | None = None
        self._cells: dict[str, tuple[str, ...]] = {}
        self._narrow: bool | None = None
        self._columns: tuple[str, ...] = ()

    @property
    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:
            return None

    def _setup_columns(self, rows: list[tuple[str, tuple[str, ...]]]) -> None:
        self.clear(columns=True)
        narrow = self._narrow
        keys = [k for k, _ in GRID_COLUMNS if not (narrow and k == "subset")]
        key_width = max([12, *(len(k) for k, _ in rows)])
        key_width = min(key_width, 22 if narrow else 40)
        for key, label in GRID_COLUMNS:
            if key not in keys:
                continue
            width = _WIDTHS[key]
            if key == "key":
                width = key_width
            elif key == "sol":
                width = 13
            elif key == "status" and not narrow:
                width = 11
            self.add_column(label, width=width, key=key)
        self._columns = tuple(keys)

    def _project(self, cells: tuple[str, ...]) -> tuple[str, ...]:
        full = dict(zip((k for k, _ in GRID_COLUMNS), cells))
        return tuple(full[k] for k in self._columns)

    def show(self, rows: list[tuple[str, tuple[str, ...]]]) -> None:
        """Show ``rows`` ((key, cells in GRID_COLUMNS order), in display order): only changed cells are updated;
        a changed order or set of rows rebuilds the rows, keeping the cursor on the same problem."""
        narrow = self.app.size.width < NARROW
        with self.app.batch_update():
            if narrow != self._narrow:
                self._narrow = narrow
                self._setup_columns(rows)
                self._order = None
            rows = [(k, self._project(c)) for k, c in rows]
            order = [k for k, _ in rows]
            if order != self._order:
                selected = self.selected_key
                cursor = self.cursor_row
                self.clear()
                for key, cells in rows:
                    self.add_row(*map(Text, cells), key=key)  # Text: no markup parsing per render
                self._order = order
                self._cells = dict(rows)
                if selected in self._cells:
                    self.move_cursor(row=order.index(selected), animate=False, scroll=True)
                elif rows:
                    self.move_cursor(row=min(cursor, len(rows) - 1), animate=False)
                return
            for key, cells in rows:
                old = self._cells.get(key)
                if old == cells:
                    continue
                for column, before, after in zip(self._columns, old, cells):
                    if before != after:
                        self.update_cell(key, column, Text(after))
                self._cells[key] = cells
