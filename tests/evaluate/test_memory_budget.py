"""GPU memory as a budget (core.evaluate.memory_budget, core.evaluate.memory_cap): shares sized by a workload's
inputs and outputs, work admitted only while the device's reservations fit its budget and waiting, without
deadlock, until memory frees; the judge's out-of-memory told from the candidate's; the budget's setting; and, on a
GPU, the caps in force in a judge and a T_b measured under the budget."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from evaluate_support import HONEST_DPS, QUICK, REFERENCE, PoolRunner, claiming_source, python_solution

from core.config import ConfigError, GpuConfig, parse_config
from core.evaluate.device_gates import DeviceGates
from core.evaluate.hosts import HostOptions
from core.evaluate.memory_budget import (ALONE, BASELINE_FLOOR, CONTEXT_BYTES, DEFAULT_BUDGET, JOB_FLOOR,
                                         WORKING_FLOOR_BYTES, MemoryAsk, MemoryLedger, OomRetry, admits, baseline_bytes, capacity_bytes,
                                         hold_device, job_ask, job_bytes, job_memory, wait_alone)
from core.evaluate.memory_cap import ceiling, is_out_of_memory, worker_environment
from core.evaluate.messages import Check, Failed, Reference, ReferenceMade
from core.evaluate.verdict import ReasonCode, Status
from core.problem import load_problem

GiB = 1 << 30
ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- shares


def test_the_capacity_is_the_budget_less_every_workers_context():
    assert capacity_bytes(100 * GiB, 0.9, 4) == 90 * GiB - 4 * CONTEXT_BYTES
    assert capacity_bytes(GiB, 0.5, 4) == 0


def test_shares_grow_with_the_data_a_workload_keeps():
    assert baseline_bytes(0, 0, 5) == WORKING_FLOOR_BYTES
    assert baseline_bytes(GiB, GiB, 5) == 2 * (2 * GiB) * 6 + WORKING_FLOOR_BYTES
    assert job_bytes(GiB, GiB, 10) > job_bytes(GiB, GiB, 5) > job_bytes(GiB, 0, 5)


def test_a_job_asks_at_least_its_floor_of_the_device_and_at_most_all_of_it():
    assert job_ask(0, 0, 5).bytes_for(100 * GiB) == int(JOB_FLOOR * 100 * GiB)
    assert job_ask(40 * GiB, 0, 5).bytes_for(80 * GiB) == 80 * GiB
    assert job_ask(GiB, GiB, 5).bytes_for(100 * GiB) == job_bytes(GiB, GiB, 5)  # 33 GiB, over the floor
    assert ALONE.bytes_for(7 * GiB) == 7 * GiB


def test_a_job_is_sized_by_its_largest_workload(rmsnorm_problem):
    row = 256 * 4  # hidden 256, float32
    largest = (64 * row + row, 64 * row)  # x and weight in, out out, at 64 tokens
    assert job_memory(rmsnorm_problem, None, 5).nbytes == job_bytes(*largest, 5)
    assert job_memory(rmsnorm_problem, (0,), 5).nbytes == job_bytes(8 * row + row, 8 * row, 5)
    assert job_memory(None, None, 1) == MemoryAsk(0, JOB_FLOOR)


@pytest.mark.parametrize("others, asked, capacity, admitted", [
    (0, 200, 100, True),  # alone, whatever its size
    (40, 60, 100, True),
    (40, 61, 100, False),
])
def test_admission_keeps_the_sum_within_the_capacity(others, asked, capacity, admitted):
    assert admits(others, asked, capacity) is admitted


@pytest.mark.parametrize("error, out_of_memory", [
    ("OutOfMemoryError: CUDA out of memory. Tried to allocate 2.49 GiB. GPU 0 has a total capacity of 139.81 GiB of "
     "which 2.49 GiB is free. Including non-PyTorch memory, this process has 91.58 GiB memory in use.", True),
    ("OutOfMemoryError: Out of memory allocating 4,294,967,296 bytes (allocated so far: 0 bytes).", True),  # cupy
    ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", True),
    ("OutOfResources: out of resource: shared memory, Required: 262144, Hardware limit: 232448", False),  # Triton
    ("max abs error 3.1 at out[2, 7] (tolerance 1e-05)", False),
])
def test_out_of_memory_is_recognised_in_a_replys_text(error, out_of_memory):
    assert is_out_of_memory(error) is out_of_memory


def test_out_of_memory_is_recognised_by_its_exception_type():
    import torch

    assert is_out_of_memory(torch.OutOfMemoryError("whatever it says"))
    assert not is_out_of_memory(RuntimeError("illegal memory access"))


# ---------------------------------------------------------------- admission


def test_a_reservation_waits_until_memory_frees():
    async def main() -> list[str]:
        ledger = MemoryLedger(10)
        first = ledger.try_reserve(6)
        assert first is not None and ledger.try_reserve(5) is None
        events: list[str] = []

        async def second() -> None:
            await ledger.reserve(5)
            events.append("second admitted")

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(second)
            await anyio.wait_all_tasks_blocked()
            assert events == [] and ledger.reserved == 6
            assert ledger.try_reserve(1) is None  # it would fit, but nothing passes a waiter
            events.append("first released")
            ledger.release(first)
        assert ledger.reserved == 5
        return events

    assert anyio.run(main) == ["first released", "second admitted"]


def test_work_larger_than_the_budget_runs_alone():
    ledger = MemoryLedger(10)
    big = ledger.try_reserve(50)
    assert big is not None and ledger.try_reserve(1) is None
    ledger.release(big)
    assert ledger.try_reserve(10) is not None


def test_an_ask_given_up_leaves_no_trace():
    async def main() -> None:
        ledger = MemoryLedger(10)
        ledger.try_reserve(8)
        with anyio.move_on_after(0.05):
            await ledger.reserve(5)
        assert ledger.reserved == 8 and ledger.try_reserve(2) is not None

    anyio.run(main)


def test_a_job_waiting_for_memory_lets_the_device_go_to_the_baseline_holding_that_memory():
    """A T_b holds its share and waits for the device to time; a job that gets the device and finds no room gives
    the device back and waits for the memory holding no device: the T_b is timed, frees its share, the job runs.
    A job that waited for memory while holding the device would wait for ever (``fail_after``)."""
    order: list[str] = []

    async def main() -> None:
        gates, ledger = DeviceGates(1), MemoryLedger(10)
        first_job, first_memory = await hold_device(gates, [ledger], MemoryAsk(2), priority=0)
        baseline_memory = await ledger.reserve(7)

        async def baseline_timing() -> None:
            device = await gates.acquire(0, 0, may_borrow=True)
            order.append("T_b timed")
            gates.release(device)
            ledger.release(baseline_memory)

        async def second_job() -> None:
            device, memory = await hold_device(gates, [ledger], MemoryAsk(6), priority=5)  # first for the device
            order.append("second job ran")
            gates.release(device)
            ledger.release(memory)

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(second_job)
                await anyio.wait_all_tasks_blocked()
                tasks.start_soon(baseline_timing)
                await anyio.wait_all_tasks_blocked()
                gates.release(first_job)
                ledger.release(first_memory)
        assert ledger.reserved == 0

    anyio.run(main)
    assert order == ["T_b timed", "second job ran"]


def test_work_out_of_memory_waits_for_the_others_lending_the_device_meanwhile():
    async def main() -> None:
        ledger = MemoryLedger(10)
        mine, other = ledger.try_reserve(3), ledger.try_reserve(5)
        lent: list[int] = []

        async def lend() -> None:
            lent.append(1)
            if len(lent) == 3:  # the other holder finished on the lent device
                ledger.release(other)

        assert await wait_alone(ledger, mine, lend, within_s=5, poll_s=0.01)
        assert len(lent) == 3 and ledger.size(mine) == 10 and ledger.try_reserve(1) is None

    anyio.run(main)


def test_a_wait_for_memory_gives_up_after_its_backoff():
    async def main() -> None:
        ledger = MemoryLedger(10)
        mine, other = ledger.try_reserve(3), ledger.try_reserve(5)

        async def lend() -> None:
            pass

        assert not await wait_alone(ledger, mine, lend, within_s=0.05, poll_s=0.01)
        assert ledger.size(mine) == 3
        ledger.release(other)
        assert ledger.try_reserve(7) is not None  # no ask of it left behind

    anyio.run(main)


def test_a_wait_that_finds_nothing_else_reserved_still_backs_off():
    """Out of memory with nothing else of ours on the device: what holds it is outside the ledger, so the retry
    waits its backoff rather than trying again at once."""
    async def main() -> float:
        ledger = MemoryLedger(10)
        mine = ledger.try_reserve(3)

        async def lend() -> None:
            pass

        began = anyio.current_time()
        assert await wait_alone(ledger, mine, lend, within_s=0.2, poll_s=0.01)
        assert ledger.size(mine) == 10
        return anyio.current_time() - began

    assert anyio.run(main) >= 0.2


# ---------------------------------------------------------------- caps


def test_a_worker_is_given_its_cap_in_its_environment(monkeypatch):
    assert worker_environment(0.25) == {"KERNELFLEET_MEMORY_FRACTION": "0.25", "CUPY_GPU_MEMORY_LIMIT": "25%"}
    assert worker_environment(None) == {}
    monkeypatch.setenv("KERNELFLEET_MEMORY_FRACTION", "0.25")
    assert ceiling() == 0.25
    for bad in ("0", "1.5", "half"):
        monkeypatch.setenv("KERNELFLEET_MEMORY_FRACTION", bad)
        assert ceiling() is None


def test_the_pools_cap_reaches_the_worker_process(tmp_path):
    from core.evaluate.worker_process import WorkerProcess

    worker = WorkerProcess("judge", "cpu", None, tmp_path, memory_fraction=0.3)
    try:
        environ = Path(f"/proc/{worker.proc.pid}/environ").read_bytes().split(b"\0")
    finally:
        worker.close()
    assert b"KERNELFLEET_MEMORY_FRACTION=0.3" in environ and b"CUPY_GPU_MEMORY_LIMIT=30%" in environ


# ---------------------------------------------------------------- whose out-of-memory


def test_the_judges_out_of_memory_is_ours_unless_a_file_holds_more_than_declared(rmsnorm_problem, tmp_path,
                                                                                 monkeypatch):
    """The judge's comparison running out of memory says nothing of the candidate (its reference outputs stay for
    the pool's next try), unless the candidate's file is larger than the outputs the problem declares."""
    import torch

    from core.evaluate.exchange import write_outputs
    from core.evaluate.worker import Judge

    judge = Judge("cpu")
    common = {"problem_dir": str(rmsnorm_problem.path), "blob_roots": []}
    assert isinstance(judge.handle(Reference(**common, workload=0, seeds=[1])), ReferenceMade)
    honest, bloated = tmp_path / "honest.out", tmp_path / "bloated.out"
    write_outputs({"out": judge.expected[(0, 1)]["out"].clone()}, honest)
    write_outputs({"out": torch.zeros(1 << 19)}, bloated)  # 2 MiB where 8 KiB are declared

    def out_of_memory(request):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(judge, "_compare", out_of_memory)
    ours = judge.handle(Check(**common, workload=0, files={"1": str(honest)}))
    assert isinstance(ours, Failed) and ReasonCode.read(ours.code) is ReasonCode.OUR_OUT_OF_MEMORY
    assert (0, 1) in judge.expected
    theirs = judge.handle(Check(**common, workload=0, files={"1": str(bloated)}))
    assert isinstance(theirs, Failed) and theirs.code == "" and "larger than declared" in theirs.reason
    assert (0, 1) not in judge.expected


def test_a_baseline_whose_compile_ran_out_of_memory_is_not_cached(rmsnorm_problem):
    """Its compiled time is missing for want of memory, not for the reference's sake: measured again later."""
    from core.evaluate.baseline import BaselineCache, WorkloadBaseline, baseline_key
    from core.evaluate.baseline.judge import _finished

    eager = WorkloadBaseline(index=0, uuid="u0", baseline_ms=1.0, method="eager", eager_ms=1.0, compile_attempted=True)
    for index, reason in ((0, "torch.compile failed: OutOfMemoryError: CUDA out of memory. Tried to allocate 8 GiB"),
                          (1, "torch.compile did not finish within 60 s; abandoned (T_b is eager)")):
        key = baseline_key(rmsnorm_problem.path, f"memory-test-gpu-{index}", "0")
        _finished(eager.replace(index=index, compile_reason=reason), key, {}, None, None, "")
        stored = BaselineCache().read(key).get("workloads", {})
        assert (str(index) in stored) is (index == 1), reason


