"""``kernelfleet problems check``: load problem folders, report what can run, optionally run the references."""

from __future__ import annotations

import argparse
import os
from collections import Counter, defaultdict
from pathlib import Path

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from core.problem import load_problems
from core.problem.reference_check import DEVICE_LIMITED, Outcome, ReferenceResult, check_many


def register(commands: argparse._SubParsersAction) -> None:
    problems = commands.add_parser("problems", help="inspect problem folders")
    sub = problems.add_subparsers(dest="problems_command", metavar="ACTION")
    sub.required = True
    check = sub.add_parser(
        "check",
        help="load every problem under the paths and report what is runnable",
        description="Load every definition.json + workload.jsonl under PATH... and report per subset how many "
                    "workloads are runnable. Exits 1 if any definition or workload is invalid.",
    )
    check.add_argument("paths", nargs="+", metavar="PATH", help="problem folders or folders holding them")
    check.add_argument("--run-reference", action="store_true",
                       help="run each reference on its smallest runnable workload and check output shapes/dtypes")
    check.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="device for --run-reference")
    check.add_argument("--timeout", type=float, default=120.0, metavar="S", help="seconds per reference (default 120)")
    check.add_argument("--jobs", type=int, default=None, metavar="N",
                       help="references run at once (default: CPU cores on cpu, 1 on cuda)")
    check.add_argument("--memory-limit-gb", type=float, default=None, metavar="GB",
                       help="address-space limit per reference on cpu (default: RAM / jobs)")
    check.add_argument("--blob-root", action="append", default=[], type=Path, metavar="DIR",
                       help="where safetensors paths of workloads are resolved (repeatable)")
    check.add_argument("--strict", action="store_true",
                       help="with --run-reference, exit 1 when any reference fails, whatever the reason")
    check.set_defaults(handler=run_check)


def run_check(args: argparse.Namespace) -> int:
    out, err = Console(), Console(stderr=True)
    try:
        report = load_problems(args.paths, args.blob_root)
    except FileNotFoundError as exc:
        err.print(f"error: {exc}", markup=False, highlight=False)
        return 2

    if not report.problems and not report.invalid:
        err.print(f"error: no problem folders (with a definition.json) under {', '.join(map(str, args.paths))}",
                  markup=False, highlight=False)
        return 1
    for problem in report.problems:
        for warning in problem.warnings:
            err.print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)
    for invalid in report.invalid:
        for error in invalid.errors:
            err.print(f"error: {error}", markup=False, highlight=False, soft_wrap=True)

    out.print(_subset_table(report))
    for line in _unavailable_lines(report):
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    workloads = [w for p in report.problems for w in p.workloads]
    runnable = sum(w.runnable for w in workloads)
    exit_code = 1 if report.invalid else 0

    if args.run_reference and report.problems:
        results = _run_references(args, [p.path for p in report.problems], err)
        out.print(_reference_table(results, args.device))
        for result in sorted(results, key=lambda r: r.problem):
            if not result.passed:
                out.print(f"  {_short_path(result.problem)}: {result.outcome}: {result.detail}",
                          markup=False, highlight=False, soft_wrap=True)
        passed = sum(r.passed for r in results)
        out.print(f"references on {args.device}: {passed} of {len(results)} ran and matched the definition",
                  highlight=False)
        definition_faults = [r for r in results if not r.passed and r.outcome not in DEVICE_LIMITED
                             and r.outcome != Outcome.NO_WORKLOAD]
        if definition_faults and any(r.outcome == Outcome.OUTPUT_MISMATCH for r in definition_faults):
            exit_code = 1
        if args.strict and passed < len(results):
            exit_code = 1

    if report.invalid:
        out.print(f"{len(report.invalid)} problem(s) invalid (see errors above)", highlight=False)
    out.print(f"{len(report.problems)} problems loaded, {runnable} workloads runnable, "
              f"{len(workloads) - runnable} unavailable", highlight=False)
    return exit_code


def _subset_table(report) -> Table:
    table = Table(title="Problems", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("subset", no_wrap=True)
    for column in ("problems", "workloads", "runnable", "unavailable"):
        table.add_column(column, justify="right", no_wrap=True, min_width=len(column))

    by_subset = defaultdict(list)
    for problem in report.problems:
        by_subset[problem.subset].append(problem)
    for subset in sorted(by_subset):
        problems = by_subset[subset]
        workloads = [w for p in problems for w in p.workloads]
        table.add_row(subset, str(len(problems)), str(len(workloads)), str(sum(w.runnable for w in workloads)),
                      str(sum(not w.runnable for w in workloads)))
    if len(by_subset) > 1:
        every = [w for p in report.problems for w in p.workloads]
        table.add_row("all", str(len(report.problems)), str(len(every)), str(sum(w.runnable for w in every)),
                      str(sum(not w.runnable for w in every)), end_section=True)
    invalid_by_subset = Counter(i.path.parent.name for i in report.invalid)
    for subset, count in sorted(invalid_by_subset.items()):
        table.add_row(f"{subset} (invalid)", str(count), "-", "-", "-")
    return table


def _unavailable_lines(report) -> list[str]:
    """Per subset and reason: how many workloads are unavailable, with one example."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for problem in report.problems:
        for workload in problem.workloads:
            if workload.unavailable:
                category = workload.unavailable.split(":")[0]
                groups[(problem.subset, category)].append(f"{problem.name} workload {workload.index}: "
                                                          f"{workload.unavailable}")
    lines = []
    for (subset, category), examples in sorted(groups.items()):
        lines.append(f"unavailable in {subset}: {len(examples)} workloads, {category} (e.g. {examples[0]})")
    if any(category.startswith("safetensors") for _, category in groups):
        lines.append("  (point --blob-root at the folder the workload paths are relative to)")
    return lines


def _run_references(args, folders: list[Path], err: Console) -> list[ReferenceResult]:
    jobs = args.jobs or (os.cpu_count() or 1 if args.device == "cpu" else 1)
    memory_limit = None
    if args.device == "cpu":
        gigabytes = args.memory_limit_gb or _ram_gb() / jobs
        memory_limit = int(gigabytes * (1 << 30))
    with Progress(TextColumn("references on " + args.device), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.description}"), console=err, transient=True,
                  disable=not err.is_terminal) as progress:
        task = progress.add_task("", total=len(folders))

        def advance(result: ReferenceResult) -> None:
            progress.update(task, advance=1, description=f"{_short_path(result.problem)}: {result.outcome}")

        return check_many(folders, args.device, timeout_s=args.timeout, jobs=jobs, memory_limit_bytes=memory_limit,
                          blob_roots=args.blob_root, on_result=advance)


def _reference_table(results: list[ReferenceResult], device: str) -> Table:
    table = Table(title=f"References on {device} (smallest runnable workload)", title_justify="left",
                  box=box.SIMPLE_HEAD)
    table.add_column("outcome")
    table.add_column("problems", justify="right")
    table.add_column("examples")
    groups = defaultdict(list)
    for result in results:
        groups[result.outcome].append(result)
    for outcome, group in sorted(groups.items(), key=lambda kv: (kv[0] != Outcome.PASSED, -len(kv[1]))):
        examples = "" if outcome == Outcome.PASSED else ", ".join(_short_path(r.problem) for r in group[:3])
        table.add_row(outcome, str(len(group)), examples + (" ..." if len(group) > 3 and examples else ""))
    return table


def _short_path(path: str) -> str:
    parts = Path(path).parts
    return "/".join(parts[-2:])


def _ram_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    except (ValueError, OSError):
        return 8.0

