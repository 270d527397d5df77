"""``kernelfleet verify RUN_DIR``: re-verify the bests a run's stop left not yet re-verified (a stop bounded by the
run's wall budget, a second Ctrl-C), with upstream's full rules and the run's evaluator, under the run's lock."""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from pathlib import Path

import anyio

from cli.run_cmd import one_line_error

from core.fleet.orchestrator import Fleet
from core.report.verification import not_yet_verified_line


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "verify", help="re-verify the bests a stopped run left not yet re-verified",
        description="Re-verify each best of the run in RUN_DIR not yet re-verified (a stop at the wall budget leaves "
                    "those it had no time for) with the run's [evaluation] verify_rounds of fresh inputs, on the "
                    "run's devices; one line per problem, then a summary. The run must not be running (its lock is "
                    "taken). Ctrl-C stops cleanly, leaving the rest not yet re-verified; a second one exits at once. "
                    "Exit status: 0, or 2 for a missing, invalid or running run.")
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="a run folder (holding run.sqlite)")
    parser.set_defaults(handler=run_verify)

# core.fleet.verify's lines about a best (others say it was not re-verified: our evaluation failed, not the candidate)
PASSED = re.compile(r"best attempt \d+ re-verified: ")
FAILED = re.compile(r"best attempt \d+ failed re-verification")


class Progress:
    """One line per problem as its verification ends, from the verifier's log lines about it."""

    def __init__(self) -> None:
        self.keys: dict[int, str] = {}  # problem id -> key: the run's, once it is open
        self.said: dict[str, list[str]] = {}  # problem key -> the verifier's lines about it
        self.passed = self.failed = 0  # bests that passed, and that failed (their successors are verified in turn)

    def on_event(self, kind: str, message: str, agent: str, problem: str) -> None:
        if kind == "log" and not problem and message.startswith("re-verifying the best attempt of "):
            print(message, flush=True)
        if kind == "log" and problem and message.startswith("best attempt "):
            self.said.setdefault(problem, []).append(message.removeprefix("best "))
            if FAILED.match(message):
                self.failed += 1
            elif PASSED.match(message):
                self.passed += 1

    def on_verified(self, problem_id: int) -> None:
        key = self.keys[problem_id]
        lines = self.said.pop(key, None) or ["no best left to verify"]
        print(f"{key}: {'; '.join(lines)}", flush=True)


def run_verify(args: argparse.Namespace) -> int:
    err = sys.stderr
    progress = Progress()
    fleet = Fleet(args.run_dir, resume=True, on_event=progress.on_event)
    progress.keys = fleet.run_context.keys
    try:
        waiting, left = anyio.run(_verify_with_signals, fleet, progress)
    except BaseException as exc:  # noqa: BLE001 - a run that cannot be opened is one line; anything else raises
        reason = one_line_error(exc)
        if reason is None:
            raise
        print(f"error: {reason}", file=err, flush=True)
        return 2
    if not waiting:
        print(f"nothing to re-verify: every best of {args.run_dir} is re-verified already", flush=True)
        return 0
    summary = f"{waiting} best{'s' if waiting != 1 else ''} waited for re-verification: {progress.passed} passed"
    if progress.failed:
        summary += f"; {progress.failed} failed (the next fastest passing attempt took their place)"
    if left:
        summary += f"; {not_yet_verified_line(len(left), args.run_dir)}"
    print(summary, flush=True)
    return 0


async def _verify_with_signals(fleet: Fleet, progress: Progress) -> tuple[int, list[int]]:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        fleet.open()  # before the task group, so a FleetError arrives alone, not in an exception group
        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch_signals, fleet, signals)
            outcome = await fleet.verify(progress.on_verified)
            tg.cancel_scope.cancel()
    return outcome


async def _watch_signals(fleet: Fleet, signals) -> None:
    async for signum in signals:
        name = signal.Signals(signum).name
        print(f"{name}: stopping; the bests not re-verified yet stay so (a second {name} exits at once)", flush=True)
        fleet.request_stop(f"{name} received")
        for other in (signal.SIGINT, signal.SIGTERM):
            signal.signal(other, _exit_now)
        return


def _exit_now(signum: int, frame: object) -> None:
    """A second Ctrl-C or SIGTERM: exit at once; every verdict written stays, the one in flight is not written."""
    os.write(2, f"{signal.Signals(signum).name}: exiting now (exit {128 + signum})\n".encode())
    os._exit(128 + signum)
