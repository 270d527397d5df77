"""One orchestrator per run, with real processes: a second shell's `--resume` (or a new run in the same folder) is
refused with one line naming the holder while the first runs on untouched; watching and reporting stay allowed;
once the holder is gone (stopped, or killed with SIGKILL) `--resume` takes the run over."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from fleet_problems import write_config, write_problems
from fleet_runner import ROOT, read, start_run, wait_for

from core.store import RunReader

pytestmark = pytest.mark.slow


def _kernelfleet(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def _done(reader: RunReader) -> int:
    return len(reader.attempts(state="done"))


def _consistent(run_dir) -> None:
    """Every counter agrees with the attempts recorded, and no attempt is counted twice or failed by a stranger."""
    with RunReader(run_dir) as reader:
        for row in reader.problems():
            done = reader.attempts(row.id, state="done")
            assert row.attempts == len(done), row.key
            assert [a.note for a in reader.attempts(row.id)].count("seed") == 1, row.key
        for agent in reader.agents():
            assert agent.attempts == sum(1 for a in reader.attempts(state="done") if a.agent_id == agent.id)


def test_a_second_orchestrator_is_refused_while_the_first_runs_and_takes_over_once_it_is_gone(tmp_path):
    # One tuner on a space it cannot exhaust, however fast or slow the machine: every run goes on until it is stopped.
    write_problems(tmp_path / "problems", chunks=tuple(range(1, 257)))
    config = write_config(tmp_path / "fleet.toml", fleet={"tuner_agents": 1}, tuner={"trials_per_problem": 100_000},
                          evaluation={"verify_rounds": 0})
    run_dir = tmp_path / "run"
    log = tmp_path / "first.log"
    first = start_run(tmp_path / "problems", "--config", config, "--run-dir", run_dir, log=log)
    second = None
    try:
        wait_for(lambda: first.poll() is not None or (read(run_dir, _done) or 0) >= 2, 180, "two attempts")
        assert first.poll() is None, log.read_text()[-3000:]
        holder = f"pid {first.pid} on {socket.gethostname()}"
        for args in (("run", "--resume", run_dir, "--headless"),
                     ("run", tmp_path / "problems", "--config", config, "--run-dir", run_dir, "--headless")):
            refused = _kernelfleet(*args)
            assert refused.returncode == 2, refused
            assert refused.stdout == "" and refused.stderr.count("\n") == 1, refused.stderr
            assert refused.stderr.startswith(f"error: {run_dir}: the run is in use by {holder}"), refused.stderr
        report = _kernelfleet("report", run_dir)  # reading is always allowed
        assert report.returncode == 0 and "Problems" in report.stdout, report.stderr
        progress = read(run_dir, _done)
        wait_for(lambda: (read(run_dir, _done) or 0) > progress, 120, "the first run to go on after the refusals")
        first.send_signal(signal.SIGINT)
        assert first.wait(timeout=120) == 0, log.read_text()[-3000:]
        text = log.read_text()
        assert "Traceback" not in text and "is not pending" not in text, text[-3000:]
        assert read(run_dir, lambda r: r.run_info().state) == "stopped"
        _consistent(run_dir)

        # Stopped: --resume takes it; killed with SIGKILL: the next --resume takes the dead one's lock.
        second = start_run("--resume", run_dir, log=tmp_path / "second.log")
        stopped_at = read(run_dir, _done)
        wait_for(lambda: second.poll() is not None or (read(run_dir, _done) or 0) > stopped_at, 180,
                 "the resumed run's first attempt")
        assert second.poll() is None, (tmp_path / "second.log").read_text()[-3000:]
        os.killpg(second.pid, signal.SIGKILL)
        second.wait()
        second = start_run("--resume", run_dir, log=tmp_path / "third.log")
        wait_for(lambda: second.poll() is not None or "resumed:" in (tmp_path / "third.log").read_text(), 120,
                 "the run taken over after the kill")
        assert second.poll() is None, (tmp_path / "third.log").read_text()[-3000:]
        second.send_signal(signal.SIGINT)
        assert second.wait(timeout=120) == 0, (tmp_path / "third.log").read_text()[-3000:]
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    _consistent(run_dir)
    with RunReader(run_dir) as reader:
        assert reader.run_info().state == "stopped"
