"""Jobs queue for the pool's devices, not for one device fixed at submit time: no device idles while work waits."""

from __future__ import annotations

import time

import anyio
from evaluate_support import HONEST_RETURNING, QUICK, python_solution

from core.evaluate import EvaluationPool
from core.evaluate.device_gates import DeviceGates
from core.evaluate.evaluate import evaluate_solution


async def hold(gates: DeviceGates, log: list, name: str, seconds: float, priority: int = 0,
               wanted: int | None = None) -> None:
    device = await gates.acquire(priority, wanted)
    log.append((name, device))
    await anyio.sleep(seconds)
    gates.release(device)


def test_a_waiting_job_takes_the_first_device_to_come_free():
    log: list = []

    async def scenario():
        gates = DeviceGates(2)
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold, gates, log, "long", 1.0)
            await anyio.sleep(0.01)
            tg.start_soon(hold, gates, log, "short", 0.1)
            await anyio.sleep(0.01)
            tg.start_soon(hold, gates, log, "queued", 0.0)
            await anyio.sleep(0.01)
            assert gates.waiting == 1
    anyio.run(scenario)
    assert log == [("long", 0), ("short", 1), ("queued", 1)]


def test_waiters_are_served_by_priority_then_arrival():
    log: list = []

    async def scenario():
        gates = DeviceGates(1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold, gates, log, "holder", 0.2)
            await anyio.sleep(0.01)
            for name, priority in (("low", 0), ("high", 5), ("low-later", 0), ("high-later", 5)):
                tg.start_soon(hold, gates, log, name, 0.0, priority)
                await anyio.sleep(0.01)
    anyio.run(scenario)
    assert [name for name, _ in log] == ["holder", "high", "high-later", "low", "low-later"]


def test_a_waiter_for_one_device_lets_others_use_another():
    log: list = []

    async def scenario():
        gates = DeviceGates(2)
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold, gates, log, "on-0", 0.5, 0, 0)
            tg.start_soon(hold, gates, log, "on-1", 0.1, 0, 1)
            await anyio.sleep(0.01)
            tg.start_soon(hold, gates, log, "wants-0", 0.0, 9, 0)  # first in line, but only device 0 will do
            await anyio.sleep(0.01)
            tg.start_soon(hold, gates, log, "any", 0.0)
            await anyio.sleep(0.01)
            assert gates.load(0) == 2 and gates.load(1) == 1
    anyio.run(scenario)
    assert log == [("on-0", 0), ("on-1", 1), ("any", 1), ("wants-0", 0)]


def test_a_cancelled_waiter_leaves_the_queue_and_a_granted_one_gives_the_device_back():
    async def scenario():
        gates = DeviceGates(1)
        first = await gates.acquire()
        with anyio.move_on_after(0.05):
            await gates.acquire()
        assert gates.waiting == 0
        gates.release(first)
        assert await gates.acquire() == 0  # free again: the cancelled waiter did not keep it
    anyio.run(scenario)


