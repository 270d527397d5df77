"""``kernelfleet run``: start or resume a fleet run; ``--headless`` prints one progress line per event."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import anyio
import anyio.lowlevel

from core.config import ClusterConfig, ConfigError, FleetConfig, check_ray_address, load_config
from core.errors import StoreRowError
from core.evaluate.hosts import HostUnavailable, backend_named
from core.fleet import capability
from core.fleet.orchestrator import Fleet, FleetError
from core.problem import load_problems

BUNDLED_PROBLEMS = Path(__file__).resolve().parents[1] / "problems"


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "run", help="run the fleet on problems (or resume a run)",
        description="Optimize kernels for PROBLEM_PATHS (default: the bundled problems/) with the agents the config "
                    "asks for (default: 2 tuner agents). Everything is recorded in RUN_DIR/run.sqlite; Ctrl-C or "
                    "SIGTERM stops cleanly (exit 0), a second one skips the rest of that stop (the re-verification of "
                    "bests; exit 0), a third exits at once (exit 130 for Ctrl-C, 143 for SIGTERM) leaving what was "
                    "recorded intact, and --resume continues where the run stopped, even "
                    "after kill -9. On the CPU, workloads over "
                    f"{capability.CPU_WORKLOAD_MAX_BYTES >> 20} MiB of inputs and outputs are skipped (one log line "
                    "each), and the default problems are the bundled ones an agent can work on there.")
    parser.add_argument("problem_paths", nargs="*", metavar="PROBLEM_PATHS", help="problem folders or folders of them")
    parser.add_argument("--config", type=Path, metavar="fleet.toml", help="run configuration (default: built-in)")
    parser.add_argument("--run-dir", type=Path, metavar="DIR", help="where the run is recorded (default: runs/TIME)")
    parser.add_argument("--resume", type=Path, metavar="DIR", help="continue the run recorded in DIR")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="override [fleet] device")
    parser.add_argument("--ray", metavar="ADDRESS",
                        help="evaluate on the GPUs of a Ray cluster: the head's HOST:PORT, \"auto\" (the cluster "
                             "`ray start` made on this host) or \"local\"; overrides [cluster] ray_address and is "
                             "kept with the run, so --resume uses it (needs kernelfleet[cluster])")
    parser.add_argument("--wall-s", type=float, metavar="S",
                        help="stop the run after S seconds of wall time (overrides [budgets] run_wall_s)")
    parser.add_argument("--headless", action="store_true", help="no terminal UI: print progress lines")
    parser.set_defaults(handler=run_fleet)


def run_fleet(args: argparse.Namespace) -> int:
    err = sys.stderr
    if args.resume and (args.problem_paths or args.config or args.run_dir or args.ray is not None
                        or args.wall_s is not None):
        print("error: --resume DIR takes the problems and config stored in DIR (its Ray address and budgets too); "
              "give no others", file=err)
        return 2
    if args.wall_s is not None and not args.wall_s > 0:
        print(f"error: --wall-s: must be a number of seconds above 0, got {args.wall_s:g}", file=err)
        return 2
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=err)
        return 2
    if args.device:
        config = dataclasses.replace(config, fleet=dataclasses.replace(config.fleet, device=args.device))
    if args.wall_s is not None:
        config = dataclasses.replace(config, budgets=dataclasses.replace(config.budgets, run_wall_s=args.wall_s))
    if args.ray is not None:
        problem = check_ray_address(args.ray)
        if problem:
            print(f"error: --ray: {problem}", file=err)
            return 2
        config = dataclasses.replace(config, cluster=dataclasses.replace(config.cluster, ray_address=args.ray))
    cluster = _stored_cluster(args.resume) if args.resume else config.cluster
    try:
        backend_named(cluster.backend, cluster.ray_address).check(cluster.ray_address)
    except (ValueError, HostUnavailable) as exc:
        print(f"error: {exc}", file=err)
        return 2
    notes: list[str] = []
    probed: list = []  # the probe's model calls (core.llm.probe.ProbeCall), recorded once the run's store is open
    try:
        failure = _probe_models(_stored_config(args.resume) if args.resume else config, notes, args.headless,
                                probed)
    except KeyboardInterrupt:
        print("error: interrupted while probing the model endpoints; nothing was started", file=err)
        return 130
    if failure:
        print(f"error: {failure}", file=err)
        return 2
    if args.resume:
        run_dir, paths = args.resume, None
    else:
        run_dir = args.run_dir or Path("runs") / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        paths = args.problem_paths or _default_problems(config, notes)
    fleet = Fleet(run_dir, config, paths, resume=bool(args.resume), on_event=_print_event if args.headless else None)
    try:
        state = anyio.run(_run_with_signals, fleet, notes, probed) if args.headless else \
            _run_with_ui(fleet, run_dir, notes, probed)
    except BaseException as exc:  # noqa: BLE001 - a run that cannot start or go on is one line; anything else raises
        reason = one_line_error(exc)
        if reason is None:
            raise
        print(f"error: {reason}", file=err, flush=True)
        return 2
    print(f"run {state}: {run_dir} — see `kernelfleet report {run_dir}`", flush=True)
    return 0


def _default_problems(config: FleetConfig, notes: list[str]) -> list[str]:
    """On the CPU, the bundled problems some agent of ``config`` can work on there (all of them when none can: the
    run's start then says so), with a line for ``notes`` when some are left out; on a GPU, every bundled problem."""
    if config.fleet.device != "cpu":
        return [str(BUNDLED_PROBLEMS)]
    loaded = load_problems([BUNDLED_PROBLEMS])
    if loaded.invalid or not loaded.problems:
        return [str(BUNDLED_PROBLEMS)]  # the run's start reports what is wrong with them
    assessed = [capability.assess(p, config) for p in loaded.problems]
    chosen = capability.improvable_folders(assessed)
    if not chosen or len(chosen) == len(assessed):
        return [str(BUNDLED_PROBLEMS)]
    left_out = [a for a in assessed if not a.improvable]
    reasons = sorted({a.why_not for a in left_out})
    notes.append(f"on the {config.fleet.device} the run takes the {len(chosen)} bundled problems an agent can work "
                 f"on ({', '.join(_key(Path(path)) for path in chosen)}); the other {len(left_out)} are left "
                 f"out ({'; '.join(reasons)}): name their folders to run them anyway")
    return [str(path) for path in chosen]


def _key(folder: Path) -> str:
    return f"{folder.parent.name}/{folder.name}"


def _start(fleet: Fleet, notes: list[str], probed: Sequence = ()) -> None:
    """Open the run (which logs the CPU's skipped workloads and whether any agent can work), then the start's notes
    (which bundled problems the default took) and the start-up probe's model calls, counted as every call is."""
    fleet.open()
    for line in notes:
        fleet.event("log", line)
    for made in probed:
        fleet.store.add_llm_call(None, None, made.call, profile=made.profile, model=made.model)


def _stored_cluster(run_dir: Path) -> ClusterConfig:
    """The [cluster] section of the config a run stored (the default when none, or when the store cannot be read:
    the run's own start says why)."""
    stored = _stored_config(run_dir)
    return stored.cluster if stored is not None else ClusterConfig()


def _stored_config(run_dir: Path) -> FleetConfig | None:
    """The config a run stored; None when there is none or the store cannot be read (the run's start says why)."""
    from core.config import parse_config
    from core.store import RunReader

    try:
        with RunReader(run_dir) as reader:
            info = reader.run_info()
        return parse_config(info.config) if info is not None else None
    except (OSError, ValueError, ConfigError):
        return None


def _probe_models(config: FleetConfig | None, notes: list[str], headless: bool, probed: list) -> str | None:
    """Before anything starts, one tiny call to each endpoint the run will call (``core.llm.probe``): its lines go
    to the run's log (``notes``), and at once to the terminal before the UI takes it; the error line's text when an
    endpoint cannot work (every line printed first)."""
    if config is None:
        return None
    from core.llm.probe import probe_models  # runs that call no model import no openai client

    lines: list[str] = []
    failure = probe_models(config, lines.append, probed.append)
    if failure or not headless:
        for line in lines:
            print(line, flush=True)
    notes += lines
    return failure


def one_line_error(exc: BaseException) -> BaseException | None:
    """The error behind ``exc`` that says in one line why the run cannot start or go on (a FleetError, a host
    backend's devices out of reach, a stored config or a store row that does not parse), alone or inside an
    exception group; None for any other failure."""
    if isinstance(exc, (FleetError, HostUnavailable, ConfigError, StoreRowError)):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = one_line_error(inner)
            if found is not None:
                return found
    return None


async def _run_with_signals(fleet: Fleet, notes: list[str], probed: Sequence = ()) -> str:
    # The receiver is open before the run starts: a Ctrl-C during the start (opening the store, the first lines) is
    # a stop like any other once the run goes on, not a KeyboardInterrupt.
    try:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            # Before the task group, so a FleetError arrives alone, not in an exception group.
            _start(fleet, notes, probed)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_watch_signals, fleet, signals)
                state = await fleet.run()
                tg.cancel_scope.cancel()
    finally:
        # Plain handlers from here on, not the event loop's: whatever holds the loop now (the second signal's rest
        # of the stop, the end of the process), one more signal ends the process.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _stop_now)
    return state


