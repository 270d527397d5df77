"""The fleet's header lines and the score histograms' bins: pure functions over a snapshot."""

from __future__ import annotations

import math
from collections.abc import Iterable

from core.report.figures import busy_fraction, device_word, kernel_fraction, problem_figures
from core.report.progress import duration, is_prepared, preparable, preparation_eta_s
from core.store.model import ProblemRow
from tui.fleet.lifecycle import state_text
from tui.formatting import fmt_count, fmt_duration, fmt_sol, fmt_x, sparkline
from tui.snapshot import Snapshot

# core.planner.model: no agent works on these
DONE_STATUSES = ("done", "plateaued", "over budget", "failed", "unrunnable")
SOL_EDGES = tuple(i / 10 for i in range(11))
SPEEDUP_EDGES = (0.0, 0.5, 0.9, 1.1, 1.5, 2.0, 3.0, 5.0, 10.0, math.inf)


def speedup_label(a: float, b: float) -> str:
    return f"≥{a:g}x" if math.isinf(b) else f"{a:g}–{b:g}x"


def done_count(problems: Iterable[ProblemRow]) -> int:
    return sum(p.status in DONE_STATUSES for p in problems)


SPARKLINE_POINTS = 16


def header_lines(s: Snapshot, width: int | None = None) -> list[str]:
    """The header's two lines; with ``width`` (the header's columns), the second makes room for the devices'
    kernel time by leaving out "llm ok" (a failing endpoint stays) and then shortening the sparkline."""
    run = s.run
    state = state_text(run, s.lifecycle)
    end = run.ended_at if run and run.ended_at else s.now
    elapsed = fmt_duration(end - run.created_at) if run else "—"
    active = sum(p.status == "active" for p in s.problems)
    busy_now, kernels_now = busy_fraction(s.metrics), kernel_fraction(s.metrics)
    busy = "—" if busy_now is None else f"{busy_now * 100:.0f}%"
    # Held is not in use: where kernel time is measured (NVML, core.evaluate.kernel_time) both show.
    devices = f"{device_word(run)} {busy}" if kernels_now is None else \
        f"{device_word(run)} held {busy} kernels {kernels_now * 100:.0f}%"
    # From the problems as they are now (a metric sample may predate the latest best), as the report counts them.
    figures = problem_figures(s.problems)
    to_prepare = preparable(s.problems)
    prepared = sum(is_prepared(p) for p in to_prepare)
    if run is not None and run.state == "running" and prepared < len(to_prepare):
        left = preparation_eta_s(to_prepare, s.now - run.created_at)
        progress = f"preparing {prepared}/{len(to_prepare)}" + (f", ~{duration(left)} left" if left else "")
    elif state == "running":
        progress = f"problems {active} active, {done_count(s.problems)} done / {len(s.problems)}"
    else:  # no agent works on a problem any more, whatever its status says
        progress = f"problems {done_count(s.problems)} done / {len(s.problems)}"
    line1 = f"{s.run_name} [{state}] {elapsed} · {progress} · attempts {s.totals.attempts}"
    llm = endpoint_text(s)
    tokens = ("~" if s.totals.estimated else "") + fmt_count(s.totals.tokens)
    parts = token_parts_text(s)
    sols = [m.fleet_mean_sol for m in s.metrics]

    def line2(llm: str, points: int) -> str:
        spark = sparkline(sols, points) if points > 0 else ""
        return (f"{devices} · {tokens} tok ${s.totals.dollars:.2f}{parts}{' · ' + llm if llm else ''} · "
                f"SOL {fmt_sol(figures.mean_sol)}{' ' + spark if spark else ''} · "
                f"geomean {fmt_x(figures.geomean_speedup)}")

    second = line2(llm, SPARKLINE_POINTS)
    if width is not None and len(second) > width and kernels_now is not None:
        if llm == "llm ok":
            llm = ""
            second = line2(llm, SPARKLINE_POINTS)
        if len(second) > width:
            second = line2(llm, max(0, SPARKLINE_POINTS - (len(second) - width)))
    return [line1, second]


def token_parts_text(s: Snapshot) -> str:
    """The model tokens' reasoning and cached parts with their dollars, where there are any: " (8.1k reasoning
    $0.08, 3.0k cached $0.00)"."""
    t = s.totals
    parts = [f"{fmt_count(n)} {what} ${usd:.2f}" for n, what, usd in
             ((t.reasoning_tokens, "reasoning", t.reasoning_dollars), (t.cached_tokens, "cached", t.cached_dollars))
             if n]
    return f" ({', '.join(parts)})" if parts else ""


def endpoint_text(s: Snapshot, error_chars: int = 40) -> str:
    """The LLM endpoint's state: "llm ok", "llm retrying (N failed): ERROR" or "llm down: ERROR" (down once the
    run has stopped agents after failing tries); "" before any model call."""
    e = s.endpoint
    if not e.calls:
        return ""
    if not e.failing:
        return "llm ok"
    error = e.last_error if len(e.last_error) <= error_chars else e.last_error[:error_chars - 1] + "…"
    if any(a.state == "stopped" for a in s.agents):
        return f"llm down: {error}"
    return f"llm retrying ({e.failing} failed): {error}"
