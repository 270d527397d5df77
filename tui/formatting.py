"""Numbers, ages, SOL bars, sparklines and text histograms as short strings: what every area of the watcher
shows its values with. Pure functions."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence


def fmt_x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def fmt_sol(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 100:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.3f}"
    return f"{value:.4f}"


def fmt_count(n: float) -> str:
    n = float(n)
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{int(n)}"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


def fmt_ago(ts: float | None, now: float) -> str:
    """A short age: "12s", "5m", "3h", "2d" ("—" for none)."""
    if ts is None:
        return "—"
    age = max(0.0, now - ts)
    if age >= 100 * 86400:
        return ">99d"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if age >= size:
            return f"{int(age // size)}{unit}"
    return f"{int(age)}s"


_EIGHTHS = " ▏▎▍▌▋▊▉"


def sol_bar(sol: float | None, width: int = 8) -> str:
    """A SOL score in [0, 1] as a bar of ``width`` cells with eighth-cell resolution, padded with spaces."""
    if sol is None or not math.isfinite(sol):
        return " " * width
    eighths = round(min(1.0, max(0.0, sol)) * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (_EIGHTHS[part] if part else "")
    return text.ljust(width)


_SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float | None], width: int = 20) -> str:
    """The last ``width`` values as block characters, scaled to their own min and max (gaps for None)."""
    values = list(values)[-width:]
    real = [v for v in values if v is not None and math.isfinite(v)]
    if not real:
        return ""
    lo, hi = min(real), max(real)
    span = hi - lo
    out = []
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(" ")
        else:
            out.append(_SPARK[int((v - lo) / span * (len(_SPARK) - 1)) if span > 0 else len(_SPARK) // 2])
    return "".join(out)


def histogram(values: Iterable[float | None], edges: Sequence[float], width: int = 30,
              label: Callable[[float, float], str] | None = None) -> list[str]:
    """Text bars counting ``values`` in the bins between consecutive ``edges`` (the last bin is closed; values
    beyond the edges fall in the first or last bin)."""
    real = [v for v in values if v is not None and math.isfinite(v)]
    counts = [0] * (len(edges) - 1)
    for v in real:
        i = next((i for i in range(len(counts)) if v < edges[i + 1]), len(counts) - 1)
        counts[max(0, i)] += 1
    top = max(counts, default=0) or 1
    label = label or (lambda a, b: f"{a:.1f}–{b:.1f}")
    labels = [label(edges[i], edges[i + 1]) for i in range(len(counts))]
    lw = max((len(s) for s in labels), default=0)
    return [f"{labels[i]:>{lw}} │{'█' * round(c / top * width):<{width}} {c}" for i, c in enumerate(counts)]


def plural(n: int, word: str, words: str | None = None) -> str:
    """``n`` and the word, singular for exactly one: "1 attempt", "0 attempts", "2 problems"."""
    return f"{n} {word if n == 1 else words or word + 's'}"
