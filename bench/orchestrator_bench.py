"""Orchestrator bookkeeping at scale: the real Fleet (store, planner, tuner agents, controls, metrics) over many
problems and agents, with a simulated evaluator in place of builds and GPUs.

    python bench/orchestrator_bench.py [--problems 1000] [--agents 256] [--gpus 8] [--seconds 60] [--eval-ms 50]

Each simulated evaluation holds one of --gpus slots for --eval-ms and returns a PASSED verdict whose times depend
on the candidate's tunables. Prints a short table last: time per planner tick and per decision, store writes per
second, attempts per second, GPU busy fraction.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.config import parse_config  # noqa: E402
from core.evaluate.baseline import WorkloadBaseline  # noqa: E402
from core.evaluate.pool import PoolUsage  # noqa: E402
from core.evaluate.verdict import Status, Timing, Verdict, WorkloadVerdict  # noqa: E402
from core.fleet import orchestrator  # noqa: E402
from core.fleet.orchestrator import Fleet  # noqa: E402
from core.planner import plan as pure_plan  # noqa: E402
from core.solution.tunables import get_tunables  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "fleet"))
sys.path.insert(0, str(ROOT / "tests" / "support"))
from fleet_problems import seed_solution  # noqa: E402


def write_problems(root: Path, count: int) -> None:
    template = {
        "description": "synthetic", "axes": {"rows": {"type": "var"}, "width": {"type": "const", "value": 64}},
        "inputs": {"x": {"shape": ["rows", "width"], "dtype": "float32"},
                   "w": {"shape": ["width"], "dtype": "float32"}},
        "outputs": {"out": {"shape": ["rows", "width"], "dtype": "float32"}},
        "reference": "import torch\n\ndef run(x, w):\n    return torch.relu(x * w)\n",
    }
    for n in range(count):
        name = f"p{n:04d}"
        folder = root / f"set{n % 10}" / name
        (folder / "solutions").mkdir(parents=True)
        (folder / "definition.json").write_text(json.dumps({"name": name, **template}))
        lines = [{"uuid": f"{name}-{r}", "axes": {"rows": r}, "inputs": {"x": {"type": "random"},
                                                                       "w": {"type": "random"}}} for r in (64, 256)]
        (folder / "workload.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
        seed = seed_solution("scaled_relu")
        seed["definition"] = name
        (folder / "solutions" / "seed_torch.json").write_text(json.dumps(seed))


class SimulatedPool:
    def __init__(self, gpus: int):
        self.usage = PoolUsage(devices=gpus)
        self.slots = anyio.CapacityLimiter(gpus)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return None

    async def baseline(self, problem, indices, **_):
        return [WorkloadBaseline(i, baseline_ms=1.0, method="eager", eager_ms=1.0) for i in indices]


def make_evaluator(pool: SimulatedPool, eval_s: float, rng: random.Random):
    async def evaluate(problem, solution, workloads, priority):
        tunables = get_tunables(solution)
        chunk = tunables.values["CHUNK"] if tunables else 1
        queued = time.monotonic()
        pool.usage.demand_changed(+1, queued)
        async with pool.slots:
            began = time.monotonic()
            pool.usage.queue_wait_s += began - queued
            await anyio.sleep(eval_s)
            pool.usage.busy_s += time.monotonic() - began
            pool.usage.jobs += 1
        pool.usage.demand_changed(-1, time.monotonic())
        base = 2.0 / math.log2(chunk + 1) * rng.uniform(0.95, 1.05)
        indices = workloads if workloads is not None else tuple(range(len(problem.workloads)))
        results = tuple(WorkloadVerdict(i, Status.PASSED, timing=Timing(base * (1 + i), 0.01, 10, "simulated"))
                        for i in indices)
        return Verdict(Status.PASSED, "", results, seconds=eval_s), None
    return evaluate


PLAN_SECONDS: list[float] = []
DECISIONS: list[int] = []


def timed_plan(inp):
    began = time.perf_counter()
    result = pure_plan(inp)
    PLAN_SECONDS.append(time.perf_counter() - began)
    DECISIONS.append(len(result.assignments) + len(result.status_changes))
    return result


class TimedFleet(Fleet):
    ticks: list[float]

    def _plan_once(self) -> None:
        began = time.perf_counter()
        super()._plan_once()
        self.ticks.append(time.perf_counter() - began)


async def bench(args) -> dict:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        began = time.perf_counter()
        write_problems(root / "problems", args.problems)
        config = parse_config({
            "fleet": {"device": "cpu", "tuner_agents": args.agents, "languages": ["pytorch"]},
            "planner": {"tick_s": 1.0, "max_agents_per_problem": 2, "plateau_attempts": 1000},
            "tuner": {"trials_per_problem": 4, "startup_trials": 2}})
        pool = SimulatedPool(args.gpus)
        fleet = TimedFleet(root / "run", config, [str(root / "problems")], pool_factory=lambda f: pool,
                           evaluator=make_evaluator(pool, args.eval_ms / 1e3, rng))
        fleet.ticks = []
        orchestrator.plan = timed_plan  # the orchestrator's own plan() call, timed apart from its store I/O
        fleet.open()
        setup_s = time.perf_counter() - began
        start_changes = fleet.store.conn.total_changes
        started = time.perf_counter()
        measured = {}

        async def stop_later() -> None:
            await anyio.sleep(args.seconds)
            measured["changes"] = fleet.store.conn.total_changes - start_changes
            measured["wall"] = time.perf_counter() - started
            measured["attempts"] = fleet.attempts_done
            fleet.request_stop("bench time is up")

        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_later)
            await fleet.run()
            tg.cancel_scope.cancel()
        if not measured:  # the run ended on its own first
            measured = {"changes": 0, "wall": time.perf_counter() - started, "attempts": fleet.attempts_done}
        wall, changes = measured["wall"], measured["changes"]
        orchestrator.plan = pure_plan
    decisions = sum(DECISIONS)
    return {"problems": args.problems, "agents": args.agents, "gpus": args.gpus, "setup_s": setup_s,
            "wall_s": wall, "ticks": len(fleet.ticks),
            "tick_ms_p50": statistics.median(fleet.ticks) * 1e3 if fleet.ticks else None,
            "tick_ms_p95": statistics.quantiles(fleet.ticks, n=20)[-1] * 1e3 if len(fleet.ticks) > 2 else None,
            "plan_ms_p50": statistics.median(PLAN_SECONDS) * 1e3 if PLAN_SECONDS else None,
            "decisions": decisions, "decisions_per_tick": decisions / max(len(DECISIONS), 1),
            "tick_ms_per_decision": sum(fleet.ticks) * 1e3 / max(decisions, 1),
            "store_rows_per_s": changes / wall, "attempts": measured["attempts"], "attempts_per_s": measured["attempts"] / wall, "gpu_busy": pool.usage.busy_fraction()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=256)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--eval-ms", type=float, default=50.0)
    args = parser.parse_args()
    result = anyio.run(bench, args)
    print(json.dumps(result, indent=2))
    print("\n| measure | figure |\n| --- | --- |")
    for key, value in result.items():
        print(f"| {key} | {value:.3f} |" if isinstance(value, float) else f"| {key} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
