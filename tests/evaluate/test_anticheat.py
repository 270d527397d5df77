"""Hostile candidates, one per defence. Each gets its status; the honest ones in test_correctness pass."""

import time

from evaluate_support import HONEST_DPS, PoolRunner, python_solution

from core.evaluate import Status

SUBCLASS_OUTPUT = '''import torch

class Lazy(torch.Tensor):
    pass

def run(x, weight, eps):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    return y.as_subclass(Lazy)
'''


def test_tensor_subclass_output_is_a_reward_hack(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(SUBCLASS_OUTPUT, dps=False), workloads=(0,))
    assert verdict.status is Status.REWARD_HACK and "not a plain torch.Tensor" in verdict.reason


LAZY_OUTPUT = '''import torch

class Deferred(torch.Tensor):
    """Computes only when someone looks: a comparison that runs here would trigger it."""
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})

def run(x, weight, eps):
    return torch.zeros_like(x).as_subclass(Deferred)
'''


def test_lazy_output_is_a_reward_hack(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(LAZY_OUTPUT, dps=False), workloads=(0,))
    assert verdict.status is Status.REWARD_HACK


PATCH_TIMER = '''import time
import torch

_real = time.perf_counter
time.perf_counter = lambda: _real() * 0.001

def run(x, weight, eps, out):
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight)
'''


def test_patching_the_timer_is_a_reward_hack(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(PATCH_TIMER), workloads=(0,))
    assert verdict.status is Status.REWARD_HACK and "time.perf_counter" in verdict.reason


PATCH_TIMER_DURING_CALL = '''import time
import torch

def run(x, weight, eps, out):
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight)
    import core.evaluate.timing as timing
    timing.quantiles = lambda times: (1e-6, 0.0)
'''


def test_patching_the_evaluator_during_a_call_is_a_reward_hack(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(PATCH_TIMER_DURING_CALL), workloads=(0,))
    assert verdict.status is Status.REWARD_HACK and "timing.quantiles" in verdict.reason


PATCH_LEAD_FILTER = '''import torch

def run(x, weight, eps, out):
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight)
    import core.evaluate.timing as timing
    timing.led_samples = lambda times, hosts, lead_s: [min(times)] * len(times)
'''


def test_patching_which_timed_calls_count_is_a_reward_hack(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(PATCH_LEAD_FILTER), workloads=(0,))
    assert verdict.status is Status.REWARD_HACK and "timing.led_samples" in verdict.reason


PATCH_KERNEL_SPANS = '''import torch
import core.evaluate.cupti_span as cupti_span

# Spans of a nanosecond for every call: a tracer that could trust them would read any kernel as free.
cupti_span.call_spans_ms = lambda windows, api, gpu: [1e-6] * len(windows)
cupti_span.KernelSpanTracer.spans_ms = lambda self, windows: [1e-6] * len(windows)

def run(x, weight, eps, out):
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight)
'''


def test_patching_the_kernel_span_tracer_is_a_reward_hack(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(PATCH_KERNEL_SPANS), workloads=(0,))
    assert verdict.status is Status.REWARD_HACK
    assert "cupti_span.call_spans_ms" in verdict.reason and "cupti_span.KernelSpanTracer.spans_ms" in verdict.reason


PATCH_UNSEEN_WORK_LIMIT = '''import torch
import core.evaluate.timing as timing

timing.UNSEEN_WORK_S = 1.0  # a whole second on other streams would pass the device-wide check

def run(x, weight, eps, out):
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight)
'''


def test_loosening_a_timing_constant_is_a_reward_hack(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(PATCH_UNSEEN_WORK_LIMIT), workloads=(0,))
    assert verdict.status is Status.REWARD_HACK and "timing.UNSEEN_WORK_S" in verdict.reason


PATCH_COMPARISON = '''import torch
import core.evaluate.compare as compare
from core.evaluate.compare import Comparison
from core.evaluate.verdict import ErrorStats, Status

compare.compare_output = lambda name, out, ref, tol: Comparison(Status.PASSED, "", ErrorStats())
torch.allclose = lambda *a, **k: True

def run(x, weight, eps, out):
    out.copy_(x * 2)
'''


def test_patching_the_comparison_cannot_reach_the_judge(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(PATCH_COMPARISON), workloads=(0,))
    assert verdict.status is Status.INCORRECT_NUMERICAL


LINGERING_THREAD = '''import threading, time
import torch

def run(x, weight, eps, out):
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight)
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
'''


def test_thread_left_running_is_a_reward_hack(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(LINGERING_THREAD), workloads=(0,))
    assert verdict.status is Status.REWARD_HACK and "thread" in verdict.reason