OWN_OUT_OF_MEMORY = '''import torch

def run(x, weight, eps, out):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 96.00 GiB")
'''

CLAIMS_OUR_OUT_OF_MEMORY = claiming_source("INVALID_REFERENCE", "our_out_of_memory",
                                           "OutOfMemoryError: CUDA out of memory (the judge)", fatal=True)


@pytest.mark.parametrize("source", [OWN_OUT_OF_MEMORY, CLAIMS_OUR_OUT_OF_MEMORY], ids=["raised", "claimed"])
def test_out_of_memory_in_the_candidates_process_is_the_candidates(cpu_pool, rmsnorm_problem, source):
    from core.fleet.verify import inconclusive

    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(source), workloads=(0,), timing=None)
    (workload,) = verdict.workloads
    assert workload.status is Status.RUNTIME_ERROR and workload.code is ReasonCode.NONE, workload
    assert "out of memory" in workload.reason
    assert inconclusive(verdict) == ""  # a best failing so is demoted


# The problem's own reference runs out of device memory the first time it is called (in the judge, or in the
# process measuring T_b), as it would beside other work that then finishes.
OUT_OF_MEMORY_ONCE = '''import pathlib

def _out_of_memory_once():
    flag = pathlib.Path(FLAG)
    if not flag.exists():
        flag.write_text("raised")
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.49 GiB. GPU 0 has 2.49 GiB free.")
'''


