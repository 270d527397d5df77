"""T_sol from a work count and a GPU spec, and the SOL score."""

import math

import pytest

from core.roofline.counting import WorkCount
from core.roofline.sol import (
    Conventions,
    DegenerateBaseline,
    ImpossibleTime,
    SolScoreError,
    geomean,
    sol_score,
    summarize_problem,
    t_sol,
)
from core.roofline.specs import lookup_spec

B200 = lookup_spec("NVIDIA B200")
H200 = lookup_spec("NVIDIA H200")


def count(**values) -> WorkCount:
    return WorkCount(problem="p", workload=0, method="meta", **values)


def test_memory_bound_time_is_bytes_over_bandwidth():
    c = count(bytes_read=48e6, bytes_written=48e6, simt_flops=1e6)
    sol = t_sol(c, H200, Conventions(floor_s=0.0))
    assert sol.bound == "memory" and sol.t_sol_s == pytest.approx(96e6 / 4.8e12)
    assert sol.t_memory_s == pytest.approx(96e6 / 4.8e12)


def test_compute_terms_add_and_then_max_with_memory():
    c = count(matmul_flops={"bfloat16": 2.25e12}, matmul_flops_effective={"bfloat16": 2.25e12, "float8_e4m3fn": 4.5e12},
              simt_flops=80e9, bytes_read=1e6)
    sol = t_sol(c, B200, Conventions(floor_s=0.0))
    # 2.25e12 / 2.25e15 + 4.5e12 / 4.5e15 + 80e9 / 80e12 = 1 ms + 1 ms + 1 ms
    assert sol.t_tensor_s == {"bfloat16": pytest.approx(1e-3), "float8_e4m3fn": pytest.approx(1e-3)}
    assert sol.t_simt_s == pytest.approx(1e-3)
    assert sol.t_sol_s == pytest.approx(3e-3) and sol.bound == "compute"


def test_fp32_matmul_conventions():
    c = count(matmul_flops={"float32": 1e12}, matmul_flops_effective={"float32": 1e12})
    assert t_sol(c, B200).t_tensor_s == {"bfloat16": pytest.approx(1e12 / 2.25e15)}
    assert t_sol(c, B200, Conventions(fp32_matmul="tf32")).t_tensor_s == {"tfloat32": pytest.approx(1e12 / 1.1e15)}
    assert t_sol(c, B200, Conventions(fp32_matmul="simt")).t_tensor_s == {"fp32 simt": pytest.approx(1e12 / 80e12)}
    with pytest.raises(ValueError):
        Conventions(fp32_matmul="fp16")


def test_by_data_precision_convention_switches_the_dtype_used():
    c = count(matmul_flops={"float32": 9e12}, matmul_flops_effective={"float4_e2m1fn_x2": 9e12})
    assert t_sol(c, B200).t_compute_s == pytest.approx(1e-3)
    assert t_sol(c, B200).t_sol_s == pytest.approx(1e-3 + 0.4e-6)
    assert t_sol(c, B200, Conventions(by_data_precision=False)).t_compute_s == pytest.approx(4e-3)
    naive = t_sol(c, B200, Conventions.naive())
    assert naive.t_tensor_s == {"tfloat32": pytest.approx(9e12 / 1.1e15)}


def test_floor():
    tiny = count(bytes_read=64, bytes_written=64)
    added = t_sol(tiny, B200)  # default: 0.4 us of fixed latency on top of the roofline time
    assert added.t_sol_s == pytest.approx(0.4e-6 + 128 / 7.7e12) and added.bound == "floor"
    floored = t_sol(tiny, B200, Conventions(floor_mode="max"))
    assert floored.t_sol_s == pytest.approx(0.4e-6) and floored.bound == "floor"
    assert t_sol(tiny, B200, Conventions(floor_s=0.0)).t_sol_s == pytest.approx(128 / 7.7e12)
    big = count(bytes_read=77e6)
    assert t_sol(big, B200).t_sol_s == pytest.approx(10e-6 + 0.4e-6) and t_sol(big, B200).bound == "memory"
    assert t_sol(big, B200, Conventions(floor_mode="max")).t_sol_s == pytest.approx(10e-6)
    with pytest.raises(ValueError):
        Conventions(floor_mode="min")


def test_sol_of_our_gemm_problem():
    from pathlib import Path

    from core.problem import load_problem
    from core.roofline.sol import workload_sol

    folder = next((Path(__file__).resolve().parents[2] / "problems" / "gemm").glob("001_*"))
    problem = load_problem(folder)
    count, sol = workload_sol(problem, problem.workloads[-1], H200)
    axes = problem.workloads[-1].resolved_axes
    flops = 2 * axes["M"] * axes["N"] * axes["K"]
    assert count.method == "meta" and sol.bound == "compute"
    assert sol.t_tensor_s == {"bfloat16": pytest.approx(flops / 989.4e12)}
    assert sol.t_sol_s == pytest.approx(flops / 989.4e12 + 0.4e-6)


def test_failed_count_has_no_sol():
    with pytest.raises(ValueError, match="no work count"):
        t_sol(WorkCount(problem="p", workload=0, method="failed: boom"), B200)


def test_sol_score_anchors():
    assert sol_score(10.0, 10.0, 2.0) == pytest.approx(0.5)
    assert sol_score(2.0, 10.0, 2.0) == pytest.approx(1.0)
    assert sol_score(6.0, 10.0, 2.0) == pytest.approx(1 / (1 + 4 / 8))


def test_sol_score_is_monotone_decreasing_in_kernel_time():
    times = [2.0 + 0.37 * i for i in range(100)]
    scores = [sol_score(t, 10.0, 2.0) for t in times]
    assert all(a > b for a, b in zip(scores, scores[1:]))
    assert all(0.0 < s <= 1.0 for s in scores)
    assert scores[-1] < 0.5  # slower than the baseline scores below one half


def test_sol_score_rejects_impossible_and_degenerate_times():
    with pytest.raises(ImpossibleTime):
        sol_score(1.9, 10.0, 2.0)
    with pytest.raises(DegenerateBaseline):
        sol_score(3.0, 2.0, 2.0)
    with pytest.raises(DegenerateBaseline):
        sol_score(3.0, 1.5, 1.0 + 0.5)
    with pytest.raises(SolScoreError):
        sol_score(float("nan"), 10.0, 2.0)
    assert issubclass(ImpossibleTime, ValueError)


def test_problem_summary_uses_geomeans():
    summary = summarize_problem([1.0, 4.0], [4.0, 16.0], [0.5, 0.5])
    assert summary.t_kernel == pytest.approx(2.0) and summary.t_baseline == pytest.approx(8.0)
    assert summary.speedup == pytest.approx(4.0)
    assert summary.score == pytest.approx(sol_score(2.0, 8.0, 0.5)) and summary.workloads == 2
    impossible = summarize_problem([0.1], [4.0], [0.5])
    assert impossible.score is None and "ImpossibleTime" in impossible.score_error
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        geomean([])
    assert math.isclose(geomean([3.0]), 3.0)
