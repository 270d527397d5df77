"""How far each workload's fastest passing time is from its bounds (T_b, T_sol): what the brief's "Failing or
lagging" line and the planner model's per-problem details name. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from core.ranges import number_ranges
from core.store.model import WorkloadInfo


@dataclass(frozen=True)
class WorkloadGap:
    index: int
    best_ms: float | None  # the fastest passing time on it so far (None: none yet)
    t_b_ms: float | None
    t_sol_ms: float | None

    @property
    def speedup(self) -> float | None:
        """T_b / best: above 1 where the best beats the baseline."""
        return self.t_b_ms / self.best_ms if self.best_ms and self.t_b_ms else None

    @property
    def over_sol(self) -> float | None:
        """best / T_sol: how many times the speed-of-light time the best takes (1 is the bound)."""
        return self.best_ms / self.t_sol_ms if self.best_ms and self.t_sol_ms else None


def workload_gaps(infos: Iterable[WorkloadInfo], bests: Mapping[int, float],
                  indices: Iterable[int] = ()) -> tuple[WorkloadGap, ...]:
    """A gap per workload of ``infos`` (and of ``indices`` the run measured nothing of), by index."""
    by_index = {w.index: w for w in infos}
    every = sorted(set(by_index) | set(indices))
    return tuple(WorkloadGap(i, bests.get(i), by_index[i].t_b_ms if i in by_index else None,
                             by_index[i].t_sol_ms if i in by_index else None) for i in every)


def furthest_from_sol(gaps: Iterable[WorkloadGap], n: int) -> list[WorkloadGap]:
    """The ``n`` workloads whose best is the most times its T_sol."""
    return sorted((g for g in gaps if g.over_sol is not None), key=lambda g: (-g.over_sol, g.index))[:n]


def slower_than_t_b(gaps: Iterable[WorkloadGap], n: int) -> list[WorkloadGap]:
    """The ``n`` workloads whose best is the furthest behind T_b (a speedup below 1)."""
    return sorted((g for g in gaps if g.speedup is not None and g.speedup < 1),
                  key=lambda g: (g.speedup, g.index))[:n]


def without_pass(gaps: Iterable[WorkloadGap]) -> list[int]:
    return [g.index for g in gaps if g.best_ms is None]


def index_ranges(indices: Iterable[int]) -> str:
    """Workload indices as ranges: [0, 1, 2, 5, 7, 8] -> "0-2,5,7-8"."""
    return number_ranges(indices)


def gaps_text(gaps: Iterable[WorkloadGap], n: int = 3) -> str:
    """The worst workloads in one short clause: "w7 12x T_sol, w3 9.5x, w0 8x; slower than T_b: w5 0.8x; no
    passing time: w12-13"; "" when there is nothing to say."""
    gaps = list(gaps)
    parts = []
    far = furthest_from_sol(gaps, n)
    if far:
        parts.append(", ".join(f"w{g.index} {g.over_sol:.3g}x" + (" T_sol" if k == 0 else "")
                               for k, g in enumerate(far)))
    slow = slower_than_t_b(gaps, n)
    if slow:
        parts.append("slower than T_b: " + ", ".join(f"w{g.index} {g.speedup:.2g}x" for g in slow))
    missing = without_pass(gaps)
    if missing and len(missing) < len(gaps):
        parts.append(f"no passing time: w{index_ranges(missing)}")
    elif missing:
        parts.append("no passing time on any workload")
    return "; ".join(parts)
