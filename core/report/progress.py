"""How far a run's preparation is (T_sol, T_b and the seed of each problem) and when it should end: one formula for
the headless log and the TUI's header (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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


def preparation_left_by_subset_s(rows: Iterable[ProblemRow], took_s: Mapping[int, float],
                                 at_once: int) -> float | None:
    """Seconds until every problem is prepared: for each problem not yet prepared, the mean time its subset's
    prepared ones took here (all subsets' mean where its own has none yet), over the preparations that run side by
    side. Problems prepared before this start (``took_s`` lacks them) and unrunnable ones are not in the pace. None
    before the first preparation of this start ends, or once all are done."""
    rows = preparable(rows)
    done = [(r.subset, took_s[r.id]) for r in rows if is_prepared(r) and r.id in took_s]
    waiting = [r for r in rows if not is_prepared(r)]
    if not done or not waiting:
        return None
    by_subset: dict[str, list[float]] = {}
    for subset, seconds in done:
        by_subset.setdefault(subset, []).append(seconds)
    overall = sum(s for _, s in done) / len(done)
    mean = {subset: sum(times) / len(times) for subset, times in by_subset.items()}
    return sum(mean.get(r.subset, overall) for r in waiting) / max(1, at_once)


def preparation_line(rows: Iterable[ProblemRow], elapsed_s: float, took_s: Mapping[int, float] | None = None,
                     at_once: int = 1) -> str:
    """E.g. "prepared 5/21 problems in 4 min 9 s; about 13 min left (L1 94 s, L2 2 min each, 4 at a time)"; ""
    once every problem is prepared. With ``took_s`` (problem id -> seconds its preparation took), the estimate is
    per subset (``preparation_left_by_subset_s``); without, at the pace so far."""
    rows = preparable(rows)
    prepared = sum(is_prepared(r) for r in rows)
    if prepared >= len(rows):
        return ""
    pace = ""
    if took_s is not None:
        left = preparation_left_by_subset_s(rows, took_s, at_once)
        subsets: dict[str, list[float]] = {}
        for r in rows:
            if r.id in took_s and is_prepared(r):
                subsets.setdefault(r.subset, []).append(took_s[r.id])
        if left is not None:
            pace = " (" + ", ".join(f"{subset} {duration(sum(t) / len(t))}" for subset, t in sorted(subsets.items())) \
                + f" each, {at_once} at a time)"
    else:
        left = preparation_left_s(prepared, len(rows), elapsed_s)
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
