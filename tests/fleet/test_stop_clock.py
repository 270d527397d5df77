"""A stop that respects the clock (core.fleet.reverify), on real CPU runs: the bests are re-verified while the run
goes on, open problems' included; the end-of-run re-verification stops at the wall budget + STOP_GRACE_S, so the
run returns within 30 s of its budget, and what it had no time for is said to be "not yet re-verified" (log line,
`kernelfleet report`) until `kernelfleet verify` finishes it; a resumed run starts with what the last stop left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from fleet_problems import REFERENCES, seed_solution, write_config, write_problems
from fleet_runner import ROOT, read, start_run, wait_for
from rows_problem import write_rows_problem

from core.config import load_config
from core.evaluate.local import LocalEvaluator
from core.fleet.orchestrator import Fleet
from core.fleet.reverify import STOP_GRACE_S
from core.store import RunReader

pytestmark = pytest.mark.slow

WALL_S = 15.0
# Each re-verification takes this much longer than its evaluation, as upstream's 10 rounds of a large problem take
# on a GPU: a stop that verified every best would overrun the budget by far more than 30 s.
VERIFY_DELAY_S = 12.0


class SlowVerification:
    """The run's devices, a real local pool, through the Evaluator seam; a correctness-only evaluation (a best's
    re-verification: no timing) starts VERIFY_DELAY_S late."""

    def __init__(self, local: LocalEvaluator):
        self.local = local

    async def __aenter__(self):
        await self.local.__aenter__()
        return self

    async def __aexit__(self, *exc_info):
        return await self.local.__aexit__(*exc_info)

    async def evaluate(self, request):
        if request.timing is None:
            await anyio.sleep(VERIFY_DELAY_S)
        return await self.local.evaluate(request)

    def __getattr__(self, name):
        return getattr(self.local, name)


def write_copies(root: Path, count: int) -> Path:
    """``count`` problems like scaled_relu, each with its seed whose CHUNK ranges over more values than a short run
    tries: a best on every problem once it is prepared, and agents still at work when the budget ends."""
    description, reference = REFERENCES["scaled_relu"]
    for n in range(count):
        name = f"scaled_relu_{n}"
        folder = write_rows_problem(root / "cpu" / name, name, description, reference, rows=(256, 1024))
        (folder / "solutions").mkdir()
        seed = seed_solution("scaled_relu", chunks=tuple(range(1, 257))) | {"definition": name}
        (folder / "solutions" / "seed_torch.json").write_text(json.dumps(seed))
    return root


def kernelfleet(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def not_yet_line(count: int, run_dir: Path) -> str:
    return (f"{count} best{'s' if count != 1 else ''} not yet re-verified — finish with `kernelfleet verify "
            f"{run_dir}` or `kernelfleet run --resume {run_dir}`")


def test_a_wall_budget_stop_ends_within_30_s_and_verify_finishes_the_rest(tmp_path):
    problems = write_copies(tmp_path / "problems", 6)
    config = load_config(write_config(tmp_path / "fleet.toml", budgets={"run_wall_s": WALL_S},
                                      tuner={"trials_per_problem": 200}, planner={"plateau_attempts": 500}))
    run_dir = tmp_path / "run"

    def slow_verification(fleet):
        return SlowVerification(LocalEvaluator("cpu", spare=False, workload_timeout_s=60, readable=[str(problems)]))

    fleet = Fleet(run_dir, config, [str(problems)], evaluator_factory=slow_verification)
    state = anyio.run(fleet.run)
    returned = time.time()

    assert state == "stopped" and fleet.stop_reason.startswith("run budget spent: "), fleet.stop_reason
    with RunReader(run_dir) as reader:
        created = reader.run_info().created_at
        keys = {p.id: p.key for p in reader.problems()}
        bests = [reader.attempt(p.best_attempt_id) for p in reader.problems() if p.best_attempt_id is not None]
        logs = [e.message for e in reader.events(kind="log")]
    assert returned - created <= WALL_S + 30, f"the stop ended {returned - created - WALL_S:.1f} s past the budget"
    left = [b for b in bests if not b.verified]
    assert left, "every best was re-verified: the stop was not cut at the budget + grace"
    # Re-verifying them at the stop would have passed the bound: each takes VERIFY_DELAY_S at least.
    assert returned - created + len(left) * VERIFY_DELAY_S > WALL_S + 30
    assert any(f"the run's wall budget + {STOP_GRACE_S:.0f} s" in m and m.startswith("re-verifying the best attempt")
               for m in logs), logs
    assert any(m.endswith(not_yet_line(len(left), run_dir)) for m in logs), logs[-5:]

    report = kernelfleet("report", run_dir)
    assert report.returncode == 0, report.stderr
    assert not_yet_line(len(left), run_dir) in " ".join(report.stdout.split()), report.stdout[-2000:]

    done = kernelfleet("verify", run_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for best in left:
        assert f"{keys[best.problem_id]}: attempt {best.id} re-verified: 10 rounds of fresh inputs passed" in lines, \
            lines
    assert lines[-1] == f"{len(left)} best{'s' if len(left) != 1 else ''} waited for re-verification: " \
                        f"{len(left)} passed", lines
    with RunReader(run_dir) as reader:
        for problem in reader.problems():
            if problem.best_attempt_id is not None:
                assert reader.attempt(problem.best_attempt_id).verified.startswith("passed"), problem.key
    report = kernelfleet("report", run_dir)
    assert report.returncode == 0 and "not yet re-verified" not in report.stdout


def test_an_open_problems_best_is_re_verified_while_its_agents_go_on(tmp_path):
    # Tunables the run cannot exhaust, no plateau: the problems stay open until the wall budget ends the run. One
    # workload each: no composite of per-workload leaders, whose remaking would keep a best from standing.
    write_problems(tmp_path / "problems", chunks=tuple(range(1, 257)), rows=(1024,))
    # 16 s: on a loaded 2-core machine the preparation alone takes 8 s, and a best must then stand 1.6 s.
    config = load_config(write_config(tmp_path / "fleet.toml", budgets={"run_wall_s": 16},
                                      tuner={"trials_per_problem": 200}, planner={"plateau_attempts": 500}))
    fleet = Fleet(tmp_path / "run", config, [str(tmp_path / "problems")])
    assert anyio.run(fleet.run) == "stopped"

    with RunReader(tmp_path / "run") as reader:
        events = reader.events(limit=100_000)
        closing = [e for e in events if e.kind == "decision" and e.message.split(":")[0] in
                   ("done", "plateaued", "over budget", "failed", "paused")]
        assert closing == [], [e.message for e in closing]
        end = next(e.ts for e in events if e.message.startswith("pool since this start"))
        in_run = [e for e in events if e.kind == "log" and " re-verified: 10 rounds" in e.message and e.ts < end]
        assert in_run, "no best was re-verified while the run went on"
        # The agents went on with the problem after its best was verified.
        first = in_run[0]
        later = [a for a in reader.attempts(first.problem_id, state="done")
                 if a.agent_id is not None and a.created_at > first.ts]
        assert later, "no agent worked on the problem after its best was re-verified"


def test_a_resumed_run_starts_by_verifying_what_the_last_stop_left(tmp_path):
    write_problems(tmp_path / "problems")
    config = write_config(tmp_path / "fleet.toml")
    run_dir = tmp_path / "run"
    log = tmp_path / "run.log"
    proc = start_run(tmp_path / "problems", "--config", config, "--run-dir", run_dir, log=log)

    def unverified(reader: RunReader) -> list[int]:
        return [p.id for p in reader.problems()
                if p.best_attempt_id is not None and not reader.attempt(p.best_attempt_id).verified]

    def with_best(reader: RunReader) -> int:
        return sum(p.best_attempt_id is not None for p in reader.problems())

    try:
        # Killed once both problems have a best: the one just prepared is open, and a run without a wall budget
        # verifies an open problem's best only after it stood a minute.
        wait_for(lambda: proc.poll() is not None or read(run_dir, with_best) == 2, 120, "a best on both problems")
        assert proc.poll() is None, "the run ended before it was killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    left = read(run_dir, unverified)
    assert left, "the run had verified its bests before it was killed"

    resumed = start_run("--resume", run_dir, log=log)
    assert resumed.wait(timeout=300) == 0, log.read_text()[-3000:]
    with RunReader(run_dir) as reader:
        assert reader.run_info().state == "finished"
        events = reader.events(limit=100_000)
        start = next(e.ts for e in events if e.message.startswith("resumed:"))
        said = [e for e in events if e.ts >= start and "the last stop left not yet re-verified" in e.message]
        assert [e.message for e in said] == [f"{len(left)} best{'s' if len(left) != 1 else ''} the last stop left "
                                             f"not yet re-verified: re-verifying them first, while the run goes on"]
        end = next(e.ts for e in events if e.ts >= start and e.message.startswith("pool since this start"))
        verified_in_run = {e.problem_id for e in events if start <= e.ts < end and " re-verified: " in e.message}
        assert set(left) <= verified_in_run, (left, verified_in_run)
        for problem in reader.problems():
            assert reader.attempt(problem.best_attempt_id).verified.startswith("passed"), problem.key
