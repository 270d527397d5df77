"""``kernelfleet eval PROBLEM_DIR --solution SOLUTION.json``: build a solution, evaluate it on a problem's workloads
in isolated worker processes, and report per workload its status, time, spread, baseline T_b, speedup, speed of
light T_sol and SOL score (a rich table, or SOL-ExecBench JSON traces with ``--json``; ``-o FILE`` writes the traces
to a file as upstream's CLI does).

Order of work: validate the inputs (exit 2 on a bad file or argument), build (a compile error is reported without
starting any worker), start the pool, get T_b per workload from the judge (measured once per GPU model, cached on
disk), compute T_sol from ``core.roofline`` so that a time under it is rejected, evaluate every requested workload (10
correctness rounds, as upstream), print. Exit 0 only when every evaluated workload PASSED.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from core.errors import SpecError
from core.problem import ProblemInvalid, load_problem
from core.problem.load import WORKLOAD_FILE
from core.evaluate.baseline.machine import state_moved
from core.evaluate.trace import NOT_RUN, WorkloadResult, overall, workload_results
from core.evaluate.trace import traces as trace_records
from core.problem.schema import Problem
from core.roofline.problem_sol import SolModel

UPSTREAM_ROUNDS = 10  # SOL-ExecBench's eval driver checks correctness on 10 rounds of fresh inputs


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "eval",
        help="evaluate a solution on a problem's workloads",
        description="Build SOLUTION.json, check it against the reference of PROBLEM_DIR on fresh inputs, time it, "
                    "and compare it with the baseline T_b (faster of eager and torch.compile of the reference) and "
                    "the speed of light T_sol. Exit status: 0 when every evaluated workload passed, 1 otherwise, "
                    "2 for bad input.",
    )
    parser.add_argument("problem_dir", metavar="PROBLEM_DIR", type=Path, help="a folder with definition.json and "
                        "workload.jsonl")
    parser.add_argument("--solution", required=True, type=Path, metavar="SOLUTION.json", help="the solution to run")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None,
                        help="where to run (default: cuda when a GPU is visible, else cpu)")
    parser.add_argument("--workloads", default=None, metavar="I,J",
                        help="workload indices in workload.jsonl order, from 0; ranges such as 2-4 too (default: all)")
    parser.add_argument("--json", action="store_true",
                        help="print one SOL-ExecBench trace per workload (JSON lines) instead of a table")
    parser.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                        help="also write the traces to FILE, one JSON line per requested workload (as sol-execbench "
                             "-o does)")
    parser.add_argument("--rounds", type=int, default=UPSTREAM_ROUNDS, metavar="N",
                        help=f"correctness rounds of fresh inputs per workload (default {UPSTREAM_ROUNDS}, as "
                             "SOL-ExecBench)")
    parser.add_argument("--no-baseline", action="store_true", help="skip T_b (and with it speedup and SOL score)")
    parser.add_argument("--compile-timeout", type=float, default=120.0, metavar="S",
                        help="longest torch.compile of the reference for T_b before eager is used instead "
                             "(default 120; 0 skips torch.compile)")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="S",
                        help="seconds per workload before the worker is killed (default 120)")
    parser.add_argument("--blob-root", action="append", default=[], type=Path, metavar="DIR",
                        help="where safetensors paths of workloads are resolved (repeatable)")
    parser.add_argument("--kernel-spans", action="store_true",
                        help="time each call by its kernels' span on the GPU (CUPTI, as SOL-ExecBench does; needs "
                             "cupti-python) instead of CUDA events")
    # Tests: a short timing policy (fewer, shorter timed runs) for candidate and baseline alike.
    parser.add_argument("--quick-timing", action="store_true", help=argparse.SUPPRESS)
    parser.set_defaults(handler=run_eval)


class InputFault(Exception):
    """A bad file or argument: printed as one ``error:`` line, exit status 2."""


# ---------------------------------------------------------------- inputs


def parse_workloads(text: str | None, problem: Problem) -> list[int]:
    """``"0,2-4"`` -> [0, 2, 3, 4]; every index must exist in workload.jsonl."""
    count = len(problem.workloads)
    where = f"{problem.path / WORKLOAD_FILE}: --workloads"
    if text is None:
        return list(range(count))
    indices: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part.lstrip("-"):
                low, high = (int(x) for x in part.split("-", 1))
                chosen = list(range(low, high + 1))
                if not chosen:
                    raise InputFault(f"{where}: empty range {part!r}")
            else:
                chosen = [int(part)]
        except ValueError:
            raise InputFault(f"{where}: {part!r} is not an index (expected e.g. 0,1 or 2-4)") from None
        for index in chosen:
            if not 0 <= index < count:
                raise InputFault(f"{where}: index {index} is out of range: the file has {count} workload"
                                 f"{'s' if count != 1 else ''} (0-{count - 1})")
            if index not in indices:
                indices.append(index)
    if not indices:
        raise InputFault(f"{where}: no workload chosen")
    return indices


def _load_inputs(args: argparse.Namespace):
    from core.solution.io import load_solution
    from core.solution.support import check_supported

    if not args.problem_dir.exists():
        raise InputFault(f"{args.problem_dir}: no such directory")
    try:
        problem = load_problem(args.problem_dir, args.blob_root)
    except ProblemInvalid as exc:
        first = str(exc.errors[0]) if exc.errors else f"{args.problem_dir}: invalid problem"
        more = len(exc.errors) - 1
        raise InputFault(first + (f" (and {more} more; see kernelfleet problems check)" if more > 0 else "")) \
            from None
    try:
        solution = load_solution(args.solution)
        check_supported(solution, args.solution)
    except SpecError as exc:
        raise InputFault(str(exc)) from None
    if args.rounds < 1:
        raise InputFault(f"--rounds: must be at least 1, got {args.rounds}")
    if args.output is not None:
        check_output_path(args.output)
    indices = parse_workloads(args.workloads, problem)
    return problem, solution, indices


def check_output_path(path: Path) -> None:
    """Refuse an ``-o`` path that cannot become a file before any work is done."""
    if path.is_dir():
        raise InputFault(f"-o {path}: is a directory")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputFault(f"-o {path}: {parent} is not a directory")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise InputFault(f"-o {path}: {parent} is not writable")
            return


def _pick_device(requested: str | None) -> str:
    # As `kernelfleet run` finds its GPUs (NVML or nvidia-smi): importing torch here would delay the workers' start.
    from core.fleet.gpus import detect_gpus

    available = bool(detect_gpus())
    if requested is None:
        return "cuda" if available else "cpu"
    if requested == "cuda" and not available:
        raise InputFault("--device cuda: no CUDA GPU is visible here (use --device cpu for pytorch solutions)")
    return requested


def _fits_device(solution, device: str) -> bool:
    """Whether ``_check_device_fits`` would pass (False too for a solution kernelfleet cannot run at all)."""
    from core.solution.support import run_kind

    try:
        _check_device_fits(solution, Path(), run_kind(solution), device)
    except (InputFault, SpecError):
        return False
    return True


def _check_device_fits(solution, solution_path: Path, kind, device: str) -> None:
    """On the CPU only pytorch solutions can run; say so before starting any worker."""
    from core.solution.schema import Language
    from core.solution.support import RunKind

    if device != "cpu":
        return
    if kind is not RunKind.PYTHON:
        raise InputFault(f"{solution_path}: spec.languages: a {solution.spec.languages[0].value} solution needs "
                         "--device cuda (it built; --device cpu runs pytorch solutions only)")
    for i, language in enumerate(solution.spec.languages):
        if language is not Language.PYTORCH:
            raise InputFault(f"{solution_path}: spec.languages[{i}]: '{language.value}' needs --device cuda "
                             "(--device cpu runs pytorch solutions only)")


# ---------------------------------------------------------------- the run


@dataclass
class Outcome:
    problem: Problem
    solution: Any
    indices: list[int]
    device: str
    verdict: Any  # core.evaluate.Verdict
    baselines: dict[int, Any] = field(default_factory=dict)  # index -> WorkloadBaseline
    baseline_note: str = ""
    sol: SolModel = field(default_factory=SolModel)
    device_name: str = ""
    build_errors: str = ""
    stages_s: dict[str, float] = field(default_factory=dict)  # each stage's own wall seconds (see stages_line)


def run_eval(args: argparse.Namespace) -> int:
    import anyio

    from core.secrets import take_secrets

    take_secrets()  # before any child process starts: none inherits a secret
    err = Console(stderr=True, highlight=False)
    try:
        problem, solution, indices = _load_inputs(args)
        device = _pick_device(args.device)
    except InputFault as fault:
        err.print(f"error: {fault}", markup=False, soft_wrap=True)
        return 2
    for warning in problem.warnings:
        err.print(f"warning: {warning}", markup=False, soft_wrap=True)
    if solution.definition != problem.name:
        err.print(f"warning: {args.solution}: definition: '{solution.definition}' is not this problem "
                  f"('{problem.name}')", markup=False, soft_wrap=True)
    try:
        outcome = anyio.run(_evaluate, args, problem, solution, indices, device, err)
    except InputFault as fault:
        err.print(f"error: {fault}", markup=False, soft_wrap=True)
        return 2
    records = traces(outcome) if args.json or args.output is not None else []
    if args.output is not None:
        try:
            write_traces(args.output, records)
        except OSError as exc:
            err.print(f"error: -o {args.output}: {exc.strerror or exc}", markup=False, soft_wrap=True)
            return 2
        err.print(f"wrote {len(records)} traces to {args.output}", markup=False, soft_wrap=True)
    if args.json:
        for trace in records:
            print(json.dumps(trace, allow_nan=False))
    else:
        _print_report(outcome)
    return 0 if outcome.verdict.status.value == "PASSED" else 1


def write_traces(path: Path, records: list[dict[str, Any]]) -> None:
    """The traces as upstream's CLI writes ``-o``: one JSON object per line, the file replaced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as out:
        for trace in records:
            out.write(json.dumps(trace, allow_nan=False) + "\n")


