"""Text for the HTML report: every string from the store goes through :func:`esc` (element text and quoted
attribute values alike), and numbers are formatted the same way on every part of the page."""

from __future__ import annotations

import html
import math


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def finite(value: float | None) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


def fmt_x(value: float | None) -> str:
    return f"{value:.2f}×" if finite(value) else "—"


def fmt_num(value: float | None, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if finite(value) else "—"


def fmt_ms(value: float | None) -> str:
    """A time in ms with three significant digits (µs-scale kernels and 50 ms CPU calls on one page)."""
    if not finite(value):
        return "—"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def sort_key(value: float | None) -> str:
    """A table cell's ``data-v``: what the page's script sorts numbers by (no value sorts below every number)."""
    return repr(float(value)) if finite(value) else "-Infinity"


def clip(text: str, chars: int) -> str:
    """``text`` cut to ``chars`` characters with an ellipsis (the whole of it goes in a tooltip)."""
    return text if len(text) <= chars else text[:chars - 1] + "…"


def breakable(text: str) -> str:
    """``text`` escaped, with a line-break opportunity after each "/" and "_" (long problem keys wrap there)."""
    return esc(text).replace("/", "/<wbr>").replace("_", "_<wbr>")
