"""What every workbench of a run is given (``BenchServices``), made from the run's context: the store, the attempt
owner, the events, the facts, and each agent kind's review gate."""

from __future__ import annotations

import time
from collections import deque

from core.evaluate.evaluator import Evaluator
from core.fleet.agent import ReviewGate
from core.fleet.context import RunContext
from core.fleet.facts import facts_from_probe
from core.fleet.run_attempts import RunAttempts
from core.fleet.workbench import BenchServices


def bench_services(run: RunContext, attempts: RunAttempts, evaluator: Evaluator | None = None) -> BenchServices:
    """After setup; the evaluator once the run started."""
    def device_seconds(problem_id: int, seconds: float) -> None:
        run.activity.setdefault(problem_id, deque()).append((time.time(), seconds, 0.0))

    def review_gate(kind: str) -> ReviewGate | None:
        if run.review_gates is None:  # made once a run, on first use
            gates = {name: k.review(run.config) for name, k in run.kinds.items()}
            run.review_gates = {name: gate for name, gate in gates.items() if gate is not None}
        return run.review_gates.get(kind)

    return BenchServices(
        run.store, run.config, run.builds, run.budgets, evaluator, attempts.attempt, run.event,
        facts=lambda: run.facts or facts_from_probe(run.device, run.config.fleet.languages),
        references=lambda: {pid: p.definition.reference for pid, p in run.problems.items()},
        device_seconds=device_seconds, device=run.device, blob_roots=run.blob_roots, review_gate=review_gate)
