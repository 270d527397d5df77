"""``kernelfleet report RUN_DIR [--html OUT.html] [--json]``: what a run achieved, read from its store (also while
it runs): per problem its seed and best speedup and SOL score, and over the fleet the geomean speedup, how many
problems beat the baseline or doubled it and the median and mean SOL score, before (seeds) → after (bests)."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from core.report.metrics import (FleetSummary, RunReport, build_report, comparison_rows, report_to_dict,
                                 verified_label)
from core.store import RunReader
from core.store.model import MetricRow


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "report",
        help="summarize a run: per problem and fleet speedup and SOL, before → after",
        description="Read RUN_DIR's store and print per problem its seed → best speedup and SOL score, and the "
                    "fleet's geomean speedup, problems beating the baseline (> 1x) and above 2x, and median and "
                    "mean SOL, before (seeds) → after (bests). Exit status: 0, or 2 for a missing or invalid run.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="a run folder (holding run.sqlite)")
    parser.add_argument("--html", type=Path, default=None, metavar="OUT.html",
                        help="also write a self-contained HTML report (charts as inline SVG)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON document instead")
    parser.set_defaults(handler=run_report)


def _err() -> Console:
    return Console(stderr=True, highlight=False)


def open_run(run_dir: Path, err: Console) -> RunReader | None:
    """The run's reader, or None after printing one ``error:`` line (the caller exits 2)."""
    try:
        return RunReader(run_dir)
    except (FileNotFoundError, ValueError) as exc:
        message = str(exc)
    except sqlite3.Error as exc:
        message = f"{run_dir}: not a kernelfleet run store ({exc})"
    err.print(f"error: {message}", markup=False, soft_wrap=True)
    return None


def _out() -> Console:
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
    return Console(highlight=False, width=width)


def fmt_x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def fmt_sol(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _arrow(before: str, after: str) -> str:
    return f"{before} → {after}"


def _change_style(before: float | None, after: float | None) -> str:
    if after is None:
        return "dim"
    if before is None or after > before:
        return "green"
    return "red" if after < before else ""


def problem_table(report: RunReport) -> Table:
    table = Table(title="Problems", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("problem", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("attempts", justify="right", no_wrap=True)
    table.add_column("speedup seed → best", justify="right", no_wrap=True)
    table.add_column("SOL seed → best", justify="right", no_wrap=True)
    table.add_column("re-verified", no_wrap=True)
    for p in report.problems:
        table.add_row(Text(p.key), Text(p.status), str(p.attempts),
                      Text(_arrow(fmt_x(p.seed_speedup), fmt_x(p.best_speedup)),
                           style=_change_style(p.seed_speedup, p.best_speedup)),
                      Text(_arrow(fmt_sol(p.seed_sol), fmt_sol(p.best_sol)),
                           style=_change_style(p.seed_sol, p.best_sol)),
                      Text(verified_label(p), style="" if verified_label(p) == "yes" else "dim"))
    return table


def summary_lines(before: FleetSummary, after: FleetSummary, metrics: Sequence[MetricRow] = (),
                  device: str = "GPU") -> list[str]:
    """``device``: what the run's devices are called (``RunInfo.device_word``)."""
    rows = comparison_rows(before, after, fmt_x, fmt_sol)
    width = max(len(name) for name, _, _ in rows)
    lines = ["Fleet, seed → best:"]
    lines += [f"  {name:<{width}}  {_arrow(a, b)}" for name, a, b in rows]
    lines.append(f"  {'spent':<{width}}  {after.attempts} attempts, {after.tokens} tokens, ${after.dollars:.2f}, "
                 f"{after.gpu_seconds:.1f} {device} seconds")
    last = next((m for m in reversed(metrics) if m.gpu_busy is not None), None)
    if last is not None:
        # The pool's own account, over the last start of the run (a resume starts a new pool).
        wait = f", mean queue wait {last.queue_wait_s:.1f} s" if last.queue_wait_s is not None else ""
        lines.append(f"  {device} busy while work waited: {last.gpu_busy:.0%}{wait} (since the last start)")
    return lines


def not_evaluated_lines(not_evaluated: dict[str, list[tuple[int, str]]]) -> list[str]:
    """The workloads left out of each problem's figures, one line per problem."""
    if not not_evaluated:
        return []
    lines = ["Not evaluated (each problem's speedup and SOL are over its other workloads):"]
    for key, skipped in not_evaluated.items():
        reasons = sorted({why for _, why in skipped})
        lines.append(f"  {key}: workload{'s' if len(skipped) > 1 else ''} {', '.join(str(i) for i, _ in skipped)} "
                     f"({reasons[0]}{f'; {len(reasons) - 1} other reasons' if len(reasons) > 1 else ''})")
    return lines


def device_lines(devices) -> list[str]:
    """Where the attempts were evaluated, one line per device (node, GPU, model)."""
    if not devices:
        return []
    return ["Evaluated on:"] + [f"  {d.describe()}: {d.attempts} attempts, {d.gpu_seconds:.1f} "
                                f"{d.device_word} seconds" for d in devices]


def run_report(args: argparse.Namespace) -> int:
    err = _err()
    reader = open_run(args.run_dir, err)
    if reader is None:
        return 2
    with reader:
        report = build_report(reader)
        page = None
        if args.html is not None:
            from core.report.html import render_html

            page = render_html(reader)
    if page is not None:
        try:
            args.html.parent.mkdir(parents=True, exist_ok=True)
            args.html.write_text(page, encoding="utf-8")
        except OSError as exc:
            err.print(f"error: {args.html}: cannot write the HTML report ({exc.strerror or exc})", markup=False,
                      soft_wrap=True)
            return 2
    if args.json:
        print(json.dumps(report_to_dict(report), indent=2))
    else:
        out = _out()
        out.print(problem_table(report))
        for line in (summary_lines(report.before, report.after, report.metrics, report.device_word)
                     + device_lines(report.devices)
                     + not_evaluated_lines(report.not_evaluated)):
            out.print(line, markup=False, soft_wrap=True)
    if page is not None:
        (err if args.json else _out()).print(f"wrote {args.html}", markup=False, soft_wrap=True)
    return 0
