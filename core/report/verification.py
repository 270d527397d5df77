"""How the bests not yet re-verified with upstream's full rules (``core.fleet.verify``) are told, in the same words
at the end of a run's stop, by `kernelfleet verify` and by `kernelfleet report`: how many, and how to finish."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from core.report.metrics import ProblemSummary, verified_label


def finish_hint(run_dir: str | Path) -> str:
    return f"finish with `kernelfleet verify {run_dir}` or `kernelfleet run --resume {run_dir}`"


def not_yet_verified_line(count: int, run_dir: str | Path) -> str:
    """"3 bests not yet re-verified — finish with `kernelfleet verify RUN` or `kernelfleet run --resume RUN`"."""
    return f"{count} best{'s' if count != 1 else ''} not yet re-verified — {finish_hint(run_dir)}"


def not_yet_verified(problems: Sequence[ProblemSummary]) -> list[str]:
    """The keys of the problems whose best is not re-verified (yet)."""
    return [p.key for p in problems if verified_label(p) == "no"]
