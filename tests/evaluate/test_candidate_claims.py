"""A candidate's code shares its process's private channel with the harness, so it can answer in the harness's place
and claim any verdict. What only the judge may say is never taken from it: a claimed "the workload cannot be built
here" (which would drop the workload from the candidate's verdict and speedup), a claimed pass, a claimed invalid
reference, a claimed fault of ours all become the candidate's runtime error."""

from __future__ import annotations

import pytest
from evaluate_support import HONEST_DPS, claiming_source, python_solution

from core.evaluate.verdict import ReasonCode, Status

# (A claimed invalid reference: tests/evaluate/test_memory_budget.py.)
@pytest.mark.parametrize("status, code", [("UNAVAILABLE", ""), ("PASSED", ""), ("RUNTIME_ERROR", "our_out_of_memory")])
def test_a_verdict_only_the_judge_gives_is_never_taken_from_the_candidate(cpu_pool, rmsnorm_problem, status, code):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(claiming_source(status, code)), workloads=(0, 1),
                                timing=None)
    assert verdict.status is Status.RUNTIME_ERROR
    # Workload 0's claim is its runtime error; the job may stop there or go on to workload 1, failing it alike.
    assert verdict.workloads and verdict.workloads[0].index == 0, verdict.workloads
    assert all(w.status is Status.RUNTIME_ERROR for w in verdict.workloads), verdict.workloads
    assert all(w.code is ReasonCode.NONE for w in verdict.workloads)


def test_a_claim_left_on_the_channel_never_answers_the_next_candidate(cpu_pool, rmsnorm_problem):
    # The claim goes first and the harness's own answer after it, which stays unread: a process caught claiming
    # what only the judge says is replaced, so the next job, another candidate's, is judged on its own.
    claimed = cpu_pool.evaluate(rmsnorm_problem, python_solution(claiming_source("UNAVAILABLE")), workloads=(0,),
                                timing=None)
    assert claimed.status is Status.RUNTIME_ERROR
    honest = cpu_pool.evaluate(rmsnorm_problem, python_solution(HONEST_DPS), workloads=(0, 1), timing=None)
    assert honest.status is Status.PASSED, honest.workloads
