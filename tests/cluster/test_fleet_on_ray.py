"""A tuner run of the real Fleet whose evaluator is a real Ray cluster of this machine ([cluster] ray_address): the
attempts run on several nodes, a node lost while an attempt runs there costs nothing (the attempt runs again
elsewhere and is recorded once), a node that joins mid-run is used."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import anyio
import pytest
from cluster_problems import REFERENCE_RELU, SECRET_VALUE, gated_seed
from rows_problem import write_rows_problem

from core.config import parse_config
from core.fleet.orchestrator import Fleet
from core.store import RunReader

pytestmark = pytest.mark.slow


def _problems(root: Path, marker: Path) -> list[Path]:
    folders = []
    for name in ("scaled_relu_a", "scaled_relu_b"):
        folder = write_rows_problem(root / "cpu" / name, name, "x * w, then ReLU", REFERENCE_RELU, rows=(64, 256))
        (folder / "solutions").mkdir()
        (folder / "solutions" / "seed_torch.json").write_text(json.dumps(gated_seed(name, str(marker))))
        folders.append(folder)
    return folders


def _seed_pending(run_dir: Path) -> bool:
    """A seed attempt begun and not recorded yet (problems are prepared one at a time here: the run has one
    preparation slot per head GPU, and this head has none, so this is the only job then)."""
    if not (run_dir / "run.sqlite").exists():
        return False
    try:
        with RunReader(run_dir) as reader:
            return any(a.note == "seed" for row in reader.problems() for a in reader.attempts(row.id, state="pending"))
    except ValueError:  # the store is being created
        return False


def test_fleet_runs_on_ray_nodes_through_a_lost_node_and_a_joined_one(ray_cluster, tmp_path):
    ray_cluster.ensure_gpu_nodes(2)
    marker = tmp_path / "go"
    _problems(tmp_path / "problems", marker)
    config = parse_config({
        "fleet": {"device": "cpu", "tuner_agents": 2, "languages": ["pytorch"]},
        "gpus": {"spare": False, "workload_timeout_s": 60.0},
        "planner": {"tick_s": 0.2, "plateau_attempts": 50},
        "tuner": {"trials_per_problem": 4, "startup_trials": 2},
        "evaluation": {"rounds": 1, "timing": "quick", "compile_baseline": False},
        "cluster": {"ray_address": ray_cluster.address},
    })
    run_dir = tmp_path / "run"
    fleet = Fleet(run_dir, config, [str(tmp_path / "problems")])
    facts = {}

    async def main():
        async with anyio.create_task_group() as tg:
            async def run():
                facts["state"] = await fleet.run()

            tg.start_soon(run)
            with anyio.fail_after(120):  # the first seed, held in its candidate on a node
                while not (_seed_pending(run_dir) and any(
                        w.running for w in getattr(getattr(fleet, "evaluator", None), "workers", list)())):
                    await anyio.sleep(0.05)
            evaluator = fleet.evaluator
            victim = next(w for w in evaluator.workers() if w.running)
            facts["victim"] = victim.node
            joined = ray_cluster.add_gpu_node()  # Ray starts a node in the main thread only: the loop waits
            with anyio.fail_after(90):
                while not any(w.node_id == joined.node_id for w in evaluator.workers()):
                    await anyio.sleep(0.2)
            newcomer = next(w for w in evaluator.workers() if w.node_id == joined.node_id)
            facts["joined"] = newcomer.node
            assert await newcomer.handle.visible.remote(SECRET_VALUE) == []  # its node's environment has it too
            assert victim.running, "the seed must still be held on its node"
            await anyio.to_thread.run_sync(ray_cluster.remove, ray_cluster.node_of(victim.node_id))
            marker.touch()
        facts["usage"] = evaluator.usage

    anyio.run(main)
    assert facts["state"] == "finished"
    usage = facts["usage"]
    assert usage.requeued >= 1 and usage.lost >= 1 and usage.joined >= 1
    with RunReader(run_dir) as reader:
        rows = reader.problems()
        assert len(rows) == 2
        attempts = [a for row in rows for a in reader.attempts(row.id)]
        assert [a for a in attempts if a.state != "done"] == []  # none pending, none lost
        for row in rows:
            mine = reader.attempts(row.id)
            assert row.attempts == len(mine)
            tuned = [a for a in mine if len(a.parents) < 2]  # composites of the best per workload aside
            assert len(tuned) == 4, [a.note for a in mine]  # every CHUNK value once, the seed's included
            assert [a.note for a in mine].count("seed") == 1
            assert len({json.dumps(a.tunables, sort_keys=True) for a in tuned}) == 4
        nodes = Counter(a.node for a in attempts)
        # Nothing recorded on the lost node (its one job, the held seed, ran again elsewhere); the attempts spread
        # over the nodes left, the joined one included.
        assert facts["victim"] not in nodes, nodes
        assert len(nodes) >= 2 and facts["joined"] in nodes, nodes
        assert all(a.device_model == "cpu" and a.gpu is None for a in attempts)
        assert all(a.status == "PASSED" for a in attempts), [(a.status, a.reason) for a in attempts]
        pool = [e.message for e in reader.events(kind="log") if e.message.startswith("pool since this start")]
        messages = [e.message for e in reader.events(kind="log")]
        in_run = sum("re-verified" in m for m in messages[:messages.index(pool[0])]) if pool else 0
        assert len(pool) == 1 and "re-queued" in pool[0] and f"{len(attempts) + in_run} candidate jobs" in pool[0], \
            pool
        # Each problem's best re-verified with 10 rounds: when it closed, in the run, or at the end.
        assert all(reader.attempt(r.best_attempt_id).verified.startswith("passed") for r in rows)
        assert any(e.message.startswith("Ray cluster ") for e in reader.events(kind="log"))
