"""Ctrl-C twice on a real `kernelfleet run`: the second one skips the rest of the clean stop with one line, no
traceback, and the store it leaves opens and holds every attempt recorded before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.store import RunReader

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fleet"))  # the CPU run tests' problems and helpers

from fleet_problems import write_config, write_problems  # noqa: E402
from fleet_runner import read, wait_for  # noqa: E402

pytestmark = pytest.mark.slow


def _done(reader: RunReader) -> list[int]:
    return [a.id for a in reader.attempts(state="done")]


def test_a_second_sigint_stops_now_with_one_line_and_a_consistent_store(tmp_path):
    # One tuner on a space it cannot exhaust: the run goes on until it is stopped; re-verification of the bests
    # (the default) is what the clean stop then does.
    write_problems(tmp_path / "problems", chunks=tuple(range(1, 257)))
    config = write_config(tmp_path / "fleet.toml", fleet={"tuner_agents": 1}, tuner={"trials_per_problem": 40})
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "run", str(tmp_path / "problems"), "--config",
                             str(config), "--run-dir", str(run_dir), "--headless"], cwd=ROOT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: proc.poll() is not None or len(read(run_dir, _done) or []) >= 3, 180, "three attempts")
        assert proc.poll() is None, "the run ended before it was interrupted"
        before = read(run_dir, _done)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "Traceback" not in err and "Traceback" not in out, err[-3000:]
    assert "KeyboardInterrupt" not in err
    again = [line for line in err.splitlines() if line.startswith("SIGINT again: stopping now")]
    assert len(again) == 1, err
    assert proc.returncode == 0, (proc.returncode, err[-2000:])
    assert "SIGINT: stopping" in out and f"run stopped: {run_dir}" in out
    with RunReader(run_dir) as reader:
        assert reader.run_info().state == "stopped"
        done = _done(reader)
        assert set(before) <= set(done), "an attempt recorded before the stop is gone"
        for row in reader.problems():
            assert row.attempts == len(reader.attempts(row.id, state="done")), row.key
        # An attempt in flight at the stop stays pending, counted nowhere yet, for --resume to evaluate.
        assert all(a.finished_at is None for a in reader.attempts(state="pending"))
