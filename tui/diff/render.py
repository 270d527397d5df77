"""Rendering an attempt's diff: unified (rich Syntax, "diff" lexer) or side by side (two columns aligned by
difflib, from :func:`tui.diff.model.side_by_side`)."""

from __future__ import annotations

from rich.console import RenderableType
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from tui.diff.model import SideRow, side_by_side

THEME = "monokai"

_STYLES = {
    "delete": ("red", ""),
    "insert": ("", "green"),
    "replace": ("red", "green"),
    "equal": ("", ""),
}


def unified(diff: str) -> RenderableType:
    if not diff.strip():
        return Text("(no changes: this attempt's sources equal its parent's)", style="dim")
    return Syntax(diff, "diff", theme=THEME, word_wrap=False, background_color="default")


def _cell(no: int | None, text: str, style: str, width: int) -> Text:
    prefix = f"{no:>{width}} " if no is not None else " " * (width + 1)
    cell = Text(prefix, style="dim")
    cell.append(text, style=style)
    return cell


def split(diff: str) -> RenderableType:
    rows = side_by_side(diff)
    if not rows:
        return Text("(no changes: this attempt's sources equal its parent's)", style="dim")
    width = max([len(str(n)) for r in rows for n in (r.left_no, r.right_no) if n is not None] or [1])
    table = Table(box=None, expand=True, show_header=False, padding=(0, 1), show_edge=False)
    table.add_column("old", ratio=1, no_wrap=True, overflow="crop")
    table.add_column("new", ratio=1, no_wrap=True, overflow="crop")
    for row in rows:
        table.add_row(*_row(row, width))
    return table


def _row(row: SideRow, width: int) -> tuple[Text, Text]:
    if row.kind == "file":
        return Text(row.left, style="bold"), Text(row.right, style="bold")
    if row.kind == "hunk":
        return Text(row.left, style="cyan"), Text("")
    left_style, right_style = _STYLES[row.kind]
    return _cell(row.left_no, row.left, left_style, width), _cell(row.right_no, row.right, right_style, width)
