"""``kernelfleet eval PROBLEM_DIR --solution SOLUTION.json``: build a solution, evaluate it on a problem's workloads
in isolated worker processes, and report per workload its status, time, spread, baseline T_b, speedup, speed of
light T_sol and SOL score (a rich table, or SOL-ExecBench-shaped JSON traces with ``--json``).

Order of work: validate the inputs (exit 2 on a bad file or argument), build (a compile error is reported without
starting any worker), start the pool, get T_b per workload from the judge (measured once per GPU model, cached on
disk), compute T_sol from ``core.roofline`` so that a time under it is rejected, evaluate, print. Exit 0 only when
every evaluated workload PASSED.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from core.errors import SpecError
from core.problem import ProblemInvalid, load_problem
from core.problem.load import WORKLOAD_FILE
from core.problem.schema import Problem
from core.roofline.problem_sol import SolModel, gpu_name_from_smi, speed_of_light

QUICK_TIMING = dict(warmup_calls=1, min_calls=5, max_calls=40, target_seconds=0.01, device_check_calls=3)
NOT_RUN = "NOT_RUN"


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
                        help="print one SOL-ExecBench-shaped trace per workload (JSON lines) instead of a table")
    parser.add_argument("--rounds", type=int, default=5, metavar="N",
                        help="correctness rounds of fresh inputs per workload (default 5)")
    parser.add_argument("--no-baseline", action="store_true", help="skip T_b (and with it speedup and SOL score)")
    parser.add_argument("--compile-timeout", type=float, default=120.0, metavar="S",
                        help="longest torch.compile of the reference for T_b before eager is used instead "
                             "(default 120; 0 skips torch.compile)")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="S",
                        help="seconds per workload before the worker is killed (default 120)")
    parser.add_argument("--blob-root", action="append", default=[], type=Path, metavar="DIR",
                        help="where safetensors paths of workloads are resolved (repeatable)")
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

    if not args.problem_dir.is_dir():
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
    indices = parse_workloads(args.workloads, problem)
    return problem, solution, indices


def _pick_device(requested: str | None) -> str:
    import torch

    available = torch.cuda.is_available()
    if requested is None:
        return "cuda" if available else "cpu"
    if requested == "cuda" and not available:
        raise InputFault("--device cuda: no CUDA GPU is visible here (use --device cpu for pytorch solutions)")
    return requested


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


def sol_score(t_ms: float | None, tb_ms: float | None, ts_ms: float | None) -> tuple[float | None, str]:
    if t_ms is None or tb_ms is None or ts_ms is None:
        return None, ""
    try:
        from core.roofline import SolScoreError
        from core.roofline import sol_score as score
    except ImportError:
        return None, "core.roofline unavailable"
    try:
        return score(t_ms, tb_ms, ts_ms), ""
    except SolScoreError as exc:
        return None, f"{type(exc).__name__}: {exc}"


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
    if args.json:
        for trace in traces(outcome):
            print(json.dumps(trace, allow_nan=False))
    else:
        _print_report(outcome)
    return 0 if outcome.verdict.status.value == "PASSED" else 1


async def _evaluate(args, problem: Problem, solution, indices: list[int], device: str, err: Console) -> Outcome:
    from core.build import BuildService
    from core.evaluate import EvaluationPool, TimingPolicy
    from core.evaluate.evaluate import compile_error_verdict, evaluate_prepared
    from core.solution.prepare import prepare

    policy = TimingPolicy(**QUICK_TIMING) if args.quick_timing else TimingPolicy()
    service = BuildService()
    with err.status("building", spinner="dots"):
        try:
            prepared = await prepare(solution, service)
        except SpecError as exc:
            raise InputFault(str(exc)) from None
    if not prepared.ok:
        verdict = compile_error_verdict(prepared, indices)
        return Outcome(problem, solution, indices, device, verdict, build_errors=verdict.reason,
                       device_name=_device_label(device, ""))
    _check_device_fits(solution, args.solution, prepared.kind, device)

    outcome = Outcome(problem, solution, indices, device, verdict=None)
    blob_roots = tuple(str(p) for p in args.blob_root)
    async with EvaluationPool(device, spare=False, workload_timeout_s=args.timeout,
                              readable=[problem.path, *blob_roots]) as pool:
        if args.no_baseline:
            outcome.baseline_note = "T_b not measured (--no-baseline)"
        else:
            with err.status("measuring the baseline T_b (eager and torch.compile of the reference; cached after "
                            "the first run)", spinner="dots"):
                for result in await pool.baseline(problem, indices, timing=policy,
                                                  compile_timeout_s=args.compile_timeout, blob_roots=blob_roots):
                    outcome.baselines[result.index] = result
        names = [b.device_name for b in outcome.baselines.values() if b.device_name]
        gpu_name = names[0] if names else (gpu_name_from_smi() if device == "cuda" else "")
        outcome.device_name = _device_label(device, gpu_name)
        with err.status("computing the speed of light T_sol", spinner="dots"):
            outcome.sol = speed_of_light(problem, indices, device, gpu_name)
        sol_ms = dict(outcome.sol.t_sol_ms) if outcome.sol.enforce else None
        with err.status(f"evaluating on {device}", spinner="dots"):
            outcome.verdict = await evaluate_prepared(
                pool, problem, prepared, workloads=tuple(indices), rounds=args.rounds, timing=policy,
                sol_ms=sol_ms, blob_roots=blob_roots)
    return outcome


def _device_label(device: str, gpu_name: str) -> str:
    return gpu_name or ("cpu" if device == "cpu" else "cuda")


# ---------------------------------------------------------------- results per workload


@dataclass(frozen=True)
class Row:
    index: int
    status: str
    reason: str
    time_ms: float | None
    spread: float | None
    calls: int | None
    timing_method: str
    errors: Any  # ErrorStats | None
    baseline: Any  # WorkloadBaseline | None
    t_b_ms: float | None
    speedup: float | None
    t_sol_ms: float | None
    sol: float | None
    sol_note: str


def rows(outcome: Outcome) -> list[Row]:
    by_index = {w.index: w for w in outcome.verdict.workloads}
    stopped = next((w for w in outcome.verdict.workloads if not w.passed and w.status.value != "UNAVAILABLE"), None)
    result = []
    for index in outcome.indices:
        verdict = by_index.get(index)
        baseline = outcome.baselines.get(index)
        t_b = baseline.baseline_ms if baseline is not None else None
        t_sol = outcome.sol.t_sol_ms.get(index)
        if verdict is None:
            why = f"the evaluation stopped after workload {stopped.index}" if stopped else "not evaluated"
            result.append(Row(index, NOT_RUN, why, None, None, None, "", None, baseline, t_b, None, t_sol, None, ""))
            continue
        timing = verdict.timing
        passed = verdict.status.value == "PASSED"
        time_ms = timing.median_ms if timing is not None else None
        speedup = t_b / time_ms if passed and t_b and time_ms else None
        score, note = sol_score(time_ms, t_b, t_sol) if passed else (None, "")
        errors = verdict.errors if verdict.status.value in ("PASSED", "INCORRECT_NUMERICAL") else None
        result.append(Row(index, verdict.status.value, verdict.reason, time_ms,
                          timing.spread if timing else None, timing.calls if timing else None,
                          timing.method if timing else "", errors, baseline, t_b, speedup, t_sol, score, note))
    return result


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summary_line(outcome: Outcome, table_rows: list[Row]) -> str:
    verdict = outcome.verdict
    evaluated = [r for r in table_rows if r.status not in ("UNAVAILABLE", NOT_RUN)]
    passed = [r for r in evaluated if r.status == "PASSED"]
    counted = f"{len(passed)}/{len(evaluated)} workloads"
    if verdict.status.value != "PASSED":
        first = (verdict.reason or "").splitlines()[0] if verdict.reason else ""
        return f"{verdict.status.value} ({counted} passed): {first}".rstrip(": ")
    parts = [f"PASSED {counted}"]
    speedups = [r.speedup for r in passed if r.speedup]
    if speedups and len(speedups) == len(passed):
        parts.append(f"geomean speedup {_geomean(speedups):.2f}x")
    elif speedups:
        parts.append(f"geomean speedup {_geomean(speedups):.2f}x over {len(speedups)} with T_b")
    else:
        parts.append("speedup n/a (no T_b)")
    scores = [r.sol for r in passed if r.sol is not None]
    if scores:
        parts.append(f"mean SOL {sum(scores) / len(scores):.2f}"
                     + (f" over {len(scores)}" if len(scores) != len(passed) else ""))
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


def _notes(outcome: Outcome, table_rows: list[Row]) -> list[str]:
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
    return lines


# ---------------------------------------------------------------- JSON traces


def traces(outcome: Outcome) -> list[dict[str, Any]]:
    """One trace per evaluated workload, shaped like SOL-ExecBench's ``Trace`` (definition, workload, solution,
    evaluation with status/log/environment/timestamp and, as upstream requires, ``correctness`` only for PASSED
    and INCORRECT_NUMERICAL and ``performance`` only for PASSED), plus kernelfleet's own fields under
    ``"kernelfleet"``. Non-finite numbers are written as the strings "Infinity", "-Infinity" and "NaN" (as
    upstream serialises them), so every line is valid JSON."""
    import torch

    timestamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    environment = {"hardware": outcome.device_name or outcome.device, "libs": {"torch": torch.__version__}}
    protections = list(outcome.verdict.protections)
    found = []
    for row in rows(outcome):
        if row.status == NOT_RUN:
            continue
        workload = outcome.problem.workloads[row.index]
        evaluation: dict[str, Any] = {"status": row.status, "log": row.reason, "environment": environment,
                                      "timestamp": timestamp}
        if row.errors is not None:
            evaluation["correctness"] = {"max_relative_error": row.errors.max_rel_error,
                                         "max_absolute_error": row.errors.max_abs_error,
                                         "matched_ratio": row.errors.matched_ratio,
                                         "extra": {"worst_output": row.errors.output}}
        if row.status == "PASSED" and row.time_ms is not None:
            performance: dict[str, Any] = {"latency_ms": row.time_ms}
            if row.t_b_ms is not None:
                performance["reference_latency_ms"] = row.t_b_ms
                performance["speedup_factor"] = row.speedup
            evaluation["performance"] = performance
        baseline = row.baseline
        found.append(_finite({
            "definition": outcome.problem.name,
            "workload": {"uuid": workload.uuid, "axes": dict(workload.axes),
                         "inputs": {n: _input_json(s) for n, s in workload.inputs.items()}},
            "solution": outcome.solution.name,
            "evaluation": evaluation,
            "kernelfleet": {
                "workload_index": row.index,
                "device": outcome.device,
                "latency_ms": row.time_ms,
                "spread": row.spread,
                "timing_calls": row.calls,
                "timing_method": row.timing_method,
                "t_sol_ms": row.t_sol_ms,
                "t_sol_note": outcome.sol.note(row.index) if row.t_sol_ms is None else "",
                "sol_score": row.sol,
                "sol_score_note": row.sol_note,
                "baseline": None if baseline is None else {
                    "t_b_ms": baseline.baseline_ms, "method": baseline.method, "eager_ms": baseline.eager_ms,
                    "compiled_ms": baseline.compiled_ms, "compile_reason": baseline.compile_reason,
                    "error": baseline.error, "cached": baseline.cached},
                "protections": protections,
            },
        }))
    return found


def _input_json(source) -> dict[str, Any]:
    data: dict[str, Any] = {"type": source.kind.value}
    if source.kind.value == "scalar":
        data["value"] = source.value
    elif source.kind.value == "safetensors":
        data.update(path=source.path, tensor_key=source.tensor_key)
    return data


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
