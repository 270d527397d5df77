"""Evaluator benchmarks (GPU): (a) overhead of submit -> verdict beyond the kernel's own GPU time, with the warm
pool and with a fresh process per job; (b) spread of one kernel's median over 10 separate workers; (c) agreement of
our timing with triton.testing.do_bench on the same kernels.

    python bench/evaluator_bench.py [--out results.json]

Prints a short table last. See bench/README.md for results.
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

from core.evaluate import EvaluationPool, TimingPolicy  # noqa: E402
from core.evaluate.evaluate import evaluate_solution  # noqa: E402
from core.problem import load_problem  # noqa: E402
from core.solution.from_reference import reference_as_solution  # noqa: E402
from core.solution.io import parse_solution  # noqa: E402

DEVICE = "cuda"
RMSNORM = ROOT / "problems" / "norm" / "001_rmsnorm_llama3_1_8b"
SOFTMAX = ROOT / "problems" / "attention" / "002_scaled_causal_softmax_gpt2"
GEMM = ROOT / "problems" / "gemm" / "001_bf16_gemm_prefill_llama3_1_8b_qkv_proj"


def torch_solution(problem, body: str, params: str):
    source = f"import torch\nimport torch.nn.functional as F\n\ndef run({params}):\n{body}\n"
    return parse_solution({
        "name": f"bench_{problem.name}", "definition": problem.name, "author": "bench",
        "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run",
                 "destination_passing_style": False},
        "sources": [{"path": "main.py", "content": source}],
    })


def rmsnorm_solution(problem):
    names = ", ".join(problem.definition.inputs)
    x, w, eps = list(problem.definition.inputs)
    return torch_solution(problem, f"    return F.rms_norm({x}, ({x}.shape[-1],), {w}, {eps})", names)


def gpu_seconds(verdict, policy: TimingPolicy) -> float:
    total = 0.0
    for w in verdict.workloads:
        if w.timing:
            total += w.timing.median_ms * (w.timing.calls + policy.warmup_calls + 1 + policy.device_check_calls)
    return total / 1e3


async def overhead(results: dict) -> None:
    problem = load_problem(RMSNORM)
    solution = rmsnorm_solution(problem)
    policy = TimingPolicy()
    workloads = (0, 1, 2) if DEVICE == "cuda" else (0,)
    warm, phases = [], []
    async with EvaluationPool(DEVICE) as pool:
        await pool.wait_ready(include_spares=True)
        await evaluate_solution(pool, problem, solution, workloads=workloads, timing=policy)  # builds, warms caches
        for _ in range(5):
            began = time.monotonic()
            verdict = await evaluate_solution(pool, problem, solution, workloads=workloads, timing=policy)
            warm.append(time.monotonic() - began - gpu_seconds(verdict, policy))
            assert verdict.status.value == "PASSED", verdict.reason
            totals: dict[str, float] = {"calls timed": sum(w.timing.calls for w in verdict.workloads)}
            for w in verdict.workloads:
                for name, seconds in w.phase_s.items():
                    totals[name] = totals.get(name, 0.0) + seconds
            phases.append(totals)
    fresh = []
    for _ in range(3):
        began = time.monotonic()
        async with EvaluationPool(DEVICE, spare=False) as pool:
            verdict = await evaluate_solution(pool, problem, solution, workloads=workloads, timing=policy)
        fresh.append(time.monotonic() - began - gpu_seconds(verdict, policy))
    results["overhead"] = {"warm_p50_s": statistics.median(warm), "fresh_p50_s": statistics.median(fresh),
                           "ratio": statistics.median(fresh) / statistics.median(warm), "warm": warm, "fresh": fresh,
                           "warm_phases_p50_s": {k: statistics.median(p[k] for p in phases) for k in phases[0]}}


async def spread(results: dict) -> None:
    problem = load_problem(RMSNORM)
    solution = rmsnorm_solution(problem)
    last = len(problem.workloads) - 1 if DEVICE == "cuda" else 0  # on the GPU the largest: well over 20 us
    medians = []
    for _ in range(10):
        async with EvaluationPool(DEVICE, spare=False) as pool:
            verdict = await evaluate_solution(pool, problem, solution, workloads=(last,), rounds=2)
        medians.append(verdict.workloads[0].timing.median_ms)
    results["spread"] = {"workload": last, "medians_ms": medians, "max_over_min": max(medians) / min(medians)}


async def agreement(results: dict) -> None:
    import torch
    import triton.testing

    from core.problem.inputs import make_inputs
    from core.problem.reference import compile_reference

    rows = []
    async with EvaluationPool(DEVICE) as pool:
        cases = ((RMSNORM, rmsnorm_solution), (SOFTMAX, reference_as_solution), (GEMM, reference_as_solution))
        for folder, make in cases:
            problem = load_problem(folder)
            index = len(problem.workloads) - 1
            verdict = await evaluate_solution(pool, problem, make(problem), workloads=(index,), rounds=2)
            ours = verdict.workloads[0].timing.median_ms
            # do_bench in this (trusted) process, on the same kernel and inputs.
            inputs = make_inputs(problem, problem.workloads[index], "cuda", 0)
            if make is rmsnorm_solution:
                x, w, eps = inputs.values()
                fn = lambda: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)  # noqa: E731
            else:
                run = compile_reference(problem.definition).run
                fn = lambda: run(*inputs.values())  # noqa: E731
            theirs = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
            rows.append({"problem": problem.name, "workload": index, "ours_ms": ours, "do_bench_ms": theirs,
                         "ratio": ours / theirs, "method": verdict.workloads[0].timing.method})
            del inputs
            torch.cuda.empty_cache()
    results["agreement"] = rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a smoke run, no do_bench")
    parser.add_argument("--parts", default="overhead,spread,agreement", help="which parts, comma-separated")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    results: dict = {"agreement": []}
    chosen = args.parts.split(",")
    parts = [p for p in (overhead, spread, agreement) if p.__name__ in chosen and (DEVICE == "cuda" or p is not agreement)]
    for part in parts:
        began = time.monotonic()
        anyio.run(part, results)
        print(f"{part.__name__}: {time.monotonic() - began:.1f} s {json.dumps(results.get(part.__name__))}",
              flush=True)
        if args.out:  # after every part, so a run cut short keeps what it measured
            args.out.write_text(json.dumps(results, indent=2))
    print("\n| measure | figure |\n| --- | --- |")
    if "overhead" in results:
        o = results["overhead"]
        print(f"| overhead p50, warm pool | {o['warm_p50_s']:.3f} s |")
        print(f"| overhead p50, fresh process per job | {o['fresh_p50_s']:.3f} s |")
        print(f"| fresh / warm | {o['ratio']:.1f}x |")
        print("| warm job, where the time went (s, summed over workloads) | "
              + ", ".join(f"{k} {v:.3f}" for k, v in o["warm_phases_p50_s"].items()) + " |")
    if "spread" in results:
        s = results["spread"]
        print(f"| spread over 10 workers (max/min of medians), workload {s['workload']} | {s['max_over_min']:.4f} "
              f"({min(s['medians_ms']) * 1e3:.1f}-{max(s['medians_ms']) * 1e3:.1f} us) |")
    for row in results["agreement"]:
        print(f"| ours / do_bench, {row['problem']} w{row['workload']} | {row['ratio']:.3f} "
              f"({row['ours_ms'] * 1e3:.1f} vs {row['do_bench_ms'] * 1e3:.1f} us) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
