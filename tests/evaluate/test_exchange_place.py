"""Where a job's outputs are handed to the judge: in memory when one workload's files fit easily, else on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.evaluate import pool as pool_module
from core.evaluate.pool import EvalJob, EvaluationPool
from core.problem import load_problem

ROOT = Path(__file__).resolve().parents[2]
RMSNORM = ROOT / "problems" / "norm" / "001_rmsnorm_llama3_1_8b"


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm here")
def test_small_outputs_go_through_memory_and_large_ones_through_disk(monkeypatch):
    problem = load_problem(RMSNORM)
    job = EvalJob(problem=problem, solution=None, solution_dir="", rounds=5)
    pool = EvaluationPool("cpu", spare=False)
    try:
        slot = pool._slots[0]
        assert slot.exchange_memory.parent == Path("/dev/shm")
        assert pool._exchange_parent(slot, job, (0,)) == slot.exchange_memory
        # The largest workload (32768 x 4096 bf16 = 256 MiB, 11 files) is over a 1 GiB allowance.
        assert pool._exchange_parent(slot, job, (0, len(problem.workloads) - 1)) == slot.exchange_disk
        assert slot.exchange_disk.parent == pool._root
    finally:
        pool.close()
    assert not slot.exchange_memory.exists()
    monkeypatch.setattr(pool_module, "SHARED_MEMORY", Path("/nonexistent-shm"))
    pool = EvaluationPool("cpu", spare=False)
    try:
        assert pool._exchange_parent(pool._slots[0], job, (0,)) == pool._slots[0].exchange_disk
    finally:
        pool.close()


def test_a_workload_whose_outputs_would_fill_the_disk_is_not_run(monkeypatch, cpu_pool, rmsnorm_problem):
    """The check happens before the candidate runs: a clear RUNTIME_ERROR, and the disk (builds, the store) is
    left alone."""
    from evaluate_support import HONEST_DPS, python_solution

    real = pool_module.shutil.disk_usage

    def nearly_full(path):
        usage = real(path)
        return usage._replace(free=pool_module.EXCHANGE_RESERVE_BYTES + 1000)

    monkeypatch.setattr(pool_module.shutil, "disk_usage", nearly_full)
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(HONEST_DPS), workloads=(1,))
    assert verdict.status.value == "RUNTIME_ERROR"
    assert "exchange folder" in verdict.reason and "GiB free" in verdict.reason and "not run" in verdict.reason
    assert verdict.workloads[0].timing is None
