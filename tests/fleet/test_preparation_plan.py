"""Before any measurement: the order problems are prepared in (what an earlier start prepared first, a person's
priority, paused ones last, then the quickest), and the workloads too large for the GPU, known from their shapes."""

from __future__ import annotations

import dataclasses
import glob

import pytest
import upstream_sources
from rows_problem import write_rows_problem

from core.fleet import capability
from core.fleet.preparation import preparation_cost, preparation_order
from core.problem import load_problems
from core.store.model import ProblemRow, WorkloadInfo

SOL_EXECBENCH = upstream_sources.SOL_EXECBENCH / "benchmark"
REFERENCE = "import torch\n\ndef run(x, w):\n    return torch.relu(x * w)\n"


def row(n: int, **changes) -> ProblemRow:
    base = ProblemRow(n, f"s/p{n}", f"p{n}", "s", "", "", 0, False, False, "waiting", None, None, None, None, None,
                      None, 0, 0, 0, 0, 0.0, 0.0, 0.0, None)
    return dataclasses.replace(base, **changes)


def test_prepared_first_then_priority_then_the_quickest_and_paused_last():
    rows = {1: row(1), 2: row(2, priority=5), 3: row(3, paused=True, priority=9), 4: row(4),
            5: row(5, workloads=(WorkloadInfo(0, "n=1", 1.0),))}
    cost = {1: (1 << 30, 16), 2: (1 << 32, 16), 3: (10, 1), 4: (1 << 20, 2), 5: (1 << 34, 48)}
    order = sorted(rows, key=lambda pid: preparation_order(rows[pid], cost[pid]))
    assert order == [5, 2, 4, 1, 3]


def test_the_cost_counts_bytes_then_runnable_workloads(tmp_path):
    small = write_rows_problem(tmp_path / "a", "a", "d", REFERENCE, rows=(16, 32))
    big = write_rows_problem(tmp_path / "b", "b", "d", REFERENCE, rows=(1 << 16,))
    a, b = load_problems([str(small), str(big)]).problems
    assert preparation_cost(a) == ((16 + 32) * 64 * 4 * 2 + 2 * 64 * 4, 2)
    assert preparation_cost(a) < preparation_cost(b)  # two small workloads before one of 32 MiB


def test_a_workload_too_large_for_the_gpu_is_unavailable_with_why(tmp_path):
    folder = write_rows_problem(tmp_path / "p", "p", "d", REFERENCE, rows=(16, 1 << 22))  # 1 GiB in, 1 GiB out
    (problem,) = load_problems([str(folder)]).problems
    on_gpu, skipped = capability.for_device(problem, "cuda", memory_bytes=2 << 30)
    assert [index for index, _ in skipped] == [1]
    assert "too large for the device" in skipped[0][1] and "3.0 GiB" in skipped[0][1] and "2 GiB" in skipped[0][1]
    assert on_gpu.workloads[1].unavailable == skipped[0][1] and not on_gpu.workloads[0].unavailable
    assert capability.for_device(problem, "cuda", memory_bytes=80 << 30) == (problem, ())
    assert capability.for_device(problem, "cuda") == (problem, ())  # memory unknown: nothing skipped
    # The run's [gpus] memory_budget is the share: 3 GiB fits 90% of 4 GiB, not half of it.
    assert capability.for_device(problem, "cuda", memory_bytes=4 << 30)[1] == ()
    _, halved = capability.for_device(problem, "cuda", memory_bytes=4 << 30, share=0.5)
    assert [index for index, _ in halved] == [1] and "over 50% of the GPU's 4 GiB" in halved[0][1]


@pytest.mark.skipif(not SOL_EXECBENCH.is_dir(), reason="needs ../shared/sol-execbench")
def test_sol_execbench_on_an_80_gb_gpu():
    # The one L2 MoE backward problem reads and writes ~48 GiB per workload: it cannot be judged on an H100 80 GB.
    loaded = load_problems(sorted(glob.glob(str(SOL_EXECBENCH / "L2" / "025_*"))))
    (problem,) = loaded.problems
    _, skipped = capability.for_device(problem, "cuda", memory_bytes=80 << 30)
    assert len(skipped) >= 8
    assert capability.for_device(problem, "cuda", memory_bytes=143 << 30)[1] == ()
