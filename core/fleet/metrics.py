"""The run's metrics row (fleet mean SOL, geomean speedup, pool use, totals), recorded every few planner ticks and
at the end of each start. The fleet figures are core.report.figures', the same the report and the TUI show; the
pool's are its ``PoolUsage``'s (held, kernels running, what the held time went to)."""

from __future__ import annotations

from core.fleet.context import RunContext
from core.report.figures import problem_figures


def record_metrics(run: RunContext) -> None:
    rows = run.store.problems()
    figures = problem_figures(rows)
    totals = run.store.totals()
    usage = run.usage()
    # A Ray cluster's account (core.cluster.usage.ClusterUsage) reads as one PoolUsage through pooled().
    pool = usage.pooled() if hasattr(usage, "pooled") else usage
    run.store.add_metric(
        fleet_mean_sol=figures.mean_sol,
        geomean_speedup=figures.geomean_speedup,
        gpu_busy=pool.busy_fraction() if pool else None,
        queue_wait_s=usage.queue_wait_s / usage.jobs if usage and usage.jobs else None,
        attempts=int(totals["attempts"]), tokens=int(totals["tokens"]), dollars=float(totals["dollars"]),
        active_problems=sum(p.status == "active" for p in rows),
        gpu_kernel=pool.kernel_fraction() if pool else None,
        gpu_kernel_note=pool.kernel_note if pool else "",
        gpu_held=pool.held_shares() if pool else {})