async def _evaluate(args, problem: Problem, solution, indices: list[int], device: str, err: Console) -> Outcome:
    import anyio

    from core.build import BuildService
    from core.evaluate import TimingPolicy
    from core.evaluate.evaluate import compile_error_verdict
    from core.evaluate.timing_policy import QUICK_TIMING
    from core.evaluate.local import LocalEvaluator
    from core.fleet.attempt import AttemptLife, EvaluationPolicy
    from core.solution.prepare import prepare

    policy = replace(QUICK_TIMING if args.quick_timing else TimingPolicy(), kernel_spans=args.kernel_spans)
    blob_roots = tuple(str(p) for p in args.blob_root)
    builds = BuildService()
    stages: dict[str, float] = {}  # each stage's own wall seconds; T_sol and, on a GPU, T_b run beside the others
    began = time.monotonic()
    async with AsyncExitStack() as stack:
        def start_pool() -> LocalEvaluator:
            return LocalEvaluator(device, builds=builds, spare=False, workload_timeout_s=args.timeout,
                                  readable=[problem.path, *blob_roots])

        # The pool's judge and candidate processes start (and import torch) while the solution builds, unless it
        # cannot run on this device: then it is only built, so that its compile errors are still reported.
        evaluator = await stack.enter_async_context(start_pool()) if _fits_device(solution, device) else None
        outcome = Outcome(problem, solution, indices, device, verdict=None, stages_s=stages)
        if args.no_baseline:
            outcome.baseline_note = "T_b not measured (--no-baseline)"
        sol_known = anyio.Event()

        async def speed_of_light() -> None:
            started = time.monotonic()
            try:
                outcome.sol = await evaluator.speed_of_light(problem, indices)
            finally:
                stages["T_sol"] = time.monotonic() - started
                sol_known.set()

        baseline_known = anyio.Event()

        async def baseline() -> None:
            started = time.monotonic()
            try:
                for result in await evaluator.baseline(problem, indices, timing=policy,
                                                       compile_timeout_s=args.compile_timeout, blob_roots=blob_roots):
                    outcome.baselines[result.index] = result
            finally:
                stages["T_b"] = time.monotonic() - started
                baseline_known.set()

        # On a GPU, T_b (torch.compile on the CPU, its timing holding the GPU as a candidate does) goes beside the
        # build and the evaluation; on the CPU it would share the cores the candidate is timed on, so it goes first.
        baseline_beside = not args.no_baseline and device.startswith("cuda")
        failed: Exception | None = None
        async with anyio.create_task_group() as beside:
            if evaluator is not None:
                beside.start_soon(speed_of_light)
                if baseline_beside:
                    beside.start_soon(baseline)
            started = time.monotonic()
            with err.status("building", spinner="dots"):
                try:
                    prepared = await prepare(solution, builds)
                except SpecError as exc:
                    failed = InputFault(str(exc))
            stages["build"] = time.monotonic() - started
            if failed is None and prepared.ok:
                try:
                    _check_device_fits(solution, args.solution, prepared.kind, device)
                except InputFault as fault:
                    failed = fault
            if failed is not None or not prepared.ok:
                beside.cancel_scope.cancel()
            else:
                if evaluator is None:
                    evaluator = await stack.enter_async_context(start_pool())
                    beside.start_soon(speed_of_light)
                started = time.monotonic()
                await evaluator.pool.wait_ready()
                stages["workers ready"] = time.monotonic() - started
                if not args.no_baseline and not baseline_beside:
                    with err.status("measuring the baseline T_b (eager and torch.compile of the reference; cached "
                                    "after the first run)", spinner="dots"):
                        await baseline()
                with err.status("computing the speed of light T_sol", spinner="dots"):
                    await sol_known.wait()
                outcome.device_name = _device_label(device, evaluator.device_model if device == "cuda" else "")
                started = time.monotonic()
                with err.status(f"evaluating on {device}", spinner="dots"):
                    life = AttemptLife(None, evaluator, EvaluationPolicy(args.rounds, policy, blob_roots))
                    outcome.verdict = await evaluate_every_workload(life, problem, solution, indices, prepared)
                stages["evaluation"] = time.monotonic() - started
                if baseline_beside:
                    with err.status("measuring the baseline T_b (eager and torch.compile of the reference; cached "
                                    "after the first run)", spinner="dots"):
                        await baseline_known.wait()
        closing = time.monotonic()
    stages["closing the workers"] = time.monotonic() - closing
    stages["total"] = time.monotonic() - began
    if failed is not None:
        raise failed
    if not prepared.ok:
        verdict = compile_error_verdict(prepared, indices)
        return Outcome(problem, solution, indices, device, verdict, build_errors=verdict.reason,
                       device_name=_device_label(device, ""), stages_s=stages)
    return outcome


