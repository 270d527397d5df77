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


def preparation_left_by_subset_s(rows: Iterable[ProblemRow], elapsed_s: float) -> float | None:
    """Seconds until every problem is prepared: for each problem not prepared yet, the mean time its subset's
    prepared ones took (``subset_paces``; every subset's mean where its own has none yet), over how many
    preparations ran side by side so far (the time they took in all over ``elapsed_s``, at least one). Unrunnable
    problems are left out, and so are those prepared with no time recorded (before store version 11). None before
    the first preparation ends, or once all are done."""
    rows = preparable(rows)
    took = [r.preparation_s for r in rows if is_prepared(r) and r.preparation_s is not None]
    waiting = [r for r in rows if not is_prepared(r)]
    if not took or not waiting or elapsed_s <= 0:
        return None
    paces, overall = subset_paces(rows), sum(took) / len(took)
    return sum(paces.get(r.subset, overall) for r in waiting) / max(1.0, sum(took) / elapsed_s)


def subset_paces(rows: Iterable[ProblemRow]) -> dict[str, float]:
    """Subset -> the mean seconds its prepared problems' preparations took."""
    times: dict[str, list[float]] = {}
    for r in preparable(rows):
        if is_prepared(r) and r.preparation_s is not None:
            times.setdefault(r.subset, []).append(r.preparation_s)
    return {subset: sum(t) / len(t) for subset, t in sorted(times.items())}


def preparation_eta_s(rows: Iterable[ProblemRow], elapsed_s: float) -> float | None:
    """The estimate the log and the TUI show: each subset at its own pace (``preparation_left_by_subset_s``), or,
    without recorded preparation times, the pace so far (``preparation_left_s``)."""
    rows = preparable(rows)
    left = preparation_left_by_subset_s(rows, elapsed_s)
    return left if left is not None else preparation_left_s(sum(is_prepared(r) for r in rows), len(rows), elapsed_s)


def preparation_line(rows: Iterable[ProblemRow], elapsed_s: float) -> str:
    """E.g. "prepared 5/21 problems in 4 min 9 s; about 13 min left (L1 1 min 40 s, Quant 10 s each)"; "" once
    every problem is prepared (``preparation_eta_s``)."""
    rows = preparable(rows)
    prepared = sum(is_prepared(r) for r in rows)
    if prepared >= len(rows):
        return ""
    left = preparation_eta_s(rows, elapsed_s)
    paces = subset_paces(rows)
    pace = " (" + ", ".join(f"{subset} {duration(seconds)}" for subset, seconds in paces.items()) + " each)" \
        if paces and left is not None else ""
    return (f"prepared {prepared}/{len(rows)} problems in {duration(elapsed_s)}"
            + (f"; about {duration(left)} left{pace}" if left is not None else ""))


def duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {rest} s" if rest and minutes < 10 else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
