"""A run's preparation and its re-verification, through the Evaluator seam over a real CPU pool: a problem's
preparation (its T_b, its seed's evaluation) asks the devices at PREPARATION_PRIORITY, ahead of every candidate, and
candidates at their problem's priority; a problem's best is re-verified with upstream's rounds as soon as the planner
closes the problem, during the run, so the run's end has nothing left to verify."""

from __future__ import annotations

import anyio
import pytest
from fleet_problems import write_config, write_problems

from core.config import load_config
from core.evaluate.local import LocalEvaluator
from core.fleet.baselines import PREPARATION_PRIORITY
from core.fleet.orchestrator import Fleet
from core.store import RunReader


class Recording:
    """The Evaluator seam over a real local pool, noting the priority and rounds of every request."""

    def __init__(self, local: LocalEvaluator):
        self.local = local
        self.asked: list[tuple[str, int, int]] = []  # (what, priority, rounds)

    async def __aenter__(self):
        await self.local.__aenter__()
        return self

    async def __aexit__(self, *exc_info):
        return await self.local.__aexit__(*exc_info)

    async def evaluate(self, request):
        self.asked.append(("evaluate", request.priority, request.rounds))
        return await self.local.evaluate(request)

    async def evaluate_prepared(self, request, prepared):
        self.asked.append(("evaluate", request.priority, request.rounds))
        return await self.local.evaluate_prepared(request, prepared)

    async def baseline(self, problem, workload_indices=None, *, priority=0, **options):
        self.asked.append(("baseline", priority, 0))
        return await self.local.baseline(problem, workload_indices, priority=priority, **options)

    def __getattr__(self, name):
        return getattr(self.local, name)


@pytest.mark.slow
def test_preparation_goes_first_and_bests_are_verified_when_their_problem_closes(tmp_path):
    write_problems(tmp_path / "problems", names=("scaled_relu",))
    # The wall budget only bounds a broken run; this one finishes by itself in well under a minute.
    config = load_config(write_config(tmp_path / "fleet.toml", evaluation={"verify_rounds": 3},
                                      budgets={"run_wall_s": 240}))
    made: list[Recording] = []

    def factory(fleet):
        made.append(Recording(LocalEvaluator("cpu", spare=False, workload_timeout_s=60)))
        return made[-1]

    fleet = Fleet(tmp_path / "run", config, [str(tmp_path / "problems")], evaluator_factory=factory)
    state = anyio.run(fleet.run)
    assert state == "finished", fleet.stop_reason

    run_requests = made[0].asked
    baselines = [a for a in run_requests if a[0] == "baseline"]
    evaluations = [a for a in run_requests if a[0] == "evaluate"]
    assert baselines and all(priority == PREPARATION_PRIORITY for _, priority, _ in baselines)
    # The first evaluation is the seed's, at preparation's priority; the tuner's trials (1 round) at the problem's
    # (0); the re-verification (3 rounds) at the problem's too, in the run's evaluator.
    assert evaluations[0] == ("evaluate", PREPARATION_PRIORITY, 1)
    trials = [a for a in evaluations[1:] if a[2] == 1]
    assert len(trials) >= 3 and all(priority == 0 for _, priority, _ in trials)
    assert ("evaluate", 0, 3) in evaluations

    with RunReader(tmp_path / "run") as reader:
        (row,) = reader.problems()
        assert reader.attempt(row.best_attempt_id).verified == "passed: 3 rounds of fresh inputs"
        messages = [e.message for e in reader.events()]
    verified = next(i for i, m in enumerate(messages) if m.endswith("re-verified: 3 rounds of fresh inputs passed"))
    closed = next(i for i, m in enumerate(messages) if m.startswith(("done:", "plateaued:")))
    assert closed < verified
    # Verified during the run: the end had nothing left (no second evaluator, no end-of-run pass).
    assert not any(m.startswith("re-verifying the best attempt of") for m in messages)
    assert len(made) == 1
