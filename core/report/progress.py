"""How far a run's preparation is (T_sol, T_b and the seed of each problem) and when it should end: one formula for
the headless log and the TUI's header (pure)."""

from __future__ import annotations

from collections.abc import Iterable

from core.store.model import ProblemRow


def is_prepared(row: ProblemRow) -> bool:
    """Its T_sol and T_b are recorded (its seed follows at once), or its first attempt (a problem with nothing to
    measure), or it could not be prepared."""
    return bool(row.workloads) or row.attempts > 0 or row.status == "failed"


def preparable(rows: Iterable[ProblemRow]) -> list[ProblemRow]:
    """The problems a run prepares: all but those no workload of which can run on its machine ("unrunnable"), which
    count neither as prepared nor in the pace."""
    return [r for r in rows if r.status != "unrunnable"]


def preparation_left_s(prepared: int, total: int, elapsed_s: float) -> float | None:
    """Seconds until every problem is prepared at the pace so far (which counts the preparations that run side by
    side); None before the first is done, or once all are."""
    if prepared <= 0 or prepared >= total or elapsed_s <= 0:
        return None
    return elapsed_s / prepared * (total - prepared)


def preparation_line(rows: Iterable[ProblemRow], elapsed_s: float) -> str:
    """E.g. "prepared 5/21 problems in 4 min 9 s; about 13 min left"; "" once every problem is prepared."""
    rows = preparable(rows)
    prepared = sum(is_prepared(r) for r in rows)
    if prepared >= len(rows):
        return ""
    left = preparation_left_s(prepared, len(rows), elapsed_s)
    return (f"prepared {prepared}/{len(rows)} problems in {duration(elapsed_s)}"
            + (f"; about {duration(left)} left" if left is not None else ""))


def duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {rest} s" if rest and minutes < 10 else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