async def evaluate_every_workload(life, problem: Problem, solution, indices: list[int], prepared):
    """A verdict on every requested workload (``core.evaluate.every_workload``), through the run's own path."""
    from core.evaluate.every_workload import evaluate_every_workload as every_workload

    async def evaluate(workloads: tuple[int, ...]):
        return (await life.evaluate(problem, solution, workloads, prepared=prepared)).verdict

    return await every_workload(evaluate, indices)


def _device_label(device: str, gpu_name: str) -> str:
    return gpu_name or ("cpu" if device == "cpu" else "cuda")


# ---------------------------------------------------------------- results per workload


def rows(outcome: Outcome) -> list[WorkloadResult]:
    return workload_results(outcome.verdict, outcome.indices, outcome.baselines, outcome.sol)


def summary_line(outcome: Outcome, table_rows: list[WorkloadResult]) -> str:
    """The verdict and the solution's figures: the geomean speedup and the SOL score of the geomeans, the same
    formula as the run store and ``kernelfleet report`` (``core.roofline.sol.overall_figures``)."""
    verdict = outcome.verdict
    figures = overall(table_rows)
    counted = f"{figures.passed}/{figures.evaluated} workloads"
    if verdict.status.value != "PASSED":
        first = (verdict.reason or "").splitlines()[0] if verdict.reason else ""
        return f"{verdict.status.value} ({counted} passed): {first}".rstrip(": ")
    parts = [f"PASSED {counted}"]
    if figures.speedup is not None:
        parts.append(f"geomean speedup {figures.speedup:.2f}x"
                     + (f" over {figures.with_t_b} with T_b" if figures.with_t_b != figures.passed else ""))
    else:
        parts.append("speedup n/a (no T_b)")
    if figures.sol is not None:
        parts.append(f"SOL {figures.sol:.2f}")
    else:
        parts.append("SOL n/a (no T_sol)" if not outcome.sol.t_sol_ms else "SOL n/a")
    return ", ".join(parts)