def _reference_out_of_memory_once(problem, root: Path):
    from core.problem import load_problem

    folder = root / "norm" / "out_of_memory_once"
    shutil.copytree(problem.path, folder)
    definition = json.loads((folder / "definition.json").read_text())
    once = OUT_OF_MEMORY_ONCE.replace("FLAG", repr(str(root / "raised")))
    definition["reference"] = definition["reference"].replace("import torch\n", "import torch\n" + once, 1) \
        .replace("    xf = x.float()", "    _out_of_memory_once()\n    xf = x.float()", 1)
    (folder / "definition.json").write_text(json.dumps(definition))
    return load_problem(folder)


@pytest.fixture(scope="module")
def quick_retry_pool():
    runner = PoolRunner(workload_timeout_s=60, oom_retry=OomRetry((0.0, 0.0)), machine_check=False)
    yield runner
    runner.close()


def test_a_reference_out_of_memory_is_made_again_and_the_candidate_judged(quick_retry_pool, rmsnorm_problem,
                                                                           tmp_path, caplog):
    problem = _reference_out_of_memory_once(rmsnorm_problem, tmp_path)
    with caplog.at_level("WARNING", logger="kernelfleet.memory"):
        verdict = quick_retry_pool.evaluate(problem, python_solution(HONEST_DPS), workloads=(0,))
    assert (tmp_path / "raised").exists()
    assert verdict.status is Status.PASSED, verdict.reason
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "kernelfleet.memory"]
    assert warning.startswith("the reference of workload 0: the judge ran out of device memory (OutOfMemoryError")