async def _watch_signals(fleet: Fleet, signals) -> None:
    stops = 0
    async for signum in signals:
        name = signal.Signals(signum).name
        stops += 1
        if stops == 1:
            print(f"{name}: stopping (in-flight attempts resume with --resume; Ctrl-C again skips the rest of the "
                  f"stop)", flush=True)
            fleet.request_stop(f"{name} received")
            continue
        # The run is stopping already: this cancels what the stop still does (the re-verification of bests); the
        # store is closed as after one signal.
        print(f"{name} again: stopping now, skipping the rest of the stop (bests not re-verified yet are "
              f"re-verified by `kernelfleet verify` or at the end of a --resume); a third exits at once",
              file=sys.stderr, flush=True)
        fleet.request_stop(f"{name} received again")
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _stop_now)
        return


def _stop_now(signum: int, frame: object) -> None:
    """A third Ctrl-C or SIGTERM (or one after the run ended): exit at once, as a kill -9 would, which the store is
    made for: every attempt it recorded stays, one in flight stays pending and --resume re-evaluates it; the
    workers die with this process (their parent-death signal). Exit status 128 + the signal (130 for Ctrl-C)."""
    name = signal.Signals(signum).name
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    os.write(2, f"{name}: exiting now, without waiting for the stop to finish; attempts in flight stay pending "
                f"and `kernelfleet run --resume DIR` re-evaluates them (exit {128 + signum})\n".encode())
    os._exit(128 + signum)