# ---------------------------------------------------------------- table


def format_ms(ms: float | None) -> str:
    if ms is None or not math.isfinite(ms):
        return "—"
    if ms < 1.0:
        return f"{ms * 1e3:.1f} µs" if ms >= 0.01 else f"{ms * 1e3:.2f} µs"
    if ms < 1000:
        return f"{ms:.3f} ms"
    return f"{ms / 1e3:.2f} s"


def short_axes(axes, limit: int = 28) -> str:
    text = " ".join(f"{k}={v}" for k, v in axes.items()) or "—"
    return text if len(text) <= limit else text[: limit - 1] + "…"


_STATUS_STYLE = {"PASSED": "green", "UNAVAILABLE": "dim", NOT_RUN: "dim"}


def _print_report(outcome: Outcome, out: Console | None = None) -> None:
    if out is None:
        width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
        out = Console(highlight=False, width=width)
    table_rows = rows(outcome)
    title = f"{outcome.problem.name} · {outcome.solution.name} · {outcome.device_name}"
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for name, justify in [("#", "right"), ("axes", "left"), ("status", "left"), ("time", "right"),
                          ("spread", "right"), ("T_b", "right"), ("speedup", "right"), ("T_sol", "right"),
                          ("SOL", "right")]:
        table.add_column(name, justify=justify, no_wrap=name != "axes")
    for row in table_rows:
        workload = outcome.problem.workloads[row.index]
        style = _STATUS_STYLE.get(row.status, "red")
        t_b = format_ms(row.t_b_ms)
        if row.baseline is not None and row.baseline.ok:
            t_b += " c" if row.baseline.method == "torch.compile" else " e"
        # A failing workload's time is shown dimmed: it says how long the wrong answer took, nothing more.
        measured = "" if row.status == "PASSED" else "dim"
        table.add_row(
            str(row.index), Text(short_axes(workload.axes)), Text(row.status, style=style),
            Text(format_ms(row.time_ms), style=measured),
            Text(f"{row.spread * 100:.1f}%" if row.spread is not None else "—", style=measured),
            t_b, f"{row.speedup:.2f}x" if row.speedup else "—", format_ms(row.t_sol_ms),
            f"{row.sol:.2f}" if row.sol is not None else "—",
        )
    out.print(table)
    for line in _notes(outcome, table_rows):
        out.print(line, markup=False, soft_wrap=True)
    out.print(summary_line(outcome, table_rows), markup=False, soft_wrap=True)