def test_a_baseline_out_of_memory_is_measured_again_in_the_judge(quick_retry_pool, rmsnorm_problem, tmp_path,
                                                                  caplog):
    problem = _reference_out_of_memory_once(rmsnorm_problem, tmp_path)
    pool = quick_retry_pool.pool
    pool.take_news()  # what earlier tests on this pool told
    with caplog.at_level("WARNING", logger="kernelfleet.memory"):
        (result,) = quick_retry_pool.portal.call(
            lambda: pool.baseline(problem, [0], timing=QUICK, compile_timeout_s=0, use_cache=False))
    assert (tmp_path / "raised").exists()
    assert result.ok, result.error
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "kernelfleet.memory"]
    assert warning.startswith("T_b of rmsnorm_eval workload 0 ran out of device memory (eager reference: "
                              "OutOfMemoryError")
    assert pool.take_news() == [warning] and pool.take_news() == []  # the run's log gets it once (``news``)


# ---------------------------------------------------------------- the setting


def test_the_budget_defaults_alike_everywhere():
    assert GpuConfig().memory_budget == HostOptions("cuda").memory_budget == DEFAULT_BUDGET


@pytest.mark.parametrize("value", [0, 1.5, "most"])
def test_a_bad_budget_is_one_clear_error(value):
    with pytest.raises(ConfigError) as info:
        parse_config({"gpus": {"memory_budget": value}})
    assert str(info.value) == f"<config>: gpus.memory_budget: must be a number from 0.1 to 1, got {value!r}"


