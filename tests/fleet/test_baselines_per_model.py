"""T_b per GPU model (core.fleet.baselines): on a run whose devices are of two models, an attempt on the second
model has that model's T_b measured on it (once, recorded apart) and its figures counted against it, and its times
enter the frontier scaled to the first model's. The devices: a real CPU pool shown as two models, the second SLOW
times slower in everything it times (candidates and T_b alike), as a slower GPU model would be."""

from __future__ import annotations

import json
from dataclasses import replace

import anyio
import pytest
from fleet_problems import seed_solution, write_problems

from core.evaluate.evaluator import Evaluation, Placement
from core.evaluate.local import LocalEvaluator
from core.evaluate.timing_policy import TimingPolicy
from core.fleet.attempt import AttemptLife, Candidate, EvaluationPolicy
from core.fleet.baselines import ModelBaselines
from core.problem import load_problem
from core.solution.io import parse_solution
from core.store.writer import RunStore

FAST, SLOW_MODEL = "cpu", "Slower Model"
SLOW = 8.0
QUICK = TimingPolicy(warmup_calls=1, min_calls=8, max_calls=60, target_seconds=0.02, device_check_calls=3)


class TwoModels:
    """The Evaluator seam over a real local pool: every second job lands on ``SLOW_MODEL``."""

    def __init__(self, local: LocalEvaluator, fail_slow_baseline: bool = False):
        self.local = local
        self.jobs = 0
        self.fail_slow_baseline = fail_slow_baseline
        self.baselines_asked: list[str | None] = []

    async def evaluate(self, request):
        evaluation = await self.local.evaluate(request)
        self.jobs += 1
        if self.jobs % 2:
            return replace(evaluation, placement=Placement("fast-node", 0, FAST))
        slowed = tuple(replace(w, timing=replace(w.timing, median_ms=w.timing.median_ms * SLOW))
                       if w.timing is not None else w for w in evaluation.verdict.workloads)
        return Evaluation(replace(evaluation.verdict, workloads=slowed), evaluation.build,
                          Placement("slow-node", 0, SLOW_MODEL))

    async def baseline(self, problem, workload_indices=None, *, device_model=None, **options):
        self.baselines_asked.append(device_model)
        if device_model == SLOW_MODEL and self.fail_slow_baseline:
            raise RuntimeError("no GPU of that model is left")
        results = await self.local.baseline(problem, workload_indices, **options)
        if device_model != SLOW_MODEL:
            return results
        # The CPU's figures (from the cache, measured moments ago for the first model), as a slower model's own.
        return [b.replace(baseline_ms=b.baseline_ms * SLOW, eager_ms=b.eager_ms * SLOW, cached=False) if b.ok else b
                for b in results]

    async def speed_of_light(self, problem, workload_indices, *, device_model=None):
        return await self.local.speed_of_light(problem, workload_indices)

    def baseline_model(self) -> str:
        return FAST


def run_two_attempts(tmp_path, fail_slow_baseline=False):
    (folder,) = write_problems(tmp_path / "problems", names=("scaled_relu",))
    problem = load_problem(folder)
    store = RunStore(tmp_path / "run", create=True)
    problem_id = store.add_problem("cpu/scaled_relu", problem.name, problem.subset, str(folder))
    logged: list[str] = []
    solution = parse_solution(seed_solution("scaled_relu", chunk=512))

    async def main():
        async with LocalEvaluator("cpu", spare=False, workload_timeout_s=60) as local:
            evaluator = TwoModels(local, fail_slow_baseline)
            baselines = ModelBaselines(store, evaluator, timing=QUICK, compile_timeout_s=0,
                                       log=lambda line, problem_id=None: logged.append(line))
            await baselines.measure(problem_id, problem)
            life = AttemptLife(store, evaluator, EvaluationPolicy(rounds=1, timing=QUICK), baselines)
            recorded = [await life.run(problem_id, problem, Candidate(solution, note=f"try {n}")) for n in range(3)]
            return evaluator, [r.attempt for r in recorded]

    evaluator, attempts = anyio.run(main)
    return store, problem_id, evaluator, attempts, logged


@pytest.mark.slow
def test_an_attempt_on_another_model_is_counted_against_that_models_t_b(tmp_path):
    store, problem_id, evaluator, (first, second, third), logged = run_two_attempts(tmp_path)
    row = store.problem(problem_id)
    assert row.baseline_model == FAST and all(w.t_b_ms for w in row.workloads)
    assert [a.device_model for a in (first, second, third)] == [FAST, SLOW_MODEL, FAST]
    slow = store.model_workloads(problem_id, SLOW_MODEL)
    assert slow is not None and [w.index for w in slow] == [w.index for w in row.workloads]
    for fast_w, slow_w in zip(row.workloads, slow):  # measured on the slow model: about SLOW times the time
        assert SLOW / 3 < slow_w.t_b_ms / fast_w.t_b_ms < 3 * SLOW
    assert evaluator.baselines_asked == [None, SLOW_MODEL]  # measured once per model, then read from the store
    assert any(line.startswith(f"on {SLOW_MODEL}: baseline measured on 2 workloads") for line in logged)
    # The same solution reads about the same speedup on either model (against the fast model's T_b the slow
    # one's would read about 1/SLOW of it).
    assert 1 / 3 < second.speedup / first.speedup < 3
    assert 1 / 3 < third.speedup / first.speedup < 3
    # The frontier compares times across models in the baseline model's terms.
    times = {t.attempt_id: t.times_ms for t in store.passing_times(problem_id)}
    raw = json.loads(store.conn.execute("SELECT times_json FROM attempts WHERE id = ?", (second.id,)).fetchone()[0])
    assert set(times[second.id]) == {0, 1}
    for i, ms in times[second.id].items():
        assert ms < raw[str(i)] / 3  # scaled by the ratio of the two models' T_b, about 1/SLOW
        assert ms / min(times[first.id][i], times[third.id][i]) < SLOW / 2


@pytest.mark.slow
def test_a_model_that_cannot_be_measured_falls_back_to_the_recorded_t_b_and_says_so(tmp_path):
    store, problem_id, evaluator, (first, second, _), logged = run_two_attempts(tmp_path, fail_slow_baseline=True)
    assert store.model_workloads(problem_id, SLOW_MODEL) is None
    assert evaluator.baselines_asked == [None, SLOW_MODEL]  # not asked again after it failed
    assert [line for line in logged if "could not be measured" in line] == [
        f"T_b on {SLOW_MODEL} could not be measured (RuntimeError: no GPU of that model is left); attempts there "
        f"are counted against the T_b of {FAST}"]
    assert second.speedup < first.speedup / 1.5  # against the fast model's T_b: slower by about SLOW
