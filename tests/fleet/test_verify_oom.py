"""A best's re-verification that fails for want of device memory in our own judge says nothing of the candidate
(core.fleet.verify): the best keeps its place, not yet re-verified, is evaluated again after a wait and later; only
the candidate's own failures, its own out-of-memory included, demote it."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
from fleet_problems import seed_solution, write_problems

from core.evaluate.evaluator import Evaluation, EvaluationRequest
from core.evaluate.verdict import ReasonCode, Status, Timing, Verdict, WorkloadVerdict, overall
from core.fleet.attempt import AttemptLife, Candidate, EvaluationPolicy
from core.fleet.verify import BestVerifier, inconclusive
from core.problem import load_problem
from core.solution.io import parse_solution
from core.store.writer import RunStore

# The pool's verdict when the judge ran out of memory making the reference (core.evaluate.pool._reference), after
# its own tries; the text is the H200's.
JUDGE_OUT_OF_MEMORY = WorkloadVerdict(
    1, Status.INVALID_REFERENCE,
    "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.49 GiB. GPU 0 has a total capacity of 139.81 GiB of "
    "which 2.49 GiB is free. Including non-PyTorch memory, this process has 91.58 GiB memory in use. "
    "(<reference of scaled_relu>:4)", code=ReasonCode.OUR_OUT_OF_MEMORY)
# The candidate's own: its call allocated too much in its process (core.evaluate.worker.CandidateHarness._call).
CANDIDATE_OUT_OF_MEMORY = WorkloadVerdict(
    1, Status.RUNTIME_ERROR, "OutOfMemoryError: CUDA out of memory. Tried to allocate 96.00 GiB (main.py:9)")


def passed(*ms: float) -> tuple[WorkloadVerdict, ...]:
    return tuple(WorkloadVerdict(i, Status.PASSED, timing=Timing(t, 0.01, 20, "cuda events")) for i, t in enumerate(ms))


def verdict_of(*workloads: WorkloadVerdict) -> Verdict:
    status, reason = overall(workloads)
    return Verdict(status, reason, workloads)


class ScriptedEvaluator:
    """Answers each evaluation with the next verdict of its script, as the pool would have reached it."""

    device = "cpu"

    def __init__(self) -> None:
        self.script: Iterator[Verdict] = iter(())
        self.asked: list[EvaluationRequest] = []

    def answer(self, *verdicts: Verdict) -> None:
        self.script = iter(verdicts)

    async def evaluate(self, request: EvaluationRequest) -> Evaluation:
        self.asked.append(request)
        return Evaluation(next(self.script), None)


def run_with_two_passing_attempts(tmp_path):
    """A store whose problem has a slower and a faster passing attempt, the faster its best."""
    (folder,) = write_problems(tmp_path / "problems", names=("scaled_relu",))
    problem = load_problem(folder)
    store = RunStore(tmp_path / "run", create=True)
    problem_id = store.add_problem("cpu/scaled_relu", problem.name, problem.subset, str(folder))
    store.set_problem_workloads(problem_id, [{"index": i, "axes": "", "t_b_ms": 1.0} for i in (0, 1)], "cpu")
    evaluator = ScriptedEvaluator()
    life = AttemptLife(store, evaluator, EvaluationPolicy(rounds=1))
    evaluator.answer(verdict_of(*passed(0.8, 0.8)), verdict_of(*passed(0.5, 0.5)))

    async def attempts():
        slower = await life.run(problem_id, problem, Candidate(parse_solution(seed_solution("scaled_relu", 8))))
        faster = await life.run(problem_id, problem, Candidate(parse_solution(seed_solution("scaled_relu", 512))))
        return slower.attempt, faster.attempt

    slower, faster = anyio.run(attempts)
    assert store.problem(problem_id).best_attempt_id == faster.id
    evaluator.asked.clear()
    return store, life, evaluator, problem, problem_id, slower, faster


def test_a_best_whose_judge_ran_out_of_memory_stays_best_and_is_verified_later(tmp_path):
    store, life, evaluator, problem, problem_id, slower, faster = run_with_two_passing_attempts(tmp_path)
    logged: list[str] = []
    verifier = BestVerifier(store, life, 10, log=lambda line, problem_id=None: logged.append(line),
                            retry_waits_s=(0.0,))
    evaluator.answer(verdict_of(passed(0.5)[0], JUDGE_OUT_OF_MEMORY), verdict_of(passed(0.5)[0], JUDGE_OUT_OF_MEMORY))

    anyio.run(verifier.verify, problem_id, problem)
    # Evaluated twice (the first try and one after the wait), correctness alone; the best kept, not marked.
    assert [(r.rounds, r.timing) for r in evaluator.asked] == [(10, None), (10, None)]
    row = store.problem(problem_id)
    assert row.best_attempt_id == faster.id and row.best_speedup == faster.speedup
    assert store.attempt(faster.id).verified == "" and store.attempt(slower.id).verified == ""
    assert verifier.unverified() == [problem_id]
    assert logged[0].startswith(f"best attempt {faster.id}: the re-verification failed, not the candidate "
                                f"(workload 1: INVALID_REFERENCE: OutOfMemoryError: CUDA out of memory.")
    assert logged[1].startswith(f"best attempt {faster.id} not re-verified: the evaluation failed, not the candidate")
    assert logged[1].endswith("it stays best, to be re-verified later")

    # A later pass (the end of the run, a resume, `kernelfleet verify`) finds memory free.
    evaluator.answer(verdict_of(*passed(0.5, 0.5)))
    anyio.run(verifier.verify, problem_id, problem)
    assert store.attempt(faster.id).verified == "passed: 10 rounds of fresh inputs"
    assert store.problem(problem_id).best_attempt_id == faster.id and verifier.unverified() == []


def test_a_retry_that_finds_memory_free_verifies_the_best_at_once(tmp_path):
    store, life, evaluator, problem, problem_id, _, faster = run_with_two_passing_attempts(tmp_path)
    verifier = BestVerifier(store, life, 10, retry_waits_s=(0.0, 0.0))
    evaluator.answer(verdict_of(passed(0.5)[0], JUDGE_OUT_OF_MEMORY), verdict_of(*passed(0.5, 0.5)))
    anyio.run(verifier.verify, problem_id, problem)
    assert len(evaluator.asked) == 2
    assert store.attempt(faster.id).verified == "passed: 10 rounds of fresh inputs"


def test_the_candidates_own_out_of_memory_demotes_it(tmp_path):
    store, life, evaluator, problem, problem_id, slower, faster = run_with_two_passing_attempts(tmp_path)
    verifier = BestVerifier(store, life, 10, retry_waits_s=(0.0,))
    evaluator.answer(verdict_of(passed(0.5)[0], CANDIDATE_OUT_OF_MEMORY), verdict_of(*passed(0.8, 0.8)))
    anyio.run(verifier.verify, problem_id, problem)
    assert len(evaluator.asked) == 2  # one try each: the failure was the candidate's
    assert store.attempt(faster.id).verified.startswith("failed: RUNTIME_ERROR: workload 1: OutOfMemoryError")
    assert store.problem(problem_id).best_attempt_id == slower.id
    assert store.attempt(slower.id).verified == "passed: 10 rounds of fresh inputs"


def test_a_verdict_is_inconclusive_only_when_every_failure_is_ours():
    wrong = WorkloadVerdict(0, Status.INCORRECT_NUMERICAL, "max abs error 3.1")
    assert inconclusive(verdict_of(*passed(0.5, 0.5))) == ""
    assert inconclusive(verdict_of(passed(0.5)[0], JUDGE_OUT_OF_MEMORY)).startswith(
        "workload 1: INVALID_REFERENCE: OutOfMemoryError")
    assert inconclusive(verdict_of(wrong, JUDGE_OUT_OF_MEMORY)) == ""  # the candidate failed on its own too
    assert inconclusive(verdict_of(passed(0.5)[0], CANDIDATE_OUT_OF_MEMORY)) == ""
    reference_failed = WorkloadVerdict(1, Status.INVALID_REFERENCE, "reference: the process died (killed by SIGKILL)")
    assert inconclusive(verdict_of(passed(0.5)[0], reference_failed)).startswith("workload 1: INVALID_REFERENCE")
