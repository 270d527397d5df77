"""A best attempt re-verified with upstream's full rules (core.fleet.verify): a candidate wrong on about half of
its inputs can pass the search loop's one round and become best; 10 rounds of fresh inputs catch it, it is marked,
and the problem's best passes to the next fastest passing attempt, which is re-verified in turn."""

from __future__ import annotations

import anyio
import pytest
from fleet_problems import seed_solution, write_problems

from core.evaluate.local import LocalEvaluator
from core.evaluate.timing_policy import TimingPolicy
from core.fleet.attempt import AttemptLife, Candidate, EvaluationPolicy
from core.fleet.verify import BestVerifier
from core.problem import load_problem
from core.solution.io import parse_solution
from core.store.writer import RunStore

QUICK = TimingPolicy(warmup_calls=1, min_calls=5, max_calls=20, target_seconds=0.005, device_check_calls=3)


def sometimes_wrong() -> dict:
    """CHUNK=512 (fast), but wrong whenever the first input value is positive: about half the input sets."""
    solution = seed_solution("scaled_relu", chunk=512)
    main = solution["sources"][0]
    main["content"] += "    if x[0, 0] > 0:\n        out += 1.0\n"
    solution["name"] = "sometimes_wrong"
    return solution


@pytest.mark.slow
def test_a_best_that_fails_ten_rounds_is_demoted_and_the_next_is_verified(tmp_path):
    (folder,) = write_problems(tmp_path / "problems", names=("scaled_relu",))
    problem = load_problem(folder)
    store = RunStore(tmp_path / "run", create=True)
    problem_id = store.add_problem("cpu/scaled_relu", problem.name, problem.subset, str(folder))
    logged: list[str] = []

    async def main():
        async with LocalEvaluator("cpu", spare=False, workload_timeout_s=60) as evaluator:
            baseline = await evaluator.baseline(problem, [0, 1], timing=QUICK, compile_timeout_s=0)
            store.set_problem_workloads(problem_id, [{"index": b.index, "axes": "", "t_b_ms": b.baseline_ms}
                                                     for b in baseline], "cpu")
            life = AttemptLife(store, evaluator, EvaluationPolicy(rounds=1, timing=QUICK))
            honest = (await life.run(problem_id, problem, Candidate(parse_solution(seed_solution("scaled_relu", 8)),
                                                                    note="honest"))).attempt
            assert honest.passed
            for _ in range(40):  # one round of two workloads passes a quarter of the time
                wrong = (await life.run(problem_id, problem, Candidate(parse_solution(sometimes_wrong()),
                                                                       note="wrong"))).attempt
                if wrong.passed:
                    break
            assert wrong.passed and store.problem(problem_id).best_attempt_id == wrong.id
            verifier = BestVerifier(store, life, 10, log=lambda line, problem_id=None: logged.append(line))
            assert verifier.unverified() == [problem_id]
            evaluate = evaluator.evaluate

            async def recording(request):
                asked.append(request)
                return await evaluate(request)

            evaluator.evaluate = recording
            await verifier.verify(problem_id, problem)
            return honest, wrong

    asked = []
    honest, wrong = anyio.run(main)
    # Both bests were evaluated again for correctness alone: 10 rounds, no timing (their times stand).
    assert [(r.rounds, r.timing) for r in asked] == [(10, None), (10, None)]
    assert store.attempt(wrong.id).verified.startswith("failed: INCORRECT_NUMERICAL: ")
    assert store.attempt(honest.id).verified == "passed: 10 rounds of fresh inputs"
    row = store.problem(problem_id)
    assert row.best_attempt_id == honest.id and row.best_speedup == pytest.approx(honest.speedup)
    assert logged[0].startswith(f"best attempt {wrong.id} failed re-verification: INCORRECT_NUMERICAL")
    assert logged[0].endswith(f"the best is now attempt {honest.id}")
    assert logged[1] == f"best attempt {honest.id} re-verified: 10 rounds of fresh inputs passed"
