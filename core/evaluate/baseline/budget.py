"""How long torch.compile may take over one problem's workloads, in all.

A reference that loops in Python over a batch (``for b in seq_lens.tolist(): ...``) compiles a graph per distinct
length; with ``dynamic=False`` each workload then compiles for minutes, and five workloads of it held one problem's
preparation for over six minutes on the H200 (2026-12-02). Each workload's compile is bounded by what the problem has
left of ``compile_timeout_s``; once that is spent the later workloads are timed eager only, and their reason says so.
"""

from __future__ import annotations

from core.evaluate.baseline.record import WorkloadBaseline

# A remainder under this share of the budget is not worth a compile that would most likely be abandoned (an
# abandoned compile costs the process that ran it).
LEAST_SHARE = 0.1


class CompileBudget:
    def __init__(self, budget_s: float):
        self.budget_s = budget_s
        self.spent_s = 0.0

    def next_timeout_s(self) -> tuple[float, str]:
        """``(compile timeout for the next workload, why it is 0)``: 0 skips torch.compile."""
        if self.budget_s <= 0:
            return self.budget_s, ""
        left = self.budget_s - self.spent_s
        if left < LEAST_SHARE * self.budget_s:
            return 0.0, (f"torch.compile skipped: this problem's compiles took {self.spent_s:.0f} s of the "
                         f"{self.budget_s:g} s they may take in all")
        return left, ""

    def spend(self, result: WorkloadBaseline, lost: bool = False) -> None:
        """Count what ``result``'s compile took: its seconds, or, when the compile was ``lost`` (abandoned at its
        bound, or its process killed, so no seconds were recorded), all that was left. A cached figure cost nothing
        this time."""
        if lost:
            self.spent_s = max(self.spent_s, self.budget_s)
        elif not result.cached and result.compile_attempted and result.compile_seconds is not None:
            self.spent_s += result.compile_seconds
