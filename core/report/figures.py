"""The run's figures, each defined once: the fleet's geomean speedup, mean and median SOL score, how many problems
beat T_b, the devices' busy and kernel time fractions as shown, and the word for the run's devices. The TUI, the
report, the run's metric samples and the planner all read them from here, so they show the same number for the same
rows.

A problem's own figures (its best's speedup and SOL over its workloads) are ``core.roofline.sol.overall_figures``,
a workload's ``core.roofline.sol.workload_figures``; the run stores a problem's on its row.

The rule over the fleet (the one the report always used):

- a problem's speedup counts when it is a finite number above 0; its SOL score when it is finite. The two count
  apart: a problem whose best has a speedup but no SOL score (a workload with T_b but no T_sol) counts in the
  geomean and not in the SOL figures, and the other way round;
- a problem without a counted figure (no passing attempt on every workload: unsolved, failed, waiting) is one of
  ``problems`` only: it is out of the geomean, the mean and the median, and it does not beat T_b;
- beating T_b is a counted speedup above 1 (above 2: "above 2x"), and the share beating is over every problem of
  the run, so unsolved problems pull it down;
- the figures are over the problems' bests, or with ``seed`` over their seeds'.

Pure functions; nothing here reads a store.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from core.roofline.sol import geomean
from core.store.model import MetricRow, RunInfo

__all__ = ["FleetFigures", "beating_baseline", "busy_fraction", "busy_sample", "counted_sol", "counted_speedup",
           "device_word", "fleet_figures", "fleet_geomean_speedup", "fleet_mean_sol", "fleet_median_sol",
           "kernel_fraction", "problem_figures", "subset_figures"]


class HasFigures(Protocol):
    """A problem as the store's rows and the report's summaries carry it."""

    best_speedup: float | None
    best_sol: float | None
    seed_speedup: float | None
    seed_sol: float | None


def counted_speedup(speedup: float | None) -> float | None:
    """A problem's speedup as the fleet counts it: finite and above 0, else None."""
    return speedup if speedup is not None and math.isfinite(speedup) and speedup > 0 else None


def counted_sol(sol: float | None) -> float | None:
    """A problem's SOL score as the fleet counts it: finite, else None."""
    return sol if sol is not None and math.isfinite(sol) else None


def fleet_geomean_speedup(speedups: Iterable[float | None]) -> float | None:
    """The geometric mean of the counted speedups; None when none counts."""
    counted = [s for s in map(counted_speedup, speedups) if s is not None]
    return geomean(counted) if counted else None


def fleet_mean_sol(sols: Iterable[float | None]) -> float | None:
    """The mean of the counted SOL scores; None when none counts."""
    counted = [v for v in map(counted_sol, sols) if v is not None]
    return statistics.fmean(counted) if counted else None


def fleet_median_sol(sols: Iterable[float | None]) -> float | None:
    """The median of the counted SOL scores; None when none counts."""
    counted = [v for v in map(counted_sol, sols) if v is not None]
    return statistics.median(counted) if counted else None


def beating_baseline(speedups: Iterable[float | None], above: float = 1.0) -> int:
    """How many counted speedups are above ``above`` (1: faster than T_b; 2: "above 2x")."""
    return sum(1 for s in map(counted_speedup, speedups) if s is not None and s > above)


@dataclass(frozen=True)
class FleetFigures:
    problems: int  # every problem given
    with_result: int  # problems with a counted speedup or SOL score
    geomean_speedup: float | None
    beating_baseline: int  # counted speedup > 1
    above_2x: int  # counted speedup > 2
    median_sol: float | None
    mean_sol: float | None
    with_speedup: int = 0  # problems in the geomean
    with_sol: int = 0  # problems in the mean and median SOL

    @property
    def share_beating(self) -> float:
        """``beating_baseline`` over every problem (0.0 for none)."""
        return self.beating_baseline / self.problems if self.problems else 0.0


def fleet_figures(pairs: Iterable[tuple[float | None, float | None]]) -> FleetFigures:
    """The fleet over one ``(speedup, SOL)`` pair per problem of the run (None where it has none), by the module's
    rule."""
    pairs = [(counted_speedup(s), counted_sol(v)) for s, v in pairs]
    speedups = [s for s, _ in pairs if s is not None]
    sols = [v for _, v in pairs if v is not None]
    return FleetFigures(
        problems=len(pairs),
        with_result=sum(1 for s, v in pairs if s is not None or v is not None),
        geomean_speedup=fleet_geomean_speedup(speedups),
        beating_baseline=beating_baseline(speedups),
        above_2x=beating_baseline(speedups, above=2.0),
        median_sol=fleet_median_sol(sols),
        mean_sol=fleet_mean_sol(sols),
        with_speedup=len(speedups),
        with_sol=len(sols),
    )


def problem_figures(problems: Iterable[HasFigures], *, seed: bool = False) -> FleetFigures:
    """The fleet over problems (store rows or report summaries): of their bests, or with ``seed`` their seeds'."""
    return fleet_figures((p.seed_speedup, p.seed_sol) if seed else (p.best_speedup, p.best_sol) for p in problems)


def subset_figures(problems: Iterable[HasFigures]) -> dict[str, FleetFigures]:
    """The fleet's figures of each subset (L1, L2, FlashInfer-Bench, Quant...), by the module's rule, in subset
    order: as a leaderboard groups them. ``problems`` must have a ``subset``."""
    by_subset: dict[str, list[HasFigures]] = {}
    for p in problems:
        by_subset.setdefault(p.subset, []).append(p)  # type: ignore[attr-defined]
    return {subset: problem_figures(rows) for subset, rows in sorted(by_subset.items())}


def busy_sample(metrics: Sequence[MetricRow]) -> MetricRow | None:
    """The metric sample whose busy fraction (and queue wait) the run shows: the latest with a busy fraction; None
    when no sample has one.

    The fraction itself is the evaluation pool's, since the run's last start
    (``core.evaluate.usage.PoolUsage.busy_fraction``: device time work held over device time it wanted). A later
    sample without one (no device time wanted yet since a restart) does not hide the last known figure."""
    return next((m for m in reversed(metrics) if m.gpu_busy is not None), None)


def busy_fraction(metrics: Sequence[MetricRow]) -> float | None:
    """The devices' busy fraction the run shows (``busy_sample``'s), None when unknown."""
    sample = busy_sample(metrics)
    return sample.gpu_busy if sample is not None else None


def kernel_fraction(metrics: Sequence[MetricRow]) -> float | None:
    """The devices' kernel time fraction the run shows beside the busy fraction, from the same sample
    (``busy_sample``'s): the time they ran kernels while work waited over the time work wanted them
    (``core.evaluate.usage.PoolUsage.kernel_fraction``); None when not measured (the sample's ``gpu_kernel_note``
    says why) or unknown."""
    sample = busy_sample(metrics)
    return sample.gpu_kernel if sample is not None else None


def device_word(run: RunInfo | None) -> str:
    """What the run's devices are called in its figures ("CPU busy", "GPU s"): its run row's word
    (``core.store.model.device_word``), "GPU" for a store without a run row."""
    return run.device_word if run is not None else "GPU"