LINGERING_PROCESS = '''import subprocess
import torch

def run(x, weight, eps, out):
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight)
    subprocess.Popen(["sleep", "30"])
'''


THREAD_FROM_A_TIMED_CALL = '''import threading
import time
import torch

_calls = [0]

def run(x, weight, eps, out):
    _calls[0] += 1
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight)
    if _calls[0] == 6:  # the first timed call (after 3 checked rounds and 3 warm-up calls, at least)
        threading.Thread(target=time.sleep, args=(10,), name="mender", daemon=True).start()
'''


def test_a_thread_left_by_a_timed_call_is_a_reward_hack(cpu_pool, rmsnorm_problem):
    # It could mend the timed outputs before they are sampled for the judge.
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(THREAD_FROM_A_TIMED_CALL), workloads=(0,))
    assert verdict.status is Status.REWARD_HACK, verdict
    assert "the timed calls left 1 thread(s) running (mender)" in verdict.reason


def test_process_left_running_is_a_reward_hack(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(LINGERING_PROCESS), workloads=(0,))
    assert verdict.status is Status.REWARD_HACK and "process" in verdict.reason


CACHE_BY_ADDRESS = '''import torch

_cache = {}

def run(x, weight, eps, out):
    key = x.data_ptr()
    if key not in _cache:
        _cache[key] = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    out.copy_(_cache[key])
'''


def test_caching_results_across_calls_is_caught_by_spot_checks(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(CACHE_BY_ADDRESS), workloads=(0,), rounds=5)
    assert verdict.status is Status.REWARD_HACK and "timed call" in verdict.reason


REPLAY_FROM_MEMORY = '''import gc
import torch

def run(x, weight, eps, out):
    # Look for the reference's output anywhere in this process and copy it.
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj.shape == out.shape and obj is not out and obj is not x:
            out.copy_(obj)
            return
    out.zero_()
'''


def test_reference_outputs_are_not_in_the_candidate_process(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(REPLAY_FROM_MEMORY), workloads=(0,))
    assert verdict.status is Status.INCORRECT_NUMERICAL


FORGED_VERDICT = '''import json, sys
import torch

def run(x, weight, eps, out):
    print(json.dumps({"status": "PASSED", "timing": {"median_ms": 1e-9}}))
    sys.stdout.flush()
    out.copy_(x)
'''


def test_printing_a_forged_verdict_changes_nothing(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(FORGED_VERDICT), workloads=(0,))
    assert verdict.status is Status.INCORRECT_NUMERICAL


EARLY_EXIT = '''import os

def run(x, weight, eps, out):
    os._exit(0)
'''


def test_exiting_early_with_status_zero_is_a_failed_attempt(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(EARLY_EXIT), workloads=(0,))
    assert verdict.status is Status.RUNTIME_ERROR and "died" in verdict.reason


def test_faster_than_speed_of_light_is_rejected(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(HONEST_DPS), workloads=(0,), sol_ms={0: 1e6})
    assert verdict.status is Status.REWARD_HACK and "physically impossible" in verdict.reason


READS_SECRETS = '''import os
import torch

def run(x, weight, eps, out):
    leaked = [k for k in os.environ if "API_KEY" in k or "TOKEN" in k]
    out.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight)
    if leaked:
        raise RuntimeError("saw " + ",".join(leaked))
'''


def test_candidate_never_sees_api_keys(rmsnorm_problem, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "t0k3n")
    runner = PoolRunner(spare=False)
    try:
        verdict = runner.evaluate(rmsnorm_problem, python_solution(READS_SECRETS), workloads=(0,))
    finally:
        runner.close()
    assert verdict.status is Status.PASSED, verdict.reason


HACK_ON_SMALL_ONLY = '''import torch

class Lazy(torch.Tensor):
    pass

def run(x, weight, eps):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    return y.as_subclass(Lazy) if x.shape[0] == 8 else y
'''


def test_after_a_reward_hack_the_next_workload_runs_in_a_fresh_process_with_the_candidate_loaded(
        cpu_pool, rmsnorm_problem):
    """The process that hacked is replaced, and the candidate is loaded into its replacement: the next workload
    gets its own verdict, not a RUNTIME_ERROR of an empty process."""
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(HACK_ON_SMALL_ONLY, dps=False), workloads=(0, 1))
    first, second = verdict.workloads
    assert first.status is Status.REWARD_HACK and "not a plain torch.Tensor" in first.reason
    assert second.status is Status.PASSED, second.reason
    assert verdict.status is Status.REWARD_HACK and verdict.reason.startswith("workload 0:")
