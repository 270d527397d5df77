"""On a GPU: every cookbook example passes its problem's every workload through the real evaluator, and its figure.

Each example (docs/cookbook/examples/<name>/solution.json, and the wgmma GEMM once more with PERSISTENT=0) runs
through `kernelfleet eval PROBLEM --solution SOLUTION --json`, the command users and the guides name: isolated
workers, correctness on fresh inputs against the reference, anti-cheat checks, timing after an L2 flush, and the
baseline T_b. The test asserts PASSED on every workload and prints to the terminal, as it goes, the speedup
against T_b per workload and, for the memory-bound examples, the DRAM bandwidth reached (bytes of inputs and
outputs each moved once / time) as a share of the H200's 4.8 TB/s. Those are the figures the guides' "Measured
on the H200" lines are to be filled with.

Run on the GPU machine with:  python -m pytest tests/cookbook/test_cookbook_gpu.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.problem import load_problem
from core.problem.dtypes import torch_dtype
from core.solution import load_solution, with_values, write_solution

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "docs" / "cookbook" / "examples"
H200_DRAM_BYTES_PER_S = 4.8e12
# example folder -> (problem, tunable overrides, whether its figure of merit is DRAM bandwidth)
CASES = {
    "memory-bound": ("norm/001_rmsnorm_llama3_1_8b", {}, True),
    "reductions": ("norm/002_layernorm_falcon_7b", {}, True),
    "tma-mbarrier": ("activation/001_swiglu_llama3_1_8b", {}, True),
    "wgmma-gemm": ("gemm/001_bf16_gemm_prefill_llama3_1_8b_qkv_proj", {}, False),
    "wgmma-gemm PERSISTENT=0": ("gemm/001_bf16_gemm_prefill_llama3_1_8b_qkv_proj", {"PERSISTENT": 0}, False),
    "wgmma-gemm-fp8": ("gemm/003_fp8_gemm_per_tensor_llama3_1_8b_o_proj", {}, False),
    "cuda-graphs": ("moe/001_topk_softmax_routing_qwen3_30b_a3b", {}, False),
    "cute-dsl": ("activation/001_swiglu_llama3_1_8b", {}, True),
}
EVAL_TIMEOUT_S = 1200


@pytest.fixture
def show(request):
    """Writes a figure line to the terminal as the test runs (past output capture), and to the test's output."""
    terminal = request.config.pluginmanager.get_plugin("terminalreporter")

    def write(line: str) -> None:
        print(line)
        if terminal is not None:
            terminal.write_line(line)

    return write


def _moved_bytes(problem, workload) -> int:
    """Bytes of every tensor input and output of the workload, each counted once."""
    import torch

    definition, axes = problem.definition, workload.resolved_axes
    total = 0
    for spec in [*definition.inputs.values(), *definition.outputs.values()]:
        shape = definition.shape_of(spec, axes)
        if shape is not None:
            numel = 1
            for n in shape:
                numel *= n
            total += numel * torch.empty((), dtype=torch_dtype(spec.dtype)).element_size()
    return total


@pytest.mark.parametrize("case", list(CASES))
def test_example_passes_every_workload_and_reports_its_figure(case, show, tmp_path):
    problem_rel, overrides, memory_bound = CASES[case]
    folder = case.split()[0]
    if folder == "cute-dsl":
        pytest.importorskip("cutlass.cute", reason="nvidia-cutlass-dsl is not installed")
    solution_path = EXAMPLES / folder / "solution.json"
    if overrides:
        solution_path = tmp_path / "solution.json"
        write_solution(with_values(load_solution(EXAMPLES / folder / "solution.json"), overrides), solution_path)
    problem_dir = REPO / "problems" / problem_rel
    done = subprocess.run([sys.executable, "-m", "cli.main", "eval", str(problem_dir), "--solution",
                           str(solution_path), "--json"], cwd=REPO, capture_output=True, text=True,
                          timeout=EVAL_TIMEOUT_S)
    traces = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    problem = load_problem(problem_dir)
    assert len(traces) == len(problem.workloads), (
        f"{case}: {len(traces)} traces for {len(problem.workloads)} workloads (exit {done.returncode})\n"
        f"{done.stderr[-3000:]}")
    failures = []
    for trace in traces:
        info, evaluation = trace["kernelfleet"], trace["evaluation"]
        index = info["workload_index"]
        axes = ", ".join(f"{k}={v}" for k, v in trace["workload"]["axes"].items())
        if evaluation["status"] != "PASSED":
            failures.append(f"workload {index} ({axes}): {info['status']}: {evaluation['log'][:500]}")
            continue
        ms = info["latency_ms"]
        speedup = evaluation["performance"]["speedup_factor"]
        line = f"{case:<24} {axes:<22} {ms * 1e3:10.2f} us  speedup vs T_b {speedup:6.2f}x"
        if memory_bound and ms:
            per_s = _moved_bytes(problem, problem.workloads[index]) / (ms * 1e-3)
            line += f"  DRAM {per_s / 1e12:5.2f} TB/s ({100 * per_s / H200_DRAM_BYTES_PER_S:5.1f}% of 4.8 TB/s)"
        show(line)
    assert not failures, f"{case} on {problem_rel}:\n" + "\n".join(failures)
    assert done.returncode == 0, f"{case}: kernelfleet eval exited {done.returncode}\n{done.stderr[-2000:]}"
