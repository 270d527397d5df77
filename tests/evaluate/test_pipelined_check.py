"""A workload's check by the judge goes beside the next workload's correctness rounds in the candidate's process
(core.evaluate.pool): neither is timed. Whatever becomes of the next workload, the previous one gets its verdict
from its own files and reference, and a workload whose rounds are too large to share goes one after the other."""

from evaluate_support import HONEST_DPS, python_solution

from core.evaluate import Status, pool as pool_module
from core.evaluate.pool import EvalJob
from core.evaluate.timing_policy import TimingPolicy

WRONG_ON_THE_FIRST = '''import torch

def run(x, weight, eps, out):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    out.copy_(y + 1.0 if x.shape[0] == 8 else y)
'''

CRASH_ON_THE_SECOND = '''import os
import torch

def run(x, weight, eps, out):
    if x.shape[0] == 64:
        os._exit(7)
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight)
'''


def test_every_workload_is_checked_against_its_own_reference(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(HONEST_DPS), rounds=3)
    assert [(w.index, w.status) for w in verdict.workloads] == [(0, Status.PASSED), (1, Status.PASSED)]
    for workload in verdict.workloads:
        assert {"reference", "run", "time", "spot", "check", "check.load"} <= set(workload.phase_s), workload.phase_s
        assert workload.timing is not None and workload.timing.median_ms > 0


def test_a_wrong_first_workload_fails_and_the_second_still_passes(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(WRONG_ON_THE_FIRST), rounds=3)
    assert [(w.index, w.status) for w in verdict.workloads] == [(0, Status.INCORRECT_NUMERICAL),
                                                                 (1, Status.PASSED)], verdict


def test_a_crash_in_the_next_rounds_leaves_the_previous_workload_its_verdict(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(CRASH_ON_THE_SECOND), rounds=3)
    statuses = [(w.index, w.status) for w in verdict.workloads]
    assert statuses == [(0, Status.PASSED), (1, Status.RUNTIME_ERROR)], verdict
    assert "died" in verdict.workloads[1].reason or "exit" in verdict.workloads[1].reason, verdict.workloads[1]
    after = cpu_pool.evaluate(rmsnorm_problem, python_solution(HONEST_DPS), rounds=3)  # a fresh process next
    assert after.status is Status.PASSED, after.reason


def test_workloads_too_large_to_share_go_one_after_the_other(cpu_pool, rmsnorm_problem, monkeypatch):
    job = EvalJob(rmsnorm_problem, python_solution(HONEST_DPS), solution_dir=rmsnorm_problem.path, rounds=3,
                  timing=TimingPolicy())
    assert pool_module._pipelined(job, 0, 1)
    monkeypatch.setattr(pool_module, "PIPELINE_MAX_BYTES", 0)
    assert not pool_module._pipelined(job, 0, 1)
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(WRONG_ON_THE_FIRST), rounds=3)
    assert [(w.index, w.status) for w in verdict.workloads] == [(0, Status.INCORRECT_NUMERICAL),
                                                                 (1, Status.PASSED)], verdict