def _notes(outcome: Outcome, table_rows: list[WorkloadResult]) -> list[str]:
    lines = []
    if outcome.build_errors:
        lines.append("build errors:")
        lines.extend(f"  {line}" for line in outcome.build_errors.splitlines())
    for row in table_rows:
        if row.status not in ("PASSED", "COMPILE_ERROR") and row.reason:
            lines.append(f"  {row.index}: {row.status}: {row.reason}")
    baselines = [r.baseline for r in table_rows if r.baseline is not None]
    if baselines:
        cached = sum(b.cached for b in baselines)
        source = "cached" if cached == len(baselines) else "measured now" if not cached else \
            f"{cached} cached, {len(baselines) - cached} measured now"
        lines.append(f"T_b: faster of eager (e) and torch.compile (c) of the reference, {source}")
        for b in baselines:
            if b.error:
                lines.append(f"  {b.index}: T_b unavailable: {b.error}")
            elif b.unreliable:
                lines.append(f"  {b.index}: T_b not trusted (no speedup counted): {b.unreliable}")
            elif state_moved(b):
                lines.append(f"  {b.index}: T_b taken in another machine state than this start's, twice (its "
                             f"speedup is not comparable; not cached): {state_moved(b)}")
            elif b.remeasured:
                lines.append(f"  {b.index}: T_b measured again, not the cached one: {b.remeasured}")
            elif b.compile_reason and b.compile_attempted:
                lines.append(f"  {b.index}: eager only: {b.compile_reason}")
    elif outcome.baseline_note:
        lines.append(outcome.baseline_note)
    sol_notes = {outcome.sol.note(r.index) for r in table_rows if r.t_sol_ms is None and outcome.sol.note(r.index)}
    lines.extend(sorted(sol_notes))
    reduced = {r.index: outcome.sol.reduced[r.index] for r in table_rows if r.index in outcome.sol.reduced}
    if reduced:
        lines.append("T_sol charges only the input elements that can reach an output (fraction of each input): "
                     + "; ".join(f"{i}: {text}" for i, text in sorted(reduced.items())))
    lines.extend(sorted({f"  {r.index}: SOL score: {r.sol_note}" for r in table_rows if r.sol_note}))
    methods = sorted({r.timing_method for r in table_rows if r.timing_method})
    if methods:
        lines.append(f"timing: {'; '.join(methods)}")
    if outcome.stages_s:
        lines.append(stages_line(outcome))
    return lines


