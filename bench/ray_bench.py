"""The same evaluations through this machine's pool (``LocalEvaluator``) and through a one-node Ray cluster started
here (``RayEvaluator("local")``, one GPU actor per GPU): wall time, GPU busy fraction, and what each path adds per job.

    python bench/ray_bench.py                       # GPU box: the RMSNorm seed (solutions/seed_cuda.json), 24 jobs
    python bench/ray_bench.py --bundled             # and each bundled problem's shipped seed once, on both
    python bench/ray_bench.py --device cpu --jobs 6 # anywhere: a pytorch RMSNorm on the CPU, quick timing

Per job, "overhead" is the time ``evaluate()`` took less the time the job held its device and less its queue wait:
building (a cache hit after the first), materializing, the pool's requests, and for Ray the transfer and the actor.
For Ray, "dispatch" is the time from ``evaluate()`` to the job starting in its actor, less the wait for a free actor,
and "round trip" the time Ray took to carry the job there and its result back (``core.cluster.usage``). Prints a
table last; ``--out FILE`` writes the figures as JSON. Results: bench/ray_bench.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.evaluate import TimingPolicy  # noqa: E402
from core.evaluate.evaluator import EvaluationRequest  # noqa: E402
from core.problem import load_problem  # noqa: E402
from core.solution.io import load_solution, parse_solution  # noqa: E402

RMSNORM = ROOT / "problems" / "norm" / "001_rmsnorm_llama3_1_8b"
QUICK = TimingPolicy(warmup_calls=1, min_calls=5, max_calls=100, target_seconds=0.02, device_check_calls=3)
TORCH_RMSNORM = '''import torch

def run(hidden_states, weight, eps, output):
    x = hidden_states.float()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    output.copy_((y * weight.float()).to(hidden_states.dtype))
'''


def cpu_solution(problem):
    return parse_solution({
        "name": "bench_torch_rmsnorm", "definition": problem.name, "author": "bench",
        "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run",
                 "destination_passing_style": True},
        "sources": [{"path": "main.py", "content": TORCH_RMSNORM}]})


def _figures(usage) -> dict[str, float]:
    return {"busy_s": usage.busy_s, "wanted_s": usage.wanted_s, "queue_wait_s": usage.queue_wait_s,
            "jobs": usage.jobs}


async def measure(name: str, evaluator, work: list[EvaluationRequest], concurrency: int,
                  warm: list[EvaluationRequest]) -> dict:
    async with evaluator:
        for request in warm:  # builds, problem content, workers' caches: not what is measured
            evaluation = await evaluator.evaluate(request)
            if evaluation.verdict.status.value != "PASSED":
                print(f"{name}: warm-up {request.problem.name}: {evaluation.verdict.status.value} "
                      f"{evaluation.verdict.reason[:200]}", flush=True)
        before = _figures(evaluator.usage)
        dispatch_before = len(getattr(evaluator.usage, "dispatch_s", []))
        walls: list[float] = []
        statuses: dict[str, int] = {}
        limiter = anyio.CapacityLimiter(concurrency)

        async def one(request: EvaluationRequest) -> None:
            async with limiter:
                began = time.monotonic()
                evaluation = await evaluator.evaluate(request)
                walls.append(time.monotonic() - began)
                status = evaluation.verdict.status.value
                statuses[status] = statuses.get(status, 0) + 1

        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            for request in work:
                tg.start_soon(one, request)
        wall = time.monotonic() - started
        after = _figures(evaluator.usage)
        delta = {k: after[k] - before[k] for k in after}
        jobs = max(1, int(delta["jobs"]))
        result = {"backend": name, "jobs": len(work), "statuses": statuses, "wall_s": wall,
                  "busy_fraction": delta["busy_s"] / delta["wanted_s"] if delta["wanted_s"] > 0 else None,
                  "device_s_per_job": delta["busy_s"] / jobs, "queue_wait_s_per_job": delta["queue_wait_s"] / jobs,
                  "overhead_ms_per_job": (sum(walls) - delta["busy_s"] - delta["queue_wait_s"]) / jobs * 1e3,
                  "describe": evaluator.describe(), "summary": evaluator.usage.summary()}
        dispatch = getattr(evaluator.usage, "dispatch_s", None)
        if dispatch is not None:
            measured = dispatch[dispatch_before:]
            trips = evaluator.usage.round_trip_s[dispatch_before:]
            result["dispatch_ms"] = _ms(measured)
            result["round_trip_ms"] = _ms(trips)
        return result


def _ms(seconds: list[float]) -> dict[str, float] | None:
    if not seconds:
        return None
    return {"mean": statistics.fmean(seconds) * 1e3, "median": statistics.median(seconds) * 1e3,
            "max": max(seconds) * 1e3}


def bundled_requests(device: str, timing: TimingPolicy) -> list[EvaluationRequest]:
    """Each bundled problem's shipped seed (solutions/seed_*.json), once, on its first three workloads."""
    requests = []
    for folder in sorted(p.parent.parent for p in (ROOT / "problems").glob("*/*/solutions/seed_*.json")):
        problem = load_problem(folder)
        seeds = sorted((folder / "solutions").glob("seed_*.json"))
        solution = load_solution(seeds[0])
        if device == "cpu" and solution.spec.languages[0].value != "pytorch":
            continue
        indices = tuple(w.index for w in problem.workloads if w.runnable)[:3]
        requests.append(EvaluationRequest(problem, solution, indices, 2, timing))
    return requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--jobs", type=int, default=24, help="evaluations of the RMSNorm seed per backend")
    parser.add_argument("--concurrency", type=int, default=0,
                        help="evaluations in flight at once (default: 2 per device)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="the fleet's quick timing (default on the cpu)")
    parser.add_argument("--bundled", action="store_true", help="also each bundled problem's seed once")
    parser.add_argument("--only", choices=["local", "ray"], help="one backend alone")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()

    from core.fleet.gpus import detect_gpus

    gpus = detect_gpus() if args.device == "cuda" else []
    if args.device == "cuda" and not gpus:
        print("error: no CUDA GPU found (use --device cpu for a quick check)", file=sys.stderr)
        return 2
    devices = max(1, len(gpus))
    concurrency = args.concurrency or 2 * devices
    timing = QUICK if args.quick or args.device == "cpu" else TimingPolicy()
    problem = load_problem(RMSNORM)
    solution = load_solution(RMSNORM / "solutions" / "seed_cuda.json") if args.device == "cuda" \
        else cpu_solution(problem)
    workloads = (0, 1, 2) if args.device == "cuda" else (0, 1)
    work = [EvaluationRequest(problem, solution, workloads, args.rounds, timing) for _ in range(args.jobs)]
    warm = [work[0]]
    if args.bundled:
        extra = bundled_requests(args.device, timing)
        work += extra
        warm += extra  # their builds, once
    readable = [str(ROOT / "problems")]

    results = []
    if args.only != "ray":
        from core.evaluate.local import LocalEvaluator

        local = LocalEvaluator(args.device, gpus or None, spare=True, readable=readable)
        results.append(anyio.run(measure, "local pool", local, work, concurrency, warm))
        print(f"local pool done: {results[-1]['wall_s']:.1f} s", flush=True)
    if args.only != "local":
        from core.cluster import RayEvaluator

        ray = RayEvaluator("local", args.device, spare=True, readable=readable,
                           init_options={"num_gpus": devices})
        results.append(anyio.run(measure, "Ray (one local node)", ray, work, concurrency, warm))
        print(f"Ray done: {results[-1]['wall_s']:.1f} s", flush=True)

    for result in results:
        print(f"\n{result['backend']}:")
        for line in result["describe"]:
            print(f"  {line}")
        print(f"  {result['summary']}")
    print(f"\n{len(work)} jobs ({args.jobs} x {problem.name} workloads {list(workloads)}, {args.rounds} rounds"
          + (f", plus {len(work) - args.jobs} bundled seeds" if args.bundled else "") + f"), {concurrency} in flight, "
          f"device {args.device} x {devices}\n")
    print("| backend | wall s | busy fraction | device s/job | queue wait s/job | overhead ms/job | dispatch ms "
          "(mean/median/max) | round trip ms (mean/median/max) | statuses |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        def stats(key):
            value = r.get(key)
            return "-" if not value else f"{value['mean']:.1f} / {value['median']:.1f} / {value['max']:.1f}"

        busy = "-" if r["busy_fraction"] is None else f"{r['busy_fraction']:.0%}"
        print(f"| {r['backend']} | {r['wall_s']:.1f} | {busy} | {r['device_s_per_job']:.3f} | "
              f"{r['queue_wait_s_per_job']:.3f} | {r['overhead_ms_per_job']:.1f} | {stats('dispatch_ms')} | "
              f"{stats('round_trip_ms')} | {', '.join(f'{k} {v}' for k, v in sorted(r['statuses'].items()))} |")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
