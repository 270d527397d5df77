"""GPU-only paths of the evaluator: CUDA fast-path candidates, other streams, illegal addresses, persisting L2."""

import time

import pytest
from evaluate_support import QUICK, PoolRunner, rmsnorm_fast_path_solution

from core.evaluate import Status

pytestmark = pytest.mark.gpu

# About half a millisecond of GPU spinning, then the real result: GPU-bound, so host launch time cannot hide it.
WORK = """torch.cuda._sleep(1_000_000)
        out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight)"""

SAME_STREAM = f'''import torch

def run(x, weight, eps, out):
    with torch.no_grad():
        {WORK}
'''

SIDE_STREAM = f'''import cupy
import torch

_side = None

def run(x, weight, eps, out):
    global _side
    # Work queued on another stream, without waiting for the current one. A blocking stream is ordered with the
    # legacy default stream; a non-blocking one is not, so per-stream events alone would not see its work. Joined
    # back to the current stream, the work starts at once, while the GPU is still busy with what came before.
    _side = _side or STREAM
    with torch.cuda.stream(_side):
        {WORK}
    JOIN
'''

# name: (module-level lines, the stream expression, joined back). The cupy stream is kept in a global so it outlives
# the call.
STREAMS = {
    "blocking": ("", "torch.cuda.Stream()", False),
    "non-blocking": ("_keep = cupy.cuda.Stream(non_blocking=True)\n", "torch.cuda.ExternalStream(_keep.ptr)", False),
    "joined-back": ("", "torch.cuda.Stream()", True),
}

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
    """CUDA events by default (TimingPolicy.kernel_spans is off), even where cupti-python is installed."""
    from core.evaluate.timing import EVENTS_METHOD

    verdict = gpu_pool.evaluate(rmsnorm_problem, rmsnorm_fast_path_solution(), timing=QUICK)
    assert verdict.status is Status.PASSED, verdict.reason
    assert all(w.timing.method.startswith(EVENTS_METHOD) for w in verdict.workloads), \
        [w.timing.method for w in verdict.workloads]


@pytest.mark.parametrize("kind", list(STREAMS))
def test_work_on_another_stream_is_not_missed_by_the_timing(gpu_pool, rmsnorm_problem, kind):
    from evaluate_support import python_solution

    same = gpu_pool.evaluate(rmsnorm_problem, python_solution(SAME_STREAM), workloads=(1,), timing=QUICK)
    assert same.status is Status.PASSED, same.reason
    preamble, stream, joined = STREAMS[kind]
    source = SIDE_STREAM.replace("import torch\n", "import torch\n" + preamble, 1).replace("STREAM", stream)
    source = source.replace("JOIN", "torch.cuda.current_stream().wait_stream(_side)" if joined else "")
    side = gpu_pool.evaluate(rmsnorm_problem, python_solution(source), workloads=(1,), timing=QUICK)
    assert side.status is Status.PASSED, side.reason
    # The same work on another stream costs the GPU as much: the measured time must not lose it. Joined back, at
    # most the L2 flush ahead of each call (about 80 us on the H200) can hide some of it.
    assert side.workloads[0].timing.median_ms >= 0.8 * same.workloads[0].timing.median_ms, (
        side.workloads[0].timing, same.workloads[0].timing)
    if kind == "non-blocking":  # unseen by the current stream's events: the device-wide check must take over
        assert "device-wide synchronisation" in side.workloads[0].timing.method
    assert "device-wide synchronisation" not in same.workloads[0].timing.method


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