STAGE_ORDER = ("build", "workers ready", "T_sol", "T_b", "evaluation", "closing the workers")


def stages_line(outcome: Outcome) -> str:
    """Where the command's time went: each stage's own wall seconds (on a GPU, T_sol and T_b run beside the build
    and the evaluation), the evaluation's by phase (summed over the workloads, as the pool measured them), and the
    total from the start of the evaluation to the workers closed."""
    phases: dict[str, float] = {}
    for workload in (outcome.verdict.workloads if outcome.verdict is not None else ()):
        for name, seconds in (workload.phase_s or {}).items():
            if name in ("reference", "run.rounds", "run.save", "run.timing", "check.load"):
                phases[name] = phases.get(name, 0.0) + seconds
    stages = [f"{name} {outcome.stages_s[name]:.1f} s" for name in STAGE_ORDER
              if outcome.stages_s.get(name, 0.0) >= 0.05]
    detail = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in phases.items())
    line = "time: " + " · ".join(stages) + (f" (evaluation: {detail})" if detail else "")
    if "total" in outcome.stages_s:
        line += f"; {outcome.stages_s['total']:.1f} s in all"
    return line


# ---------------------------------------------------------------- JSON traces


def traces(outcome: Outcome) -> list[dict[str, Any]]:
    """One SOL-ExecBench trace per requested workload (``core.evaluate.trace.Trace``), as JSON-ready dicts."""
    import torch

    timestamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return [t.to_dict() for t in trace_records(outcome.problem, outcome.solution.name, rows(outcome),
                                               device=outcome.device, device_name=outcome.device_name,
                                               protections=outcome.verdict.protections, sol=outcome.sol,
                                               libs={"torch": torch.__version__}, timestamp=timestamp)]
