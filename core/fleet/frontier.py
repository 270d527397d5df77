"""A problem's per-workload frontier, and the rule that picks an LLM agent's starting point from it (pure).

The frontier is the smallest set of passing attempts that, together, hold a time within ``FRONTIER_TOLERANCE`` of
the fastest one on every workload measured, or within the measured spread of either timing where that is larger
(on the H200 the smallest workloads' spreads are 5-11%: a lead inside them is noise). Partial attempts count on the workloads they covered; composites
(``core.fleet.composite``) do not count, since they are made of members. Chosen greedily: the attempt near the
fastest on the most workloads not yet held (a full one before a partial one, then the one closest to the fastest
times, then the earlier), until every workload is held. Each workload is then led by the fastest chosen attempt
on it, and a chosen attempt that leads nothing is dropped. The tolerance keeps near-equal variants (a tuner's
trials, timing noise) from splitting the frontier: a specialist joins only where it is clearly faster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.store.model import FrontierMember, PassingTimes, WorkloadInfo

FRONTIER_TOLERANCE = 0.03


def compute_frontier(attempts: Sequence[PassingTimes],
                     tolerance: float = FRONTIER_TOLERANCE) -> tuple[FrontierMember, ...]:
    """The frontier of ``attempts`` (a problem's passing attempts), its members ordered by the first workload each
    leads."""
    candidates = [a for a in attempts if not a.composite and a.times_ms]
    fastest: dict[int, float] = {}
    fastest_spread: dict[int, float] = {}
    for attempt in candidates:
        for index, ms in attempt.times_ms.items():
            if ms > 0 and (index not in fastest or ms < fastest[index]):
                fastest[index] = ms
                fastest_spread[index] = attempt.spreads.get(index, 0.0)

    def near_fastest(a: PassingTimes, index: int, ms: float) -> bool:
        # Within the tolerance, or within the noise of either timing: a lead smaller than the spread is not one.
        allowed = max(tolerance, fastest_spread.get(index, 0.0), a.spreads.get(index, 0.0))
        return index in fastest and ms <= fastest[index] * (1 + allowed)

    near = {a.attempt_id: {i for i, ms in a.times_ms.items() if near_fastest(a, i, ms)} for a in candidates}
    candidates = [a for a in candidates if near[a.attempt_id]]  # only these can be chosen
    uncovered = set(fastest)
    chosen: list[PassingTimes] = []
    while uncovered:
        def rank(a: PassingTimes) -> tuple:
            held = near[a.attempt_id] & uncovered
            closeness = sum(a.times_ms[i] / fastest[i] for i in held)
            return (-len(held), not a.full, closeness, a.attempt_id)

        pick = min(candidates, key=rank)
        if not near[pick.attempt_id] & uncovered:
            break  # cannot happen (the fastest attempt on a workload is near it), kept as a guard against a loop
        chosen.append(pick)
        uncovered -= near[pick.attempt_id]
    leads: dict[int, list[int]] = {a.attempt_id: [] for a in chosen}
    for index in sorted(fastest):
        timed = [a for a in chosen if index in a.times_ms]
        leader = min(timed, key=lambda a: a.times_ms[index])  # min keeps the earlier chosen one on a tie
        leads[leader.attempt_id].append(index)
    members = [FrontierMember(a.attempt_id, tuple(leads[a.attempt_id]),
                              tuple(a.times_ms[i] for i in leads[a.attempt_id]), a.speedup, a.full)
               for a in chosen if leads[a.attempt_id]]
    return tuple(sorted(members, key=lambda m: m.leads[0]))


@dataclass(frozen=True)
class StartingChoice:
    """Which attempt an agent starts from, the workloads it leads on the frontier, and why it was chosen."""

    attempt_id: int
    leads: tuple[int, ...]
    reason: str


def choose_start(frontier: Sequence[FrontierMember], workloads: Sequence[WorkloadInfo],
                 best_attempt_id: int | None) -> StartingChoice | None:
    """The frontier member that leads the workload furthest from its bound: the largest multiple of T_sol when
    every led workload has T_sol, else the largest share of T_b (the least speedup). With one member, or no
    bound known, the current best (None without one)."""
    info = {w.index: w for w in workloads}
    led = [(m, i, ms) for m in frontier for i, ms in zip(m.leads, m.lead_ms)]
    best_member = next((m for m in frontier if m.attempt_id == best_attempt_id), None)
    best_leads = best_member.leads if best_member is not None else ()
    if len(frontier) == 1:
        (only,) = frontier
        return StartingChoice(only.attempt_id, only.leads, "it leads every workload measured: the frontier has no "
                                                           "other member")
    if led and all(info.get(i) is not None and info[i].t_sol_ms for _, i, _ in led):
        member, index, ms = max(led, key=lambda x: x[2] / info[x[1]].t_sol_ms)
        return StartingChoice(member.attempt_id, member.leads,
                              f"it leads workload {index}{_axes(info, index)}, the one furthest from T_sol: its "
                              f"fastest time {ms:.4g} ms is {ms / info[index].t_sol_ms:.3g}x T_sol")
    if led and all(info.get(i) is not None and info[i].t_b_ms for _, i, _ in led):
        member, index, ms = max(led, key=lambda x: x[2] / info[x[1]].t_b_ms)
        return StartingChoice(member.attempt_id, member.leads,
                              f"it leads workload {index}{_axes(info, index)}, the one with the least speedup "
                              f"(T_sol unknown): {info[index].t_b_ms / ms:.3g}x over T_b")
    if best_attempt_id is None:
        return None
    return StartingChoice(best_attempt_id, best_leads, "the current best (no frontier with known bounds)")


def _axes(info: dict[int, WorkloadInfo], index: int) -> str:
    axes = info[index].axes if index in info else ""
    return f" ({axes})" if axes else ""
