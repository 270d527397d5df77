"""``kernelfleet export RUN_DIR --format sol-execbench OUT/``: write the best solution of each problem of a run as
``OUT/<subset>/<name>/solution.json``, self-contained in SOL-ExecBench's solution format; per problem it prints what
it wrote, what it changed and each deviation from upstream that remains. Problems without a passing attempt are
listed and skipped."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from cli.report_cmd import open_run
from core.report.export import FORMATS, export_problems, not_exported


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "export",
        help="write the best solution of each problem of a run",
        description="Write the best passing solution of each problem of RUN_DIR as OUT/<subset>/<name>/"
                    "solution.json, self-contained for SOL-ExecBench's evaluator (tunables baked in, the CUDA fast "
                    "path as a torch extension), and say per problem what was written and any deviation from "
                    "upstream that remains. Exit status: 0, or 2 for a missing or invalid run or an unwritable OUT.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="a run folder (holding run.sqlite)")
    parser.add_argument("out_dir", metavar="OUT", type=Path, help="the folder to write into")
    parser.add_argument("--format", choices=FORMATS, default=FORMATS[0],
                        help=f"the layout to write (default {FORMATS[0]})")
    parser.set_defaults(handler=run_export)


def run_export(args: argparse.Namespace) -> int:
    out, err = Console(highlight=False), Console(stderr=True, highlight=False)
    reader = open_run(args.run_dir, err)
    if reader is None:
        return 2
    with reader:
        skipped = not_exported(reader)
        try:
            written = export_problems(reader, args.out_dir, args.format)
        except OSError as exc:
            err.print(f"error: {args.out_dir}: cannot write ({exc})", markup=False, soft_wrap=True)
            return 2
    for done in written:
        out.print(f"wrote {done.path} ({done.key}, attempt {done.attempt_id}): {done.form}", markup=False,
                  soft_wrap=True)
        for line in done.changes:
            out.print(f"  changed: {line}", markup=False, soft_wrap=True)
        for line in done.deviations:
            out.print(f"  deviation: {line}", markup=False, soft_wrap=True)
        out.print(f"  re-verified: {done.verified}" if done.verified else
                  "  not re-verified with upstream's 10 rounds (the run stopped before; `kernelfleet run --resume "
                  "RUN_DIR` does it)", markup=False, soft_wrap=True)
    for key, why in skipped:
        out.print(f"skipped {key}: {why}", markup=False, soft_wrap=True)
    deviating = sum(1 for done in written if done.deviations)
    verified = sum(1 for done in written if done.verified)
    out.print(f"exported {len(written)} solution{'s' if len(written) != 1 else ''} ({args.format}), "
              f"skipped {len(skipped)}; {deviating} with deviations from upstream; {verified} re-verified",
              markup=False, soft_wrap=True)
    return 0
