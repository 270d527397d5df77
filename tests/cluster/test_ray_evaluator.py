"""RayEvaluator on a real Ray cluster of this machine (head + worker nodes with one logical GPU each, cpu device):
jobs run on the nodes' actors as content, verdicts come back whole, no secret of the nodes' environment reaches an
actor or a candidate, a node lost mid-job costs nothing but time (tests/cluster/test_fleet_on_ray.py has a node
joining)."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from cluster_problems import RELU, SECRET_NAME, SECRET_VALUE, WRONG, looks_for, torch_solution, waits_for
from rows_problem import write_rows_problem

from core.cluster import RayEvaluator
from core.evaluate.evaluator import EvaluationRequest
from core.evaluate.verdict import Status
from core.problem.load import load_problem
from core.solution.io import parse_solution

pytestmark = pytest.mark.slow

REFERENCE = "import torch\n\ndef run(x, w):\n    return torch.relu(x * w)\n"


def _problem(root: Path):
    return load_problem(write_rows_problem(root / "cpu" / "scaled_relu", "scaled_relu", "x * w, then ReLU",
                                           REFERENCE, rows=(64, 256)))


def _request(problem, body: str, **options) -> EvaluationRequest:
    return EvaluationRequest(problem, parse_solution(torch_solution("scaled_relu", body)), rounds=1, timing=None,
                             **options)


def _node_ids(cluster) -> set[str]:
    return {n.node_id for n in cluster.gpu_nodes()}


def test_evaluates_on_the_nodes_as_content_and_keeps_secrets_from_them(ray_cluster, tmp_path):
    import ray

    ray_cluster.ensure_gpu_nodes(2)
    problem = _problem(tmp_path / "problems")

    async def main():
        async with RayEvaluator(ray_cluster.address, "cpu", spare=False, workload_timeout_s=60) as evaluator:
            placements = evaluator.placements()
            assert len(placements) == len(ray_cluster.gpu_nodes()) >= 2
            assert {p.node.rsplit("/", 1)[1] for p in placements} == {i[:8] for i in _node_ids(ray_cluster)}
            assert all(p.device_model == "cpu" and p.gpu is None for p in placements)
            assert any(line.startswith("Ray cluster ") for line in evaluator.describe())

            # (d) a pytorch solution evaluated on a node: PASSED, with where it ran.
            good = await evaluator.evaluate(_request(problem, RELU))
            assert good.verdict.status is Status.PASSED, good.verdict.reason
            assert [w.index for w in good.verdict.workloads] == [0, 1]
            assert good.placement in placements
            assert good.verdict.protections  # the node's confinement, reported as a local pool reports it
            wrong = await evaluator.evaluate(_request(problem, WRONG, workloads=(1,)))
            assert wrong.verdict.status is Status.INCORRECT_NUMERICAL, wrong.verdict.reason
            assert [w.index for w in wrong.verdict.workloads] == [1]
            assert wrong.verdict.workloads[0].errors.max_abs_error == pytest.approx(1.0, abs=1e-3)

            # Jobs spread: several at once go to every node.
            async with anyio.create_task_group() as tg:
                done = []

                async def one():
                    done.append(await evaluator.evaluate(_request(problem, RELU)))

                for _ in range(2 * len(placements)):
                    tg.start_soon(one)
            assert all(e.verdict.status is Status.PASSED for e in done)
            assert {e.placement.node for e in done} == {p.node for p in placements}

            # T_b measured on a node's actor.
            baselines = await evaluator.baseline(problem, [0, 1], compile_timeout_s=0.0)
            assert [b.index for b in baselines] == [0, 1]
            assert all(b.ok and b.baseline_ms > 0 for b in baselines), [b.error for b in baselines]
            assert evaluator.baseline_models[problem.path] == "cpu"

            # (c) the secret in the nodes' environment: a plain Ray task there sees it, the actors and candidates
            # do not.
            worker = evaluator.workers()[0]
            strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(worker.node_id, soft=False)
            plain = ray.remote(num_cpus=0)(lambda: os.environ.get(SECRET_NAME)).options(scheduling_strategy=strategy)
            assert await plain.remote() == SECRET_VALUE
            for actor in evaluator.workers():
                assert await actor.handle.visible.remote(SECRET_VALUE) == []
                assert await actor.handle.visible.remote(SECRET_NAME) == []
                # Nor the OMP_NUM_THREADS=1 Ray sets for an actor without CPUs: its pool runs as the head's would.
                assert await actor.handle.visible.remote("OMP_NUM_THREADS") == []
            looked = await evaluator.evaluate(_request(problem, looks_for(SECRET_VALUE)))
            assert looked.verdict.status is Status.PASSED, looked.verdict.reason

            usage = evaluator.usage
            assert usage.jobs == usage.evaluations == 3 + len(done)
            assert usage.busy_fraction() is not None and 0 < usage.busy_fraction() <= 1
            assert len(usage.dispatch_s) == usage.evaluations + 1  # the baseline too
            assert "Ray: " in usage.summary() and f"{usage.jobs} candidate jobs" in usage.summary()
            workers = evaluator.workers()
            children = [await w.handle.processes.remote() for w in workers]
        # Closed: every actor and every process they started is gone.
        assert all(not _alive(pid) for pids in children for pid in pids)
        with anyio.fail_after(30):  # ray.kill returns at once; the actor is gone soon after
            while True:
                try:
                    await workers[0].handle.usage.remote()
                except ray.exceptions.RayActorError:
                    break
                await anyio.sleep(0.2)

    anyio.run(main)


def test_a_node_lost_mid_job_costs_only_time(ray_cluster, tmp_path):
    ray_cluster.ensure_gpu_nodes(2)
    problem = _problem(tmp_path / "problems")
    marker = tmp_path / "go"

    async def main():
        async with RayEvaluator(ray_cluster.address, "cpu", spare=False, workload_timeout_s=60,
                                poll_s=0.5) as evaluator:
            first = evaluator.workers()
            results = []

            async def one():
                results.append(await evaluator.evaluate(_request(problem, waits_for(str(marker)), workloads=(0,))))

            async with anyio.create_task_group() as tg:
                for _ in range(len(first)):
                    tg.start_soon(one)
                with anyio.fail_after(60):  # each job held in its candidate on its own node
                    while not all(w.running == 1 for w in first):
                        await anyio.sleep(0.05)
                victim = first[0]
                children = await victim.handle.processes.remote()
                assert len(children) >= 3  # its judge, its candidate, its reaper
                await anyio.to_thread.run_sync(ray_cluster.remove, ray_cluster.node_of(victim.node_id))
                marker.touch()
            # Every job answered once, none on the lost node: its job ran again on a node still there.
            assert len(results) == len(first)
            assert all(r.verdict.status is Status.PASSED for r in results), [r.verdict.reason for r in results]
            assert victim.node not in {r.placement.node for r in results}
            assert evaluator.usage.requeued == 1 and evaluator.usage.lost == 1
            assert victim.placement not in evaluator.placements()
            # The lost actor's workers died with it (they run in sessions of their own, which Ray leaves).
            with anyio.fail_after(15):
                while any(_alive(pid) for pid in children):
                    await anyio.sleep(0.2)

            assert any("GPU actor lost" in line for line in evaluator.history)

    anyio.run(main)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
