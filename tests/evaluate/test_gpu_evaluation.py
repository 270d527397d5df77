"""GPU-only paths of the evaluator: CUDA fast-path candidates, other streams, illegal addresses, persisting L2."""

import time

import pytest
from evaluate_support import QUICK, PoolRunner, rmsnorm_fast_path_solution

from core.evaluate import Status

pytestmark = pytest.mark.gpu

SIDE_STREAM = '''import torch

_side = None

def run(x, weight, eps, out):
    global _side
    _side = _side or torch.cuda.Stream()
    # Work queued on another stream, never joined to the current one: invisible to per-stream events.
    with torch.cuda.stream(_side):
        for _ in range(20):
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
        out.copy_(y)
'''

PERSISTING_L2 = '''import torch
from cupy.cuda import runtime

def run(x, weight, eps, out):
    runtime.deviceSetLimit(0x06, runtime.deviceGetLimit(0x06) + (4 << 20))
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight)
'''


@pytest.fixture(scope="module")
def gpu_pool():
    runner = PoolRunner(device="cuda", workload_timeout_s=60)
    yield runner
    runner.close()


def test_fast_path_cuda_candidate_passes_with_event_timing(gpu_pool, rmsnorm_problem):
    verdict = gpu_pool.evaluate(rmsnorm_problem, rmsnorm_fast_path_solution(), timing=QUICK)
    assert verdict.status is Status.PASSED, verdict.reason
    assert all(w.timing.method.startswith("cuda events per call") for w in verdict.workloads)


def test_work_on_another_stream_is_timed_device_wide(gpu_pool, rmsnorm_problem):
    from evaluate_support import python_solution

    verdict = gpu_pool.evaluate(rmsnorm_problem, python_solution(SIDE_STREAM), workloads=(1,), timing=QUICK)
    assert verdict.status is Status.PASSED, verdict.reason
    assert "device-wide synchronisation" in verdict.workloads[0].timing.method


def test_persisting_l2_reservation_is_a_reward_hack(gpu_pool, rmsnorm_problem):
    from evaluate_support import python_solution

    verdict = gpu_pool.evaluate(rmsnorm_problem, python_solution(PERSISTING_L2), workloads=(0,))
    assert verdict.status is Status.REWARD_HACK and "persisting L2" in verdict.reason


def test_illegal_address_costs_one_attempt(gpu_pool, rmsnorm_problem):
    gpu_pool.portal.call(lambda: gpu_pool.pool.wait_ready(include_spares=True))
    bad = rmsnorm_fast_path_solution(illegal_write=True)
    crashed = gpu_pool.evaluate(rmsnorm_problem, bad, workloads=(0,))
    assert crashed.status is Status.RUNTIME_ERROR, crashed
    began = time.monotonic()
    after = gpu_pool.evaluate(rmsnorm_problem, rmsnorm_fast_path_solution(), workloads=(0,), timing=None)
    assert after.status is Status.PASSED, after.reason
    assert time.monotonic() - began < 2.0
