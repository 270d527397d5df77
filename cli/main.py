"""The ``kernelfleet`` command."""

from __future__ import annotations

import argparse
import os
import sys

from cli import eval_cmd, export_cmd, problems_cmd, report_cmd, run_cmd
from cli import docs_cmd, watch_cmd


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelfleet",
        description="A fleet of autonomous agents optimizing GPU kernels for SOL-ExecBench-format problems.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    problems_cmd.register(commands)
    eval_cmd.register(commands)
    run_cmd.register(commands)
    report_cmd.register(commands)
    export_cmd.register(commands)
    watch_cmd.register(commands)
    docs_cmd.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BaseExceptionGroup as group:
        # A Ctrl-C inside a task group (before a run's own signal handling starts) arrives wrapped.
        if not _only_interrupts(group):
            raise
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`kernelfleet report --json | head`): nothing more to say, and nothing to flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _only_interrupts(group: BaseExceptionGroup) -> bool:
    return all(_only_interrupts(e) if isinstance(e, BaseExceptionGroup) else isinstance(e, KeyboardInterrupt)
               for e in group.exceptions)


if __name__ == "__main__":
    sys.exit(main())