def test_a_job_lends_its_device_to_higher_priority_borrowers_and_gets_it_back_before_anyone_else():
    log: list = []

    async def borrower(gates, name, priority, may_borrow=True, seconds=0.05):
        device = await gates.acquire(priority, 0, may_borrow=may_borrow)
        log.append(name)
        await anyio.sleep(seconds)
        gates.release(device)

    async def scenario():
        gates = DeviceGates(1)
        device = await gates.acquire(1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(borrower, gates, "same-priority", 1)  # not higher: waits for the whole job
            tg.start_soon(borrower, gates, "candidate-high", 9, False)  # may not borrow: waits too
            tg.start_soon(borrower, gates, "step-a", 9)
            tg.start_soon(borrower, gates, "step-b", 5)
            await anyio.sleep(0.01)
            lent = await gates.lend(device, 1)
            log.append("back")
            assert 0.09 < lent < 0.5
            assert await gates.lend(device, 1) == 0.0  # nobody left who may borrow
            gates.release(device)
    anyio.run(scenario)
    assert log == ["step-a", "step-b", "back", "candidate-high", "same-priority"]


def test_a_lender_cancelled_while_lending_waits_for_its_device_to_come_back():
    async def scenario():
        gates = DeviceGates(1)
        device = await gates.acquire(0)
        borrowed = []

        async def borrower():
            got = await gates.acquire(5, 0, may_borrow=True)
            borrowed.append(got)
            await anyio.sleep(0.2)
            gates.release(got)

        async with anyio.create_task_group() as tg:
            tg.start_soon(borrower)
            await anyio.sleep(0.01)
            began = time.monotonic()
            with anyio.move_on_after(0.05):
                await gates.lend(device, 0)
            assert time.monotonic() - began > 0.15  # shielded: returns only once the borrower is done
            gates.release(device)
        assert borrowed == [0]
        assert await gates.acquire() == 0  # free: neither release was lost nor counted twice
        assert gates.waiting == 0
    anyio.run(scenario)


SLOW_ONCE = '''import time
import torch

_calls = 0

def run(x, weight, eps):
    global _calls
    _calls += 1
    if _calls == 1:
        time.sleep(4.0)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
'''


def test_a_pool_of_two_devices_runs_the_third_job_beside_a_long_one(rmsnorm_problem):
    finished: dict[str, float] = {}

    async def scenario():
        async with EvaluationPool("cpu", gpus=[0, 1], spare=False, workload_timeout_s=60) as pool:
            await pool.wait_ready()

            async def job(name: str, source: str, delay: float) -> None:
                await anyio.sleep(delay)
                verdict = await evaluate_solution(pool, rmsnorm_problem, python_solution(source, dps=False),
                                                  workloads=(0,), rounds=1, timing=QUICK)
                assert verdict.status.value == "PASSED", verdict.reason
                finished[name] = time.monotonic()

            async with anyio.create_task_group() as tg:
                tg.start_soon(job, "long", SLOW_ONCE, 0.0)
                tg.start_soon(job, "second", HONEST_RETURNING, 0.2)
                tg.start_soon(job, "third", HONEST_RETURNING, 0.2)
            assert pool.usage.busy_fraction() > 0.9

    anyio.run(scenario)
    assert finished["third"] < finished["long"] - 1.0


SLOW_PER_WORKLOAD = '''import time
import torch

_seen = set()

def run(x, weight, eps):
    if x.shape[0] not in _seen:  # the first call of each workload
        _seen.add(x.shape[0])
        time.sleep(1.5)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
'''


def test_a_baseline_step_of_higher_priority_goes_between_a_candidates_workloads(rmsnorm_problem, tmp_path,
                                                                                monkeypatch):
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCH_COMPILE_DISABLE", "1")
    order: list[str] = []

    async def scenario():
        async with EvaluationPool("cpu", spare=False, workload_timeout_s=60) as pool:
            await pool.wait_ready()
            # The baseline process started and warm (workload 1), so that the one measured below is quick.
            assert (await pool.baseline(rmsnorm_problem, [1], timing=QUICK, compile_timeout_s=30.0))[0].ok

            async def candidate() -> None:
                verdict = await evaluate_solution(pool, rmsnorm_problem,
                                                  python_solution(SLOW_PER_WORKLOAD, dps=False),
                                                  rounds=1, timing=QUICK)
                assert verdict.status.value == "PASSED", verdict.reason
                order.append("candidate")

            async def baseline() -> None:
                await anyio.sleep(0.5)  # the candidate is in its first workload
                result = await pool.baseline(rmsnorm_problem, [0], timing=QUICK, compile_timeout_s=30.0,
                                             priority=10)
                assert result[0].ok, result[0].error
                order.append("baseline")

            began, busy_before = time.monotonic(), pool.usage.busy_s
            async with anyio.create_task_group() as tg:
                tg.start_soon(candidate)
                tg.start_soon(baseline)
            # The baseline's inputs were made between the candidate's two workloads, on the device it lent.
            assert pool.usage.lent_s > 0.0
            # The lent time counts once, as the baseline's: busy never exceeds the time that passed.
            assert pool.usage.busy_s - busy_before <= time.monotonic() - began
            assert "lent to them by candidates between workloads" in pool.usage.summary()

    anyio.run(scenario)
    assert sorted(order) == ["baseline", "candidate"]


def test_a_low_priority_waiter_goes_first_once_it_has_waited_the_bound():
    # Higher-priority steps keep coming, one always waiting (as T_b steps do at the start of a run over hundreds of
    # problems): without the bound the candidate would wait until they stop.
    log: list = []

    async def scenario():
        gates = DeviceGates(1, bounded_wait_s=0.3)
        began = time.monotonic()
        got = []

        async def steps():
            while not got:
                await hold(gates, log, "step", 0.05, 10)

        async def candidate():
            await anyio.sleep(0.02)
            await hold(gates, log, "candidate", 0.0, 0)
            got.append(time.monotonic() - began)

        async with anyio.create_task_group() as tg:
            for _ in range(3):  # three baseline processes: while one holds the device, two wait
                tg.start_soon(steps)
            tg.start_soon(candidate)
        return got[0]

    waited = anyio.run(scenario)
    assert 0.3 <= waited < 0.6, waited
    first = log.index(("candidate", 0))
    assert first >= 4 and log[:first] == [("step", 0)] * first  # the steps went first until the bound


def test_a_lender_lends_for_at_most_the_bound():
    async def scenario():
        gates = DeviceGates(1, bounded_wait_s=0.2)
        device = await gates.acquire(0)
        stop = anyio.Event()

        async def borrowers():
            while not stop.is_set():
                d = await gates.acquire(5, may_borrow=True)
                await anyio.sleep(0.03)
                gates.release(d)

        async with anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(borrowers)
            await anyio.sleep(0.01)
            lent = await gates.lend(device, 0)
            stop.set()
            gates.release(device)
        return lent

    lent = anyio.run(scenario)
    assert 0.2 <= lent < 0.35, lent
