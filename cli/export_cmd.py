"""``kernelfleet export RUN_DIR --format sol-execbench OUT/``: write the best solution of each problem of a run as
``OUT/<subset>/<name>/solution.json`` (SOL-ExecBench's solution format); problems without a passing attempt are
listed and skipped."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from cli.report_cmd import open_run
from core.report.export import FORMATS, export_best, not_exported


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "export",
        help="write the best solution of each problem of a run",
        description="Write the best passing solution of each problem of RUN_DIR as OUT/<subset>/<name>/"
                    "solution.json. Exit status: 0, or 2 for a missing or invalid run or an unwritable OUT.",
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
            written = export_best(reader, args.out_dir, args.format)
        except OSError as exc:
            err.print(f"error: {args.out_dir}: cannot write ({exc})", markup=False, soft_wrap=True)
            return 2
    for path in written:
        out.print(f"wrote {path}", markup=False, soft_wrap=True)
    for key, why in skipped:
        out.print(f"skipped {key}: {why}", markup=False, soft_wrap=True)
    out.print(f"exported {len(written)} solution{'s' if len(written) != 1 else ''} ({args.format}), "
              f"skipped {len(skipped)}", markup=False, soft_wrap=True)
    return 0
