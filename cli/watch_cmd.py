"""``kernelfleet watch RUN_DIR``: the terminal UI attached to a run (running or finished) through its store, from
any terminal or SSH session. Quitting the watcher never stops the run."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "watch",
        help="watch and steer a run in a terminal UI",
        description="Attach to RUN_DIR's store (a running or finished run) and show the fleet, the problem grid, "
                    "per problem details, attempt diffs and logs; keys pause, resume, reprioritize and pin "
                    "problems, pause agents and stop the run through controls in the store. Press ? for the keys, "
                    "q to quit (the run goes on). Exit status: 0, or 2 for a missing or invalid run.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="a run folder (holding run.sqlite)")
    parser.add_argument("--poll", type=float, default=0.5, metavar="SECONDS",
                        help="how often to read the store (default 0.5)")
    parser.set_defaults(handler=run_watch)


def run_watch(args: argparse.Namespace) -> int:
    from tui.app import make_app

    try:
        app = make_app(args.run_dir, poll_s=max(0.05, args.poll))
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except sqlite3.Error as exc:
        print(f"error: {args.run_dir}: not a kernelfleet run store ({exc})", file=sys.stderr)
        return 2
    app.run()
    return 0