def test_a_bad_budget_stops_the_run_with_one_error_line(tmp_path):
    config = tmp_path / "fleet.toml"
    config.write_text("[gpus]\nmemory_budget = 1.2\n")
    done = subprocess.run([sys.executable, "-m", "cli.main", "run", str(ROOT / "problems"), "--config", str(config),
                           "--run-dir", str(tmp_path / "run"), "--headless", "--device", "cpu"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [f"error: {config}: gpus.memory_budget: must be a number from 0.1 to 1, got 1.2"]
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- on a GPU


def _wide_problem(root: Path, tokens: int) -> Path:
    """RMSNorm over rows of 4096 floats: workload 0 has ``tokens`` rows, workload 1 eight."""
    folder = root / "norm" / "rmsnorm_wide"
    folder.mkdir(parents=True)
    definition = {
        "name": "rmsnorm_wide", "description": "RMSNorm, rows as many as a test needs.",
        "axes": {"tokens": {"type": "var"}, "hidden": {"type": "const", "value": 4096}},
        "custom_inputs_entrypoint": None,
        "inputs": {"x": {"shape": ["tokens", "hidden"], "dtype": "float32"},
                   "weight": {"shape": ["hidden"], "dtype": "float32"},
                   "eps": {"shape": None, "dtype": "float32"}},
        "outputs": {"out": {"shape": ["tokens", "hidden"], "dtype": "float32"}},
        "reference": REFERENCE,
    }
    (folder / "definition.json").write_text(json.dumps(definition))
    lines = [{"uuid": f"w{i}", "axes": {"tokens": t},
              "inputs": {"x": {"type": "random"}, "weight": {"type": "random"},
                         "eps": {"type": "scalar", "value": 1e-6}},
              "tolerance": {"max_atol": 1e-5, "max_rtol": 1e-5}} for i, t in enumerate([tokens, 8])]
    (folder / "workload.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return folder


def _tokens_for(share: float) -> int:
    """Rows of 4096 floats whose ``x`` alone takes ``share`` of this GPU's memory."""
    import torch

    _, total = torch.cuda.mem_get_info(0)
    return int(share * total) // (4096 * 4) + 1


@pytest.mark.gpu
def test_a_judge_given_a_small_share_cannot_allocate_past_it(tmp_path):
    from core.evaluate.worker_process import WorkerProcess

    folder = _wide_problem(tmp_path / "problems", _tokens_for(0.03))
    judge = WorkerProcess("judge", "cuda", 0, tmp_path, memory_fraction=0.02)

    async def main():
        common = {"problem_dir": str(folder), "blob_roots": []}
        over = await judge.request(Reference(**common, workload=0, seeds=[1]), 300)
        within = await judge.request(Reference(**common, workload=1, seeds=[1]), 300)
        return over, within

    try:
        over, within = anyio.run(main)
    finally:
        judge.close()
    assert isinstance(over, Failed) and ReasonCode.read(over.code) is ReasonCode.OUR_OUT_OF_MEMORY, over
    assert "out of memory" in over.reason.lower()
    assert isinstance(within, ReferenceMade), within  # the same process, within its share


@pytest.mark.gpu
def test_a_judge_out_of_memory_is_tried_again_and_never_blamed_on_the_candidate(tmp_path, caplog):
    from core.evaluate.evaluate import evaluate_solution
    from core.evaluate.pool import EvaluationPool
    from core.problem import load_problem

    problem = load_problem(_wide_problem(tmp_path / "problems", _tokens_for(0.03)))

    async def main():
        async with EvaluationPool("cuda", spare=False, memory_budget=0.02, oom_retry=OomRetry((0.0, 0.0)),
                                  machine_check=False) as pool:
            return await evaluate_solution(pool, problem, python_solution(HONEST_DPS), workloads=(0,), rounds=1,
                                           timing=QUICK)

    with caplog.at_level("WARNING", logger="kernelfleet.memory"):
        verdict = anyio.run(main)
    (workload,) = verdict.workloads
    assert workload.status is Status.INVALID_REFERENCE and workload.code is ReasonCode.OUR_OUT_OF_MEMORY, workload
    assert sum("the judge ran out of device memory" in r.getMessage() for r in caplog.records) == 2


@pytest.mark.gpu
def test_a_baseline_measured_under_the_budget(rmsnorm_problem, caplog):
    """Measured beside candidates in a process of its own, capped at its share: no out-of-memory to retry."""
    from core.evaluate.pool import EvaluationPool

    async def main():
        async with EvaluationPool("cuda", spare=False, memory_budget=0.5, baseliners_per_device=2,
                                  machine_check=False) as pool:
            slot = pool._slots[0]
            assert slot.memory is not None and slot.memory.capacity > 0 and slot.memory_fraction == 0.5
            results = await pool.baseline(rmsnorm_problem, [0, 1], timing=QUICK, compile_timeout_s=120,
                                          use_cache=False)
            return results, slot.memory.reserved

    with caplog.at_level("WARNING", logger="kernelfleet.memory"):
        results, left_reserved = anyio.run(main)
    assert [r.getMessage() for r in caplog.records if r.name == "kernelfleet.memory"] == []
    assert all(r.ok for r in results), [r.error for r in results]
    assert not any(is_out_of_memory(r.compile_reason) for r in results), [r.compile_reason for r in results]
    assert left_reserved == 0


WIDE_INTERMEDIATE = '''import torch

@torch.no_grad()
def run(x):
    wide = torch.ones(3 << 28, dtype=torch.float32, device=x.device)  # 3 GiB: an attention's scores, say
    return x * wide[:1]
'''


@pytest.mark.gpu
def test_a_baseline_keeps_its_floor_when_intermediates_outgrow_the_estimate(tmp_path):
    """A reference whose intermediates the byte count cannot see (3 GiB beside a few kB of inputs): its process
    is capped at the share the pool reserved, floor included, not at the estimate, so no out-of-memory is retried."""
    from core.evaluate.pool import EvaluationPool

    folder = tmp_path / "misc" / "wide"
    folder.mkdir(parents=True)
    (folder / "definition.json").write_text(json.dumps({
        "name": "wide", "description": "A small output through a wide intermediate.",
        "axes": {"n": {"type": "var"}}, "custom_inputs_entrypoint": None,
        "inputs": {"x": {"shape": ["n"], "dtype": "float32"}}, "outputs": {"y": {"shape": ["n"], "dtype": "float32"}},
        "reference": WIDE_INTERMEDIATE}))
    (folder / "workload.jsonl").write_text(json.dumps({"uuid": "w0", "axes": {"n": 1024},
                                                       "inputs": {"x": {"type": "random"}},
                                                       "tolerance": {"max_atol": 1e-5, "max_rtol": 1e-5}}) + "\n")
    problem = load_problem(folder)
    retried = []

    async def main():
        async with EvaluationPool("cuda", spare=False, memory_budget=0.5, baseliners_per_device=1,
                                  machine_check=False) as pool:
            assert 3 << 30 < int(BASELINE_FLOOR * pool._slots[0].memory.capacity)
            pool._tell = retried.append
            return await pool.baseline(problem, [0], timing=QUICK, compile_timeout_s=60, use_cache=False)

    (result,) = anyio.run(main)
    assert result.ok and not is_out_of_memory(result.compile_reason), result
    assert retried == []
