"""The compiler agent alone over a fixed sample of SOL-ExecBench problems (issue 38's must-show): how many problems
beat T_b, the geomean speedup and the median SOL, per subset and overall, the configurations that won, and NVIDIA's
CLI on the exports of the bests.

    PYTHONPATH=$PWD python3 bench/compiler_sample.py BENCHMARK_DIR --out DIR [--wall-s S] [--agents N]
        [--device cuda|cpu] [--sample FILE] [--upstream-s S] [--no-run]
    python3 bench/compiler_sample.py --pick BENCHMARK_DIR > bench/compiler_sample.txt

The run: DIR/problems links each problem of the sample (``bench/compiler_sample.txt``, one ``SUBSET/NAME`` a line)
to its folder in BENCHMARK_DIR, DIR/compiler.toml is ``bench/compiler_fleet.toml`` with ``[compiler] agents = N``
(and ``cpu = true`` on the CPU), and ``kernelfleet run DIR/problems/*/* --headless --wall-s S`` runs as a user
runs it (its output in DIR/run.log, the run in DIR/run). Then the figures are read from the store
(DIR/compiler_sample.json, and a short table), the bests exported (``kernelfleet export DIR/run DIR/export``) and,
where NVIDIA's CLI can run (upstream's sources and a CUDA torch), each export checked by
``bench/upstream_export_check.sh`` until ``--upstream-s`` is spent (DIR/upstream.txt). ``--no-run`` reads DIR/run
again and checks the exports not yet checked, so that a check cut short goes on in a second call.

``--pick`` prints the sample: in each subset folder, the problems that load with every workload runnable here,
spread evenly by name (``spread``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.fleet.compiler_agent import NOTE_PREFIX  # noqa: E402
from core.problem import ProblemInvalid, load_problem  # noqa: E402
from core.report.figures import FleetFigures, problem_figures, subset_figures  # noqa: E402
from core.report.metrics import _finite, maker_kind  # noqa: E402
from core.store import RunReader  # noqa: E402

PER_SUBSET = 10
SAMPLE = ROOT / "bench" / "compiler_sample.txt"
BASE_CONFIG = ROOT / "bench" / "compiler_fleet.toml"
UPSTREAM_CHECK = ROOT / "bench" / "upstream_export_check.sh"
AIM = "aim (issue 38, on the H200): >= 40% beating T_b, geomean >= 1.10x"
WHY = re.compile(r" \([^()]*\)$")  # a compiler note's " (won on L1/...)": why it was tried, not what it is
UPSTREAM_LINE = re.compile(r"^(\S+/\S+): (.*)$")


class Refused(Exception):
    """A bad argument or input: one ``error:`` line, exit 2."""


# ---------------------------------------------------------------- the sample


@dataclass(frozen=True)
class SubsetPick:
    subset: str
    problems: int  # problem folders in the subset
    runnable: tuple[str, ...]  # names of those that load with every workload runnable, sorted
    picked: tuple[str, ...]


def spread(names: Sequence[str], k: int) -> list[str]:
    """``k`` of ``names`` evenly spread over them: those at positions floor((2i + 1) n / 2k), i = 0..k-1 (each the
    middle of its n/k-th); all of them when there are no more than ``k``."""
    n = len(names)
    return list(names) if n <= k else [names[(2 * i + 1) * n // (2 * k)] for i in range(k)]


def runnable(folder: Path) -> bool:
    """Whether the problem loads and none of its workloads is marked unavailable (e.g. a missing safetensors
    blob)."""
    try:
        problem = load_problem(folder)
    except ProblemInvalid:
        return False
    return bool(problem.workloads) and all(w.runnable for w in problem.workloads)


def pick(benchmark: Path, per_subset: int = PER_SUBSET) -> list[SubsetPick]:
    """Each subset folder of ``benchmark`` (sorted) with its runnable problems and the ``spread`` of them."""
    picks = []
    for subset in sorted(p for p in benchmark.iterdir() if p.is_dir()):
        folders = sorted(p for p in subset.iterdir() if (p / "definition.json").is_file())
        if not folders:
            continue
        names = tuple(p.name for p in folders if runnable(p))
        picks.append(SubsetPick(subset.name, len(folders), names, tuple(spread(names, per_subset))))
    return picks


def sample_text(picks: Sequence[SubsetPick], per_subset: int = PER_SUBSET) -> str:
    header = [
        f"# The compiler agent's fixed sample (issue 38): {per_subset} problems of each subset of SOL-ExecBench.",
        "# Made by `python3 bench/compiler_sample.py --pick BENCHMARK_DIR` (the rule is its `pick`): in each subset",
        "# folder, the problems that load with no workload marked unavailable (a missing safetensors blob...), sorted",
        f"# by folder name, n of them; of those, the ones at positions floor((2i + 1) n / {2 * per_subset}),"
        f" i = 0..{per_subset - 1}",
        "# (evenly spread by name). Runnable here: " + ", ".join(
            f"{p.subset} {len(p.runnable)} of {p.problems}" for p in picks) + ".",
    ]
    return "\n".join(header + [f"{p.subset}/{name}" for p in picks for name in p.picked]) + "\n"


def read_sample(path: Path, benchmark: Path) -> list[str]:
    """The sample's SUBSET/NAME keys, each a problem folder of ``benchmark``."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise Refused(f"--sample {path}: cannot read it ({exc})") from None
    keys = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if not keys:
        raise Refused(f"--sample {path}: no SUBSET/NAME line in it")
    for key in keys:
        if key.count("/") != 1 or not (benchmark / key / "definition.json").is_file():
            raise Refused(f"--sample {path}: {key!r} is not a problem folder of {benchmark} (SUBSET/NAME)")
    if len(set(keys)) != len(keys):
        raise Refused(f"--sample {path}: a problem is listed twice")
    return keys


