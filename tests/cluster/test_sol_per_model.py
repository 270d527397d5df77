"""T_sol per GPU model on the head (RayEvaluator.speed_of_light / sol_bound): counted for every model the cluster
has, the most common model's returned for the run's record, a model that joins later counted at its first job. No
Ray: the actors here are only what the head knows of them (their GPU models)."""

from __future__ import annotations

from pathlib import Path

import anyio

from core.cluster.ray_evaluator import GpuActor, RayEvaluator
from core.problem.load import load_problem

RMSNORM = Path(__file__).resolve().parents[2] / "problems" / "norm" / "001_rmsnorm_llama3_1_8b"
H200, A100, B200 = "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA B200"


def test_each_job_is_held_to_its_own_gpu_models_bound():
    problem = load_problem(RMSNORM)
    evaluator = RayEvaluator("127.0.0.1:6379", "cuda")
    evaluator.primary_model = H200
    for n, model in enumerate((H200, H200, A100)):
        evaluator._actors[f"node{n}:0"] = GpuActor(f"node{n}:0", None, f"node{n}", 0, f"host{n}", 0, model)

    async def main():
        sol = await evaluator.speed_of_light(problem, [0, 1, 2])
        assert sol.gpu == H200 and sol.enforce and set(sol.t_sol_ms) == {0, 1, 2}
        h200 = await evaluator.sol_bound(problem, H200)
        a100 = await evaluator.sol_bound(problem, A100)
        assert h200 == sol.t_sol_ms
        # RMSNorm is memory-bound: the A100's 2.0 TB/s against the H200's 4.8 TB/s (small workloads sit nearer a
        # floor both share).
        assert all(a100[i] >= h200[i] for i in (0, 1, 2)) and a100[2] > 2 * h200[2], (a100, h200)
        b200 = await evaluator.sol_bound(problem, B200)  # joined later: counted now
        assert all(b200[i] <= h200[i] for i in (0, 1, 2)) and b200[2] < h200[2]
        assert await evaluator.sol_bound(problem, "Some Unlisted GPU") is None  # no datasheet: not enforced

        # From the store at a later start: the recorded (most common model's) bound is used as it is.
        other = RayEvaluator("127.0.0.1:6379", "cuda")
        other.primary_model = H200
        other.remember_sol(problem, {0: 0.5, 1: 0.25})
        assert await other.sol_bound(problem, H200) == {0: 0.5, 1: 0.25}
        assert set(await other.sol_bound(problem, A100)) == {0, 1}
        cpu = RayEvaluator("127.0.0.1:6379", "cpu")
        cpu.remember_sol(problem, {0: 0.5})
        assert await cpu.sol_bound(problem, "cpu") is None

    anyio.run(main)
