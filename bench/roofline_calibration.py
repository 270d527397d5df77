"""Calibrate core.roofline against SOLAR: our T_sol with B200 specs vs. the B200 ``sol_ms`` in each shared
SOL-ExecBench problem's metadata.json.

    /work/venv/bin/python bench/roofline_calibration.py [--workloads first,last|all] [--jobs 2] [--json out.json]

Each problem is counted in a forked child process (one CPU thread, a memory limit and a timeout), so a reference
that is slow or huge costs only its own result. Workloads whose safetensors blobs are absent are skipped. A
workload whose reference cannot be traced is priced analytically (declared inputs + outputs, no FLOPs) and
reported as such. Prints the ratio ours/SOLAR (median, share within 0.5-2x and 0.8-1.25x, per subset, per counting
method) and the worst outliers, for the SOLAR-like conventions (the defaults of ``core.roofline.sol.Conventions``)
and for the naive model (``Conventions.naive()``).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import resource
import statistics
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.problem.load import ProblemInvalid, find_problem_dirs, load_problem  # noqa: E402
from core.roofline.counting import WorkCount, analytic_io_bytes, count_workload  # noqa: E402
from core.roofline.sol import Conventions, t_sol  # noqa: E402
from core.roofline.specs import lookup_spec  # noqa: E402

# Imported here, before any fork, so each child starts with torch and the tracer already loaded.
import torch  # noqa: E402,F401
import core.problem.inputs  # noqa: E402,F401
import core.problem.reference  # noqa: E402,F401
import core.roofline.tracking  # noqa: E402,F401

DEFAULT_DATA = Path(os.environ.get("KERNELFLEET_SOL_EXECBENCH", ROOT.parent / "shared" / "sol-execbench")) / "benchmark"


@dataclass
class Row:
    subset: str
    problem: str
    workload: int
    solar_s: float
    count: WorkCount
    ours_s: dict  # convention name -> seconds
    detail: dict  # convention name -> SolTime


def pick_workloads(problem, which: str):
    runnable = [w for w in problem.workloads if w.runnable]
    if which == "all" or len(runnable) <= 1:
        return runnable
    picks = {"first": runnable[0], "last": runnable[-1], "middle": runnable[len(runnable) // 2]}
    chosen = []
    for key in which.split(","):
        w = picks[key.strip()]
        if w not in chosen:
            chosen.append(w)
    return chosen


def _child(folder: str, indices: list[int], conn, memory_limit: int) -> None:
    import torch

    torch.set_num_threads(1)
    if memory_limit:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
        except (ValueError, OSError):
            pass
    problem = load_problem(folder)
    for w in problem.workloads:
        if w.index in indices:
            count = count_workload(problem, w, analytic_fallback=True)
            conn.send(count.to_dict())
    conn.send(None)
    conn.close()


def count_in_child(folder: Path, indices: list[int], timeout_s: float, memory_limit: int) -> tuple[list[dict], str]:
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(str(folder), indices, child, memory_limit), daemon=True)
    proc.start()
    child.close()
    results, deadline, error = [], time.monotonic() + timeout_s, ""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            error = f"timeout after {timeout_s:.0f} s"
            break
        if parent.poll(min(left, 1.0)):
            try:
                item = parent.recv()
            except EOFError:
                error = f"child died (exit code {proc.exitcode})"
                break
            if item is None:
                break
            results.append(item)
        elif not proc.is_alive() and not parent.poll():
            error = f"child died (exit code {proc.exitcode})"
            break
    if proc.is_alive():
        proc.kill()
    proc.join(5)
    return results, error


def _from_dict(d: dict) -> WorkCount:
    return WorkCount(problem=d["problem"], workload=d["workload"], method=d["method"],
                     matmul_flops=d["matmul_flops"], matmul_flops_effective=d["matmul_flops_effective"],
                     simt_flops=d["simt_flops"], bytes_read=d["bytes_read"], bytes_written=d["bytes_written"],
                     notes=tuple(d["notes"]), seconds=d["seconds"])


def warm_up(problems) -> None:
    """Count one small workload on meta and on the CPU here, before forking, so that torch's lazily imported
    meta kernels and decompositions are loaded once instead of in every child."""
    import torch

    torch.set_num_threads(1)  # no OpenMP pool in the parent: children are forked from it
    for problem, _, _ in problems[:1]:
        small = problem.smallest_runnable_workload()
        if small is not None:
            count_workload(problem, small, methods=("meta",))
            count_workload(problem, small, methods=("cpu",))


def calibrate(data: Path, which: str, jobs: int, timeout_s: float, memory_limit: int, only: str | None,
              conventions: dict[str, Conventions]) -> tuple[list[Row], list[str]]:
    spec = lookup_spec("NVIDIA B200")
    folders = [f for f in find_problem_dirs([data]) if not only or only in str(f)]
    problems, skipped = [], []
    for folder in folders:
        try:
            problem = load_problem(folder)
        except ProblemInvalid as exc:
            skipped.append(f"{folder.name}: invalid ({exc.errors[0]})")
            continue
        metadata = json.loads((folder / "metadata.json").read_text())
        sol = {p["index"]: p["sol_ms"] * 1e-3 for p in metadata["sol"]["per_workload"]}
        chosen = [w for w in pick_workloads(problem, which) if w.index in sol]
        if not chosen:
            skipped.append(f"{problem.subset}/{problem.name}: no runnable workload with a SOLAR figure")
            continue
        problems.append((problem, chosen, sol))

    def work(item):
        problem, chosen, sol = item
        results, error = count_in_child(problem.path, [w.index for w in chosen], timeout_s, memory_limit)
        by_index = {r["workload"]: _from_dict(r) for r in results}
        rows = []
        for w in chosen:
            count = by_index.get(w.index)
            if count is None:  # the child timed out or died before this workload
                read, written = analytic_io_bytes(problem, w)
                count = WorkCount(problem=problem.name, workload=w.index, method=f"analytic: {error}",
                                  bytes_read=read, bytes_written=written)
            ours = {name: t_sol(count, spec, conv) for name, conv in conventions.items()}
            rows.append(Row(problem.subset, problem.name, w.index, sol[w.index], count,
                            {k: v.t_sol_s for k, v in ours.items()}, ours))
        done = len(rows)
        print(f"  {problem.subset}/{problem.name}: {done} workload(s)"
              f"{' [' + error + ']' if error else ''}", file=sys.stderr, flush=True)
        return rows

    warm_up(problems)
    rows: list[Row] = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for result in pool.map(work, problems):
            rows.extend(result)
    return rows, skipped


def summarize(rows: list[Row], convention: str) -> dict:
    def stats(subset_rows):
        ratios = [r.ours_s[convention] / r.solar_s for r in subset_rows]
        if not ratios:
            return {"n": 0}
        within = sum(0.5 <= x <= 2.0 for x in ratios)
        return {"n": len(ratios), "median": statistics.median(ratios), "within_2x": within / len(ratios),
                "within_1_25x": sum(0.8 <= x <= 1.25 for x in ratios) / len(ratios),
                "geomean": math.exp(sum(math.log(x) for x in ratios) / len(ratios)),
                "low": sum(x < 0.5 for x in ratios), "high": sum(x > 2.0 for x in ratios)}

    by_subset = defaultdict(list)
    by_method = defaultdict(list)
    for r in rows:
        by_subset[r.subset].append(r)
        by_method[_method_class(r.count.method)].append(r)
    problems = defaultdict(list)
    for r in rows:
        problems[(r.subset, r.problem)].append(math.log(r.ours_s[convention] / r.solar_s))
    per_problem = [math.exp(sum(v) / len(v)) for v in problems.values()]
    return {
        "all": stats(rows),
        "subsets": {k: stats(v) for k, v in sorted(by_subset.items())},
        "methods": {k: stats(v) for k, v in sorted(by_method.items())},
        "problems": {"n": len(per_problem), "median": statistics.median(per_problem) if per_problem else None,
                     "within_2x": sum(0.5 <= x <= 2 for x in per_problem) / max(len(per_problem), 1)},
    }


def _method_class(method: str) -> str:
    return method.split(":")[0].split(" (")[0]


def reason(row: Row, convention: str) -> str:
    sol = row.detail[convention]
    c = row.count
    flops = sum(c.matmul_flops_effective.values())
    main = max(c.matmul_flops_effective, key=c.matmul_flops_effective.get) if c.matmul_flops_effective else "-"
    parts = [c.method.split(";")[0][:90], f"{sol.bound}-bound", f"mm {flops:.3g} FLOP {main}",
             f"simt {c.simt_flops:.3g}", f"bytes {c.bytes_read:.3g}+{c.bytes_written:.3g}"]
    return ", ".join(parts)


def print_report(rows: list[Row], skipped: list[str], conventions: dict[str, Conventions], worst: int) -> dict:
    report = {}
    methods = Counter(_method_class(r.count.method) for r in rows)
    print(f"\n{len(rows)} workloads of {len({(r.subset, r.problem) for r in rows})} problems; "
          f"counting methods: {dict(methods)}; skipped {len(skipped)} problem(s)")
    for line in skipped:
        print(f"  skipped {line}")
    for name in conventions:
        s = summarize(rows, name)
        report[name] = s
        a = s["all"]
        print(f"\n== {name}: ours/SOLAR over {a['n']} workloads: median {a['median']:.3f}, geomean {a['geomean']:.3f}, "
              f"within 0.5-2x {100 * a['within_2x']:.1f}% (below {a['low']}, above {a['high']}), "
              f"within 0.8-1.25x {100 * a['within_1_25x']:.1f}%; per problem "
              f"(geomean over its workloads): median {s['problems']['median']:.3f}, "
              f"within 2x {100 * s['problems']['within_2x']:.1f}% of {s['problems']['n']}")
        print(f"   {'subset':<18}{'n':>5}{'median':>9}{'within 2x':>11}{'<0.5':>6}{'>2':>5}{'within 1.25x':>14}")
        for key, v in [*s["subsets"].items(), *(("method " + k, v) for k, v in s["methods"].items())]:
            if v["n"]:
                print(f"   {key:<18}{v['n']:>5}{v['median']:>9.3f}{100 * v['within_2x']:>10.1f}%{v['low']:>6}"
                      f"{v['high']:>5}{100 * v['within_1_25x']:>13.1f}%")
    name = next(iter(conventions))
    outliers = sorted(rows, key=lambda r: -abs(math.log(r.ours_s[name] / r.solar_s)))
    print(f"\n== worst {worst} outliers ({name}): ratio, ours us, SOLAR us, problem#workload, why")
    for r in outliers[:worst]:
        ratio = r.ours_s[name] / r.solar_s
        if 0.5 <= ratio <= 2:
            break
        print(f"  {ratio:8.3f} {r.ours_s[name] * 1e6:10.2f} {r.solar_s * 1e6:10.2f}  "
              f"{r.subset}/{r.problem}#{r.workload}: {reason(r, name)}")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the benchmark/ folder of SOL-ExecBench")
    parser.add_argument("--workloads", default="first,last", help="first,last (default), first, last, middle or all")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per problem")
    parser.add_argument("--memory-gib", type=float, default=8.0, help="address-space limit per child (0: none)")
    parser.add_argument("--only", default=None, help="only problem folders whose path contains this")
    parser.add_argument("--worst", type=int, default=25)
    parser.add_argument("--json", type=Path, default=None, help="write every workload's figures here")
    args = parser.parse_args(argv)
    conventions = {"solar-like": Conventions(), "naive": Conventions.naive()}
    start = time.time()
    rows, skipped = calibrate(args.data, args.workloads, args.jobs, args.timeout, int(args.memory_gib * 2**30),
                              args.only, conventions)
    report = print_report(rows, skipped, conventions, args.worst)
    print(f"\n{time.time() - start:.0f} s wall")
    if args.json:
        args.json.write_text(json.dumps({
            "summary": report, "skipped": skipped,
            "rows": [{"subset": r.subset, "problem": r.problem, "workload": r.workload, "solar_s": r.solar_s,
                      "ours_s": r.ours_s, "bound": {k: v.bound for k, v in r.detail.items()},
                      "count": r.count.to_dict()} for r in rows],
        }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
