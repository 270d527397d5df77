"""A crash, a hang or an early death costs one attempt; the next job runs in a fresh worker at once."""

import time

from evaluate_support import HONEST_DPS, PoolRunner, python_solution

from core.evaluate import Status

SEGFAULT = '''import os, signal

def run(x, weight, eps, out):
    os.kill(os.getpid(), signal.SIGSEGV)
'''

HANG = '''def run(x, weight, eps, out):
    while True:
        pass
'''


def test_segfault_costs_one_attempt_and_next_job_starts_fresh_within_2s(cpu_pool, rmsnorm_problem):
    # The spare warms up in the background; earlier tests in this session may have just consumed it.
    cpu_pool.portal.call(lambda: cpu_pool.pool.wait_ready(include_spares=True))
    crashed = cpu_pool.evaluate(rmsnorm_problem, python_solution(SEGFAULT), workloads=(0,))
    assert crashed.status is Status.RUNTIME_ERROR and "SIGSEGV" in crashed.reason
    began = time.monotonic()
    after = cpu_pool.evaluate(rmsnorm_problem, python_solution(HONEST_DPS), workloads=(0,), timing=None)
    assert after.status is Status.PASSED
    assert time.monotonic() - began < 2.0


def test_hang_is_killed_at_the_workload_timeout(rmsnorm_problem):
    runner = PoolRunner(workload_timeout_s=3)
    try:
        began = time.monotonic()
        hung = runner.evaluate(rmsnorm_problem, python_solution(HANG), workloads=(0, 1))
        assert hung.status is Status.TIMEOUT and "no answer within 3 s" in hung.reason
        assert len(hung.workloads) == 1  # the attempt ends at the first fault
        assert time.monotonic() - began < 8
        began = time.monotonic()
        after = runner.evaluate(rmsnorm_problem, python_solution(HONEST_DPS), workloads=(0,), timing=None)
        assert after.status is Status.PASSED
        assert time.monotonic() - began < 2.0
    finally:
        runner.close()


def test_priorities_order_waiting_jobs(rmsnorm_problem):
    import anyio

    from core.evaluate.evaluate import evaluate_solution

    runner = PoolRunner(spare=False)
    order = []

    slow = HONEST_DPS.replace("def run(x, weight, eps, out):", "import time\n\ndef run(x, weight, eps, out):\n"
                              "    time.sleep(0.5)")

    async def one(label, priority, delay):
        await anyio.sleep(delay)
        await evaluate_solution(runner.pool, rmsnorm_problem, python_solution(slow), workloads=(1,),
                                timing=None, rounds=1, priority=priority)
        order.append(label)

    async def main():
        async with anyio.create_task_group() as group:
            group.start_soon(one, "first", 0, 0)
            group.start_soon(one, "low", 0, 0.1)
            group.start_soon(one, "high", 5, 0.2)

    try:
        runner.portal.call(main)
    finally:
        runner.close()
    assert order == ["first", "high", "low"]
