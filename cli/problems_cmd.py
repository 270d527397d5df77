"""``kernelfleet problems check``: load problem folders, report what can run, optionally run the references.
``kernelfleet problems import``: write problem folders from KernelBench problem files."""

from __future__ import annotations

import argparse
import os
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from core.problem import load_problems
from core.problem.kernelbench_definition import DEFAULT_TOLERANCE
from core.problem.load import FileFault, ProblemPathError
from core.problem.reference_check import DEVICE_LIMITED, Outcome, ReferenceResult, check_many


def register(commands: argparse._SubParsersAction) -> None:
    problems = commands.add_parser("problems", help="inspect problem folders")
    sub = problems.add_subparsers(dest="problems_command", metavar="ACTION")
    sub.required = True
    check = sub.add_parser(
        "check",
        help="load every problem under the paths and report what is runnable",
        description="Load every definition.json + workload.jsonl under PATH... and report per subset how many "
                    "workloads are runnable. Exits 1 if any definition or workload is invalid, 2 if a PATH is not a "
                    "problem folder (nor a folder of them) or a problem's file cannot be read.",
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

    kernelbench = sub.add_parser(
        "import",
        help="write problem folders from KernelBench problem files (class Model, get_inputs, get_init_inputs)",
        description="Import KernelBench problem files: one problem folder (definition.json + workload.jsonl) per "
                    ".py file, in OUT/<the file's folder>/<its name>. Each file runs only in a subprocess, on the "
                    "CPU, under --timeout and a memory limit, to learn its inputs and outputs. Exits 2 when nothing "
                    "was imported, 1 when some files failed.",
    )
    kernelbench.add_argument("sources", nargs="+", metavar="FILE_OR_DIR",
                             help="KernelBench .py files, or folders whose .py files (recursively) are imported")
    kernelbench.add_argument("--out", required=True, type=Path, metavar="DIR", help="where the problem folders go")
    kernelbench.add_argument("--force", action="store_true", help="replace problem folders that exist")
    kernelbench.add_argument("--timeout", type=float, default=120.0, metavar="S",
                             help="seconds per file (default 120)")
    kernelbench.add_argument("--jobs", type=int, default=None, metavar="N",
                             help="files probed at once (default: CPU cores, at most 4)")
    kernelbench.add_argument("--memory-limit-gb", type=float, default=None, metavar="GB",
                             help="address-space limit per file (default: RAM / jobs)")
    kernelbench.add_argument("--atol", type=float, default=DEFAULT_TOLERANCE,
                             help=f"the workload's max_atol (default {DEFAULT_TOLERANCE:g}, KernelBench's)")
    kernelbench.add_argument("--rtol", type=float, default=DEFAULT_TOLERANCE,
                             help=f"the workload's max_rtol (default {DEFAULT_TOLERANCE:g}, KernelBench's)")
    kernelbench.set_defaults(handler=run_import)


def run_check(args: argparse.Namespace) -> int:
    out, err = Console(), Console(stderr=True)
    try:
        report = load_problems(args.paths, args.blob_root)
    except ProblemPathError as exc:
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2

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
    exit_code = 2 if _unreadable(report) else 1 if report.invalid else 0

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
            exit_code = max(exit_code, 1)
        if args.strict and passed < len(results):
            exit_code = max(exit_code, 1)

    if report.invalid:
        out.print(f"{len(report.invalid)} problem(s) invalid (see errors above)", highlight=False)
    out.print(f"{len(report.problems)} problems loaded, {runnable} workloads runnable, "
              f"{len(workloads) - runnable} unavailable", highlight=False)
    return exit_code


def _unreadable(report) -> bool:
    """Whether some file of a problem could not be read or was refused (exit 2), not only malformed (exit 1)."""
    return any(isinstance(error, FileFault) for invalid in report.invalid for error in invalid.errors)


def run_import(args: argparse.Namespace) -> int:
    from core.problem.kernelbench import ImportFailed, ProbeLimits, find_kernelbench_files, import_file, target_for

    out, err = Console(), Console(stderr=True)

    def error(text: str) -> None:
        err.print(f"error: {text}", markup=False, highlight=False, soft_wrap=True)

    for flag, value in (("--atol", args.atol), ("--rtol", args.rtol)):
        if not value >= 0:
            error(f"{flag}: expected a non-negative number, got {value:g}")
            return 2
    if not args.timeout > 0:
        error(f"--timeout: expected a positive number of seconds, got {args.timeout:g}")
        return 2
    if args.jobs is not None and args.jobs < 1:
        error(f"--jobs: expected at least 1, got {args.jobs}")
        return 2
    if args.memory_limit_gb is not None and not args.memory_limit_gb > 0:
        error(f"--memory-limit-gb: expected a positive number, got {args.memory_limit_gb:g}")
        return 2
    if args.out.exists() and not args.out.is_dir():
        error(f"{args.out}: --out is a file, not a folder")
        return 2

    sources, failures = [], 0
    for raw in args.sources:
        try:
            found = find_kernelbench_files(Path(raw))
        except (FileNotFoundError, ImportFailed) as exc:
            error(str(exc))
            failures += 1
            continue
        if not found:
            error(f"{raw}: no .py files in this folder")
            failures += 1
        sources.extend(found)

    targets, claimed = [], {}
    for source in dict.fromkeys(sources):
        target = target_for(source)
        key = (target.subset, target.name)
        if key in claimed:
            error(f"{source}: imports as {target.subset}/{target.name}, as {claimed[key]} does")
            failures += 1
            continue
        claimed[key] = source
        targets.append(target)

    jobs = args.jobs or max(1, min(4, os.cpu_count() or 1))
    gigabytes = args.memory_limit_gb or _ram_gb() / jobs
    limits = ProbeLimits(timeout_s=args.timeout, memory_limit_bytes=int(gigabytes * (1 << 30)),
                         real_budget_bytes=min(1 << 30, int(gigabytes * (1 << 30)) // 4))

    def one(target):
        try:
            return target, import_file(target, args.out, limits=limits, atol=args.atol, rtol=args.rtol,
                                       force=args.force), None
        except ImportFailed as exc:
            return target, None, str(exc)

    imported = 0
    with Progress(TextColumn("importing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=err, transient=True,
                  disable=not err.is_terminal) as progress:
        task = progress.add_task("", total=len(targets))
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for target, result, problem in pool.map(one, targets):
                progress.update(task, advance=1, description=f"{target.subset}/{target.name}")
                if problem is not None:
                    error(f"{target.source}: {problem}")
                    failures += 1
                    continue
                imported += 1
                how = "forward run on the CPU" if result.ran_on == "cpu" else "shapes from the meta device only"
                out.print(f"imported {target.source} -> {result.folder} ({how})", markup=False, highlight=False,
                          soft_wrap=True)
                for note in result.notes:
                    out.print(f"  note: {note}", markup=False, highlight=False, soft_wrap=True)

    summary = f"imported {imported} KernelBench problem(s) into {args.out}"
    out.print(summary + (f", {failures} failed (see errors above)" if failures else ""), highlight=False,
              soft_wrap=True)
    if imported == 0:
        return 2
    return 1 if failures else 0


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

