"""Evaluate every problem's seed solution (and the reference as a candidate) on one warm pool, with T_b (eager
reference; torch.compile only when --compile) and T_sol from core.roofline, and print a table per problem.

    python bench/seed_report.py [problems/] [--device cuda] [--candidate seed|reference] [--workloads first-last]
                                [--no-baseline] [--out rows.jsonl]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.evaluate import EvaluationPool, TimingPolicy  # noqa: E402
from core.evaluate.evaluate import evaluate_solution  # noqa: E402
from core.problem import load_problems  # noqa: E402
from core.solution.from_reference import reference_as_solution  # noqa: E402
from core.solution.io import load_solution  # noqa: E402


def sol_times(problem, device: str, indices: list[int]) -> dict[int, float]:
    if device != "cuda":
        return {}
    import torch

    from core.roofline import count_workload, lookup_spec, t_sol

    spec = lookup_spec(torch.cuda.get_device_name())
    times = {}
    for workload in (problem.workloads[i] for i in indices):
        count = count_workload(problem, workload)
        if not count.failed:
            times[workload.index] = t_sol(count, spec).t_sol_s * 1e3
    return times


async def report(args) -> list[dict]:
    loaded = load_problems(args.paths)
    rows = []
    policy = TimingPolicy(target_seconds=0.03, device_check_calls=5) if args.quick else TimingPolicy()
    async with EvaluationPool(args.device) as pool:
        for problem in loaded.problems:
            began = time.monotonic()
            if args.candidate == "seed":
                path = problem.path / "solutions" / "seed_cuda.json"
                if not path.exists():
                    rows.append({"problem": problem.name, "status": "no seed"})
                    emit(rows[-1], args.out)
                    continue
                solution = load_solution(path)
            else:
                solution = reference_as_solution(problem)
            indices = chosen_workloads(problem, args.workloads)
            if not indices:
                rows.append({"problem": f"{problem.subset}/{problem.name}", "status": "no runnable workload"})
                emit(rows[-1], args.out)
                continue
            sol = sol_times(problem, args.device, indices) if not args.no_baseline else {}
            baselines = {} if args.no_baseline else dict(zip(indices, await pool.baseline(
                problem, indices, timing=policy, compile_timeout_s=120 if args.compile else 0)))
            verdict = await evaluate_solution(pool, problem, solution, timing=policy, sol_ms=sol or None,
                                              rounds=args.rounds, workloads=tuple(indices))
            speedups, scores, margins = [], [], []
            for w in verdict.workloads:
                t_b = baselines[w.index].baseline_ms if w.index in baselines else None
                if w.passed and w.timing and t_b:
                    speedups.append(t_b / w.timing.median_ms)
                    if w.index in sol and t_b > sol[w.index]:
                        t_k, t_s = w.timing.median_ms, sol[w.index]
                        scores.append(1 / (1 + (t_k - t_s) / (t_b - t_s)))
                        margins.append(t_k / t_s)
            rows.append({
                "problem": f"{problem.subset}/{problem.name}", "status": verdict.status.value,
                "reason": verdict.reason[:200],
                "passed": sum(w.passed for w in verdict.workloads), "workloads": len(indices),
                "geomean_speedup": math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None,
                "mean_sol": sum(scores) / len(scores) if scores else None,
                "min_time_over_tsol": min(margins) if margins else None,
                "seconds": time.monotonic() - began,
            })
            emit(rows[-1], args.out)
    return rows


def chosen_workloads(problem, which: str) -> list[int]:
    runnable = [w.index for w in problem.workloads if not w.unavailable]
    if which == "first-last" and len(runnable) > 2:
        return [runnable[0], runnable[-1]]
    return runnable


def emit(row: dict, out: Path | None) -> None:
    """Print one row and append it to ``out`` (JSON lines) at once, so a run cut at a time limit keeps its rows."""
    print(json.dumps(row), flush=True)
    if out:
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("paths", nargs="*", default=[str(ROOT / "problems")])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--candidate", default="seed", choices=["seed", "reference"])
    parser.add_argument("--compile", action="store_true", help="also try torch.compile for T_b (slow)")
    parser.add_argument("--rounds", type=int, default=5, help="correctness rounds per workload")
    parser.add_argument("--quick", action="store_true", help="shorter timing (about 30 ms measured per workload)")
    parser.add_argument("--workloads", default="all", choices=["all", "first-last"],
                        help="first-last: the first and last runnable workload of each problem")
    parser.add_argument("--no-baseline", action="store_true", help="correctness only: no T_b, no T_sol")
    parser.add_argument("--out", type=Path, help="JSON lines, one row per problem, appended as each one ends")
    args = parser.parse_args()
    rows = anyio.run(report, args)
    print(f"\n| problem | status | passed | geomean speedup vs eager | mean SOL | min T/T_sol |")
    print("| --- | --- | --- | --- | --- | --- |")
    fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    for r in rows:
        print(f"| {r['problem']} | {r['status']} | {r.get('passed', 0)}/{r.get('workloads', 0)} | "
              f"{fmt(r.get('geomean_speedup'), '.2f')} | {fmt(r.get('mean_sol'), '.2f')} | "
              f"{fmt(r.get('min_time_over_tsol'), '.2f')} |")
    ok = sum(r["status"] == "PASSED" for r in rows)
    print(f"{ok} of {len(rows)} problems passed every workload")
    return 0 if ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
