"""The reference evaluated as a candidate against its own T_b: the speedup should read about 1.0x on every device.
Anything else is the measurement's error (noise, a T_b timed under other load, a difference between how the judge
times T_b and how candidates are timed), and this prints its size.

    python bench/self_speedup.py PROBLEM_DIR... [--device cpu|cuda] [--repeats 3] [--rounds 1]

Each repeat is a fresh ``kernelfleet eval`` with an empty T_b cache (so T_b is measured each time). Prints per
problem the geomean speedup of each repeat and, per workload, the range of speedups seen; last a table line per
problem: min / median / max of the geomeans.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.problem import load_problem  # noqa: E402
from core.roofline.sol import geomean  # noqa: E402
from core.solution.from_reference import reference_as_solution  # noqa: E402
from core.solution.io import solution_to_dict  # noqa: E402


def one_repeat(problem_dir: Path, solution: Path, device: str, rounds: int, cache: Path) -> dict[int, float]:
    done = subprocess.run([sys.executable, "-m", "cli.main", "eval", str(problem_dir), "--solution", str(solution),
                           "--device", device, "--rounds", str(rounds), "--json"], cwd=ROOT, capture_output=True,
                          text=True, env={**__import__("os").environ, "KERNELFLEET_CACHE_DIR": str(cache)},
                          timeout=3600)
    speedups = {}
    for line in done.stdout.splitlines():
        trace = json.loads(line)
        performance = trace["evaluation"].get("performance") or {}
        if performance.get("speedup_factor"):
            speedups[trace["kernelfleet"]["workload_index"]] = performance["speedup_factor"]
    return speedups


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="+", type=Path)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    summary = []
    with tempfile.TemporaryDirectory(prefix="kernelfleet-self-speedup-") as work:
        for n, problem_dir in enumerate(args.problems):
            problem = load_problem(problem_dir)
            solution = Path(work) / f"reference-{n}.json"
            solution.write_text(json.dumps(solution_to_dict(reference_as_solution(problem))))
            runs = [one_repeat(problem_dir, solution, args.device, args.rounds, Path(work) / f"cache-{n}-{r}")
                    for r in range(args.repeats)]
            geomeans = [geomean(list(r.values())) for r in runs if r]
            print(f"{problem.name}: geomean per repeat " + ", ".join(f"{g:.2f}x" for g in geomeans))
            for index in sorted({i for r in runs for i in r}):
                seen = [r[index] for r in runs if index in r]
                print(f"  workload {index}: {min(seen):.2f}x .. {max(seen):.2f}x over {len(seen)} repeats")
            if geomeans:
                summary.append((problem.name, min(geomeans), statistics.median(geomeans), max(geomeans)))
    print("\n| problem | min | median | max |\n| --- | --- | --- | --- |")
    for name, low, mid, high in summary:
        print(f"| {name} | {low:.2f}x | {mid:.2f}x | {high:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
