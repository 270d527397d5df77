"""The ``kernelfleet`` command."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from core.errors import StoreRowError

# Each command's module (its ``register`` adds the command of that name), imported only when that command runs or
# the whole list is wanted (--help, an unknown command): the modules' imports add up to 0.2 s, and `kernelfleet
# eval` needs its own alone.
COMMANDS = {"problems": "cli.problems_cmd", "eval": "cli.eval_cmd", "run": "cli.run_cmd",
            "report": "cli.report_cmd", "export": "cli.export_cmd", "watch": "cli.watch_cmd", "docs": "cli.docs_cmd",
            "cache": "cli.cache_cmd", "verify": "cli.verify_cmd"}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command's parser: with ``argv``, only the command it names is registered (every one when it names
    none of them)."""
    parser = argparse.ArgumentParser(
        prog="kernelfleet",
        description="A fleet of autonomous agents optimizing GPU kernels for SOL-ExecBench-format problems.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    chosen = next((arg for arg in argv or () if not arg.startswith("-")), None)
    for name, module in COMMANDS.items():
        if chosen not in COMMANDS or name == chosen:
            importlib.import_module(module).register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
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
    except StoreRowError as exc:
        # A row another version wrote, or a hand changed: one line naming the run and the row, not a traceback.
        where = getattr(args, "run_dir", None) or getattr(args, "resume", None)
        print(f"error: {f'{where}: ' if where else ''}{exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`kernelfleet report --json | head`): nothing more to say, and nothing to flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _only_interrupts(group: BaseExceptionGroup) -> bool:
    return all(_only_interrupts(e) if isinstance(e, BaseExceptionGroup) else isinstance(e, KeyboardInterrupt)
               for e in group.exceptions)


if __name__ == "__main__":
    sys.exit(main())
