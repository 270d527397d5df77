"""A verdict on every requested workload of one candidate, as ``kernelfleet eval`` reports it: the pool ends a job
at a crash or a timeout (the process is replaced), so the workloads after it are submitted again; a failure that
belongs to the solution rather than to a workload (``ReasonCode.solution_wide``: it cannot be imported) is every
workload's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from core.evaluate.verdict import Verdict, WorkloadVerdict, overall


async def evaluate_every_workload(evaluate: Callable[[tuple[int, ...]], Awaitable[Verdict]],
                                  indices: Sequence[int]) -> Verdict:
    """``evaluate(workloads)``: one evaluation of the candidate on those workloads (the run's path:
    ``core.fleet.attempt.AttemptLife.evaluate``), called until every workload has a verdict or one call adds none."""
    found: dict[int, WorkloadVerdict] = {}
    protections: tuple[str, ...] = ()
    seconds = 0.0
    remaining = list(indices)
    while remaining:
        verdict = await evaluate(tuple(remaining))
        protections = protections or verdict.protections
        seconds += verdict.seconds
        new = [w for w in verdict.workloads if w.index in remaining and w.index not in found]
        if not new:
            break
        found.update((w.index, w) for w in new)
        first = new[0]
        if len(new) == 1 and first.index == remaining[0] and first.code.solution_wide:
            found.update((i, replace(first, index=i)) for i in remaining if i not in found)
        remaining = [i for i in remaining if i not in found]
    workloads = tuple(found[i] for i in indices if i in found)
    status, reason = overall(workloads)
    return Verdict(status, reason, workloads, protections, seconds)