def link_problems(keys: Sequence[str], benchmark: Path, problems: Path) -> None:
    """``problems``/SUBSET/NAME, a link to each problem's folder (the links of an earlier call replaced; anything
    else there is refused, never deleted)."""
    for link in problems.glob("*/*"):
        if link.is_symlink():
            link.unlink()
    if any(problems.glob("*/*")):
        raise Refused(f"{problems} holds more than the sample's links: give a new --out")
    for key in keys:
        link = problems / key
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to((benchmark / key).resolve(), target_is_directory=True)


# ---------------------------------------------------------------- the run's config


def toml_text(config: dict[str, dict]) -> str:
    """Sections of scalars and lists (what a fleet config without [llm] profiles holds) as TOML."""
    out = []
    for section, values in config.items():
        if any(isinstance(v, dict) for v in values.values()):
            raise Refused(f"{BASE_CONFIG}: [{section}] holds a table; keep the base config to plain keys")
        out.append(f"[{section}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()))
    return "\n".join(out)


def run_config(base: dict[str, dict], agents: int, device: str) -> dict[str, dict]:
    """The base config with the compiler agents alone: ``agents`` of them, on every problem, on the CPU too when
    the run is there."""
    config = {section: dict(values) for section, values in base.items()}
    config.setdefault("fleet", {}).update(tuner_agents=0, llm_agents=0)
    compiler = config.setdefault("compiler", {})
    compiler.update(agents=agents, problems="all")
    if device == "cpu":
        compiler["cpu"] = True
    return config


# ---------------------------------------------------------------- the figures


@dataclass(frozen=True)
class SampleRow:
    """A problem of the run as the figures read it (``core.report.figures.HasFigures``, with its subset)."""

    key: str
    subset: str
    best_speedup: float | None
    best_sol: float | None
    seed_speedup: float | None
    seed_sol: float | None
    best_by: str  # the kind of its best's maker (``maker_kind``); "" without a best
    best_note: str
    compiler_trials: int  # finished attempts of compiler agents


@dataclass(frozen=True)
class SampleSummary:
    subsets: dict[str, FleetFigures]
    overall: FleetFigures
    with_trials: dict[str, int]  # per subset and "all": problems with a finished compiler trial
    winners: list[tuple[str, int]]  # what the bests are, most first


def read_rows(run_dir: Path) -> list[SampleRow]:
    with RunReader(run_dir) as reader:
        agents = {a.id: a for a in reader.agents()}
        trials = Counter(a.problem_id for a in reader.attempts(state="done") if maker_kind(a, agents) == "compiler")
        rows = []
        for p in reader.problems():
            best = reader.attempt(p.best_attempt_id) if p.best_attempt_id is not None else None
            rows.append(SampleRow(p.key, p.subset, p.best_speedup, p.best_sol, p.seed_speedup, p.seed_sol,
                                  maker_kind(best, agents) if best is not None else "",
                                  best.note if best is not None else "", trials[p.id]))
    return rows


def won_by(row: SampleRow) -> str:
    """What a problem's best is: "compiler: <configuration>", "seed (the reference)", or its maker's kind."""
    if row.best_by == "compiler" and row.best_note.startswith(NOTE_PREFIX):
        return WHY.sub("", row.best_note)
    return "seed (the reference)" if row.best_by == "seed" else row.best_by


def summarize(rows: Sequence[SampleRow]) -> SampleSummary:
    """The fleet's figures (``core.report.figures``' rule) per subset and over every row, the problems a compiler
    trial reached, and the bests counted by what they are."""
    with_trials = Counter(r.subset for r in rows if r.compiler_trials)
    return SampleSummary(
        subset_figures(rows), problem_figures(rows),
        {**{s: with_trials[s] for s in sorted({r.subset for r in rows})}, "all": sum(with_trials.values())},
        sorted(Counter(won_by(r) for r in rows if r.best_by).items(), key=lambda item: (-item[1], item[0])))


def summary_lines(summary: SampleSummary) -> list[str]:
    def line(name: str, f: FleetFigures) -> str:
        geomean = f"{f.geomean_speedup:.3f}x" if f.geomean_speedup is not None else "-"
        median = f"{f.median_sol:.3f}" if f.median_sol is not None else "-"
        return (f"{name:18} {f.problems:>8} {f.with_result:>11} {summary.with_trials[name]:>14} "
                f"{f.beating_baseline:>4} ({100 * f.share_beating:3.0f}%) {geomean:>9} {median:>10}")
    lines = [f"{'subset':18} {'problems':>8} {'with result':>11} {'compiler trial':>14} {'beat T_b':>11} "
             f"{'geomean':>9} {'median SOL':>10}"]
    lines += [line(name, f) for name, f in summary.subsets.items()]
    lines += [line("all", summary.overall), AIM, "bests by what they are:"]
    lines += [f"  {n:3}  {label}" for label, n in summary.winners] or ["  none"]
    return lines


def summary_dict(summary: SampleSummary, rows: Sequence[SampleRow]) -> dict:
    def figures(f: FleetFigures) -> dict:
        return {**asdict(f), "share_beating": f.share_beating}
    return _finite({"subsets": {name: figures(f) for name, f in summary.subsets.items()},
                    "overall": figures(summary.overall), "with_compiler_trial": summary.with_trials,
                    "winners": [list(w) for w in summary.winners],
                    "problems": [{**asdict(r), "won_by": won_by(r)} for r in rows]})


# ---------------------------------------------------------------- NVIDIA's CLI on the exports


def checked_before(path: Path) -> dict[str, str]:
    """Problem -> verdict of the checks DIR/upstream.txt holds already (an earlier call's)."""
    if not path.is_file():
        return {}
    return {m.group(1): m.group(2) for m in map(UPSTREAM_LINE.match, path.read_text().splitlines()) if m}


def check_exports(run_dir: Path, export: Path, record: Path, seconds: float) -> dict:
    """``upstream_export_check.sh`` on each exported problem not yet checked, one at a time until ``seconds`` are
    spent (or a Ctrl-C comes); its verdict lines appended to ``record``. A CLI that cannot run here is said once."""
    exported = sorted(str(p.parent.relative_to(export)) for p in export.glob("*/*/solution.json"))
    verdicts = {k: v for k, v in checked_before(record).items() if k in exported}
    env = {**os.environ, "KEEP_EXPORT": "1", "PYTHON": sys.executable}
    deadline = time.monotonic() + seconds
    unavailable = ""
    for key in exported:
        if key in verdicts:
            continue
        if time.monotonic() > deadline:
            break
        try:
            done = subprocess.run(["bash", str(UPSTREAM_CHECK), str(run_dir), str(export), key], cwd=ROOT, env=env,
                                  capture_output=True, text=True)
        except KeyboardInterrupt:  # the call's time limit: what was checked stands, the rest is left for --no-run
            break
        if done.returncode == 2:  # no upstream sources, or no CUDA torch for them: nothing will run
            unavailable = next((line for line in done.stderr.splitlines() if line.startswith("error:")),
                               done.stderr.strip()[-300:])
            break
        found = [m for m in map(UPSTREAM_LINE.match, done.stdout.splitlines()) if m and m.group(1) == key]
        verdicts[key] = found[-1].group(2) if found else f"no verdict (exit {done.returncode})"
        with open(record, "a") as out:
            out.write(f"{key}: {verdicts[key]}\n")
    return {"available": not unavailable, "unavailable": unavailable, "exported": len(exported),
            "checked": len(verdicts), "passed": sum(v.startswith("PASSED") for v in verdicts.values()),
            "failed": sorted(k for k, v in verdicts.items() if not v.startswith("PASSED")),
            "not_checked": [k for k in exported if k not in verdicts]}


def upstream_line(upstream: dict, out: Path) -> str:
    if not upstream["available"]:
        return f"NVIDIA's CLI: not run here ({upstream['unavailable']})"
    rest = upstream["not_checked"]
    return (f"NVIDIA's CLI: passed {upstream['passed']} of {upstream['checked']} checked, of {upstream['exported']} "
            f"exported (verdicts in {out / 'upstream.txt'})" + (
                f"; {len(rest)} not checked in time: run again with --no-run (h200_check.sh: NO_RUN=1)"
                if rest else ""))


# ---------------------------------------------------------------- main


def run_fleet(args: argparse.Namespace, keys: Sequence[str]) -> dict:
    """``kernelfleet run`` over the linked sample as a user runs it; a Ctrl-C (or ``timeout -s INT``) reaches the
    run too, which stops cleanly, and the figures are read all the same."""
    # Each link named, as a shell's DIR/problems/*/* names them: the search under a folder does not enter links.
    links = [str(args.out / "problems" / key) for key in keys]
    options = ["--config", str(args.out / "compiler.toml"), "--run-dir", str(args.out / "run"), "--headless",
               "--wall-s", str(args.wall_s), "--device", args.device]
    started = time.time()
    with open(args.out / "run.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "cli.main", "run", *links, *options], cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            rc = proc.wait()
        except KeyboardInterrupt:
            rc = proc.wait()
    return {"command": " ".join(["kernelfleet run", str(args.out / "problems" / "*" / "*"), *options]), "rc": rc,
            "command_s": round(time.time() - started, 1), "wall_s": args.wall_s, "agents": args.agents,
            "device": args.device}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("benchmark", type=Path, nargs="?", help="SOL-ExecBench's benchmark folder")
    parser.add_argument("--pick", type=Path, metavar="BENCHMARK_DIR", help="print the sample's list and exit")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--wall-s", type=float, default=1500.0)
    parser.add_argument("--agents", type=int, default=1, help="compiler agents (default 1)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--sample", type=Path, default=SAMPLE)
    parser.add_argument("--upstream-s", type=float, default=900.0,
                        help="seconds NVIDIA's CLI may spend on the exports in this call (default 900)")
    parser.add_argument("--no-run", action="store_true",
                        help="read DIR/run of an earlier call; check the exports not yet checked")
    args = parser.parse_args(argv)
    if args.pick is not None:
        if not args.pick.is_dir():
            raise Refused(f"--pick {args.pick}: not a folder")
        return args
    if args.benchmark is None or args.out is None:
        raise Refused("give BENCHMARK_DIR and --out DIR (or --pick BENCHMARK_DIR)")
    if not args.benchmark.is_dir():
        raise Refused(f"{args.benchmark}: not a folder")
    if not args.wall_s > 0 or args.agents < 1 or not args.upstream_s >= 0:
        raise Refused("--wall-s must be above 0, --agents at least 1, --upstream-s at least 0")
    has_run = (args.out / "run" / "run.sqlite").exists()
    if args.no_run and not has_run:
        raise Refused(f"--no-run: {args.out / 'run'} holds no run")
    if not args.no_run and (args.out / "run").exists():
        raise Refused(f"{args.out / 'run'} exists: give a new --out, or --no-run to read that run again")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        if args.pick is not None:
            sys.stdout.write(sample_text(pick(args.pick)))
            return 0
        keys = read_sample(args.sample, args.benchmark)
        args.out.mkdir(parents=True, exist_ok=True)
        if not args.no_run:
            link_problems(keys, args.benchmark, args.out / "problems")
            config = run_config(tomllib.loads(BASE_CONFIG.read_text()), args.agents, args.device)
            (args.out / "compiler.toml").write_text(toml_text(config))
    except (Refused, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    figures: dict = {"sample": str(args.sample), "sample_size": len(keys)}
    saved = args.out / "compiler_sample.json"
    if args.no_run:
        figures["run"] = json.loads(saved.read_text()).get("run", {}) if saved.is_file() else {}
    else:
        (args.out / "upstream.txt").unlink(missing_ok=True)  # an earlier run's verdicts
        figures["run"] = run_fleet(args, keys)
        print(f"run: exit {figures['run']['rc']} after {figures['run']['command_s']} s (log: {args.out / 'run.log'})")
    if not (args.out / "run" / "run.sqlite").is_file():
        print(f"error: the run recorded nothing; the end of {args.out / 'run.log'}:\n"
              + "".join((args.out / "run.log").read_text().splitlines(keepends=True)[-10:]), file=sys.stderr)
        return 1
    rows = read_rows(args.out / "run")
    summary = summarize(rows)
    print("\n".join(summary_lines(summary)))
    figures.update(summary_dict(summary, rows))
    saved.write_text(json.dumps(figures, indent=1))  # the run's figures stand whatever the export and check do
    if not args.no_run or not (args.out / "export").is_dir():
        shutil.rmtree(args.out / "export", ignore_errors=True)
        exported = subprocess.run([sys.executable, "-m", "cli.main", "export", str(args.out / "run"),
                                   "--format", "sol-execbench", str(args.out / "export")], cwd=ROOT,
                                  capture_output=True, text=True)
        (args.out / "export.log").write_text(exported.stdout + exported.stderr)
        if exported.returncode != 0:
            print(f"export: exit {exported.returncode} (see {args.out / 'export.log'})")
    figures["upstream"] = check_exports(args.out / "run", args.out / "export", args.out / "upstream.txt",
                                        args.upstream_s)
    print(upstream_line(figures["upstream"], args.out))
    saved.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