def _run_with_ui(fleet: Fleet, run_dir: Path, notes: list[str], probed: Sequence = ()) -> str:
    """The core runs in a thread of its own (its own event loop); the terminal UI, the same watcher as
    `kernelfleet watch`, runs in the main thread on the run's store. Closing the UI stops the run cleanly."""
    from tui.app import make_app

    _start(fleet, notes, probed)
    outcome: dict[str, object] = {}
    started = threading.Event()

    async def core() -> str:
        outcome["token"] = anyio.lowlevel.current_token()
        started.set()
        return await fleet.run()

    app = make_app(run_dir, in_process=True)

    def run_core() -> None:
        try:
            outcome["state"] = anyio.run(core)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            outcome["error"] = exc
            try:  # a run that cannot go on (a fault of the machine) closes its UI, then says why
                app.call_from_thread(app.exit)
            except RuntimeError:
                pass  # the UI is not running (yet, or any more)
        finally:
            started.set()

    thread = threading.Thread(target=run_core, name="kernelfleet-core", daemon=True)
    thread.start()
    started.wait()
    previous = signal.signal(signal.SIGTERM, lambda *_: app.exit())
    try:
        if thread.is_alive():
            app.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if thread.is_alive() and "token" in outcome:
            print("the UI was closed: stopping the run (continue it with --resume)", flush=True)
            try:
                anyio.from_thread.run_sync(fleet.request_stop, "the UI was closed", token=outcome["token"])
            except RuntimeError:
                pass  # the core's loop has just ended on its own
        thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return str(outcome.get("state", "stopped"))


def _print_event(kind: str, message: str, agent: str, problem: str) -> None:
    stamp = datetime.datetime.now().strftime("%H:%M:%S")
    who = " ".join(x for x in (agent, problem) if x)
    print(f"{stamp} {kind:<8} {who + ': ' if who else ''}{message}", flush=True)
