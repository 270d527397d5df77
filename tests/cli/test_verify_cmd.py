"""`kernelfleet verify RUN_DIR` on real runs: refused with one line while a live run holds the run's lock; after the
run is gone (here killed, so none of its bests was re-verified) it re-verifies them with the run's rounds, one line
per problem and a summary; Ctrl-C stops it cleanly leaving the rest for later; bad input is one error line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli.main import main
from core.store import RunReader

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fleet"))  # the CPU run tests' problems and helpers

from fleet_problems import write_config, write_problems  # noqa: E402
from fleet_runner import read, start_run, wait_for  # noqa: E402


def kernelfleet(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def unverified(reader: RunReader) -> dict[int, int]:
    """Problem id -> its best attempt, for the bests not re-verified."""
    return {p.id: p.best_attempt_id for p in reader.problems()
            if p.best_attempt_id is not None and not reader.attempt(p.best_attempt_id).verified}


@pytest.mark.slow
def test_verify_is_refused_during_a_live_run_then_verifies_what_the_run_left(tmp_path):
    # Tunables the run cannot exhaust and no wall budget: its problems stay open, and an open problem's best is
    # re-verified during a run only once it stood a minute.
    write_problems(tmp_path / "problems", chunks=tuple(range(1, 257)))
    config = write_config(tmp_path / "fleet.toml", fleet={"tuner_agents": 1}, tuner={"trials_per_problem": 40})
    run_dir = tmp_path / "run"
    proc = start_run(tmp_path / "problems", "--config", config, "--run-dir", run_dir, log=tmp_path / "run.log")
    try:
        wait_for(lambda: proc.poll() is not None or len(read(run_dir, unverified) or {}) == 2, 120,
                 "a best on both problems")
        assert proc.poll() is None, "the run ended by itself"
        refused = kernelfleet("verify", run_dir)
        assert refused.returncode == 2
        assert refused.stdout == ""
        [line] = refused.stderr.splitlines()
        assert line.startswith(f"error: {run_dir}: the run is in use by pid {proc.pid} on "), line
        os.killpg(proc.pid, signal.SIGKILL)  # gone as after a crash: nothing re-verified its bests
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    left = read(run_dir, unverified)
    keys = read(run_dir, lambda r: {p.id: p.key for p in r.problems()})
    assert len(left) == 2
    finish = (f"not yet re-verified — finish with `kernelfleet verify {run_dir}` or "
              f"`kernelfleet run --resume {run_dir}`")
    report = kernelfleet("report", run_dir)
    assert report.returncode == 0, report.stderr
    assert f"2 bests {finish}" in " ".join(report.stdout.split()), report.stdout[-1500:]  # wrapped at its width

    # Ctrl-C once the verification has begun: a clean stop, the bests left as they were.
    began = time.time()
    interrupted = subprocess.Popen([sys.executable, "-m", "cli.main", "verify", str(run_dir)], cwd=ROOT,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: read(run_dir, lambda r: [e for e in r.events(kind="log") if e.ts >= began and
                                                  e.message.startswith("re-verifying the best attempt of 2")]),
                 60, "the verification to begin")
        interrupted.send_signal(signal.SIGINT)
        out, err = interrupted.communicate(timeout=60)
    finally:
        if interrupted.poll() is None:
            interrupted.kill()
            interrupted.wait()
    assert interrupted.returncode == 0, err
    assert "Traceback" not in err, err
    lines = out.splitlines()
    assert lines[0].startswith("re-verifying the best attempt of 2 problems with 10 rounds of fresh inputs")
    assert "SIGINT: stopping" in out
    still = read(run_dir, unverified)
    assert still and set(still.items()) <= set(left.items())
    assert lines[-1].startswith("2 bests waited for re-verification: ")
    assert lines[-1].endswith(f"; {len(still)} best{'s' if len(still) != 1 else ''} {finish}"), lines[-1]

    done = kernelfleet("verify", run_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"re-verifying the best attempt of {len(still)} problem")
    assert sorted(lines[1:-1]) == sorted(f"{keys[pid]}: attempt {best} re-verified: 10 rounds of fresh inputs passed"
                                         for pid, best in still.items()), lines
    assert lines[-1] == f"{len(still)} best{'s' if len(still) != 1 else ''} waited for re-verification: " \
                        f"{len(still)} passed"
    with RunReader(run_dir) as reader:
        assert unverified(reader) == {}
        for problem in reader.problems():
            assert reader.attempt(problem.best_attempt_id).verified == "passed: 10 rounds of fresh inputs"
    again = kernelfleet("verify", run_dir)
    assert again.returncode == 0
    assert again.stdout == f"nothing to re-verify: every best of {run_dir} is re-verified already\n"
    assert "not yet re-verified" not in kernelfleet("report", run_dir).stdout


def test_bad_input_is_one_error_line(tmp_path, capsys):
    nowhere = tmp_path / "nowhere"
    assert main(["verify", str(nowhere)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"error: {nowhere}: no run here (run.sqlite is missing)\n"
    assert not nowhere.exists()

    not_a_run = tmp_path / "notes"
    not_a_run.mkdir()
    (not_a_run / "run.sqlite").write_text("my notes, not a database\n")
    assert main(["verify", str(not_a_run)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"error: {not_a_run / 'run.sqlite'}: not a SQLite database, so not a kernelfleet run store (left "
                   f"untouched)\n")
    assert sorted(p.name for p in not_a_run.iterdir()) == ["run.sqlite"]  # no lock file left behind
    assert (not_a_run / "run.sqlite").read_text() == "my notes, not a database\n"
