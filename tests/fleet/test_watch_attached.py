"""`kernelfleet watch` in a real terminal (tmux), attached to a run started by another process: a pause and a
priority change made with the watcher's keys take effect in the run."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest
from fleet_problems import write_config, write_problems
from fleet_runner import ROOT, read, start_run, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]


def test_watcher_keys_pause_and_reprioritize_a_running_run(tmp_path):
    write_problems(tmp_path / "problems", chunks=tuple(range(1, 257)))  # tuning that lasts until the test ends
    config = write_config(tmp_path / "fleet.toml", fleet={"tuner_agents": 1}, tuner={"trials_per_problem": 40},
                          planner={"tick_s": 0.3})
    run_dir = tmp_path / "run"
    run = start_run(tmp_path / "problems", "--config", config, "--run-dir", run_dir, log=tmp_path / "run.log")
    socket = f"kf-watch-{os.getpid()}"
    tmux = ["tmux", "-L", socket]

    def screen() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True).stdout

    try:
        wait_for(lambda: read(run_dir, lambda r: r.problems() and r.run_info().state == "running"), 120, "the run")
        subprocess.run([*tmux, "new-session", "-d", "-x", "120", "-y", "30",
                        f"cd {ROOT} && {sys.executable} -m cli.main watch {run_dir}"], check=True)
        wait_for(lambda: "cpu/scaled_relu" in screen(), 60, "the grid")
        # The grid starts on the first problem by key: cpu/row_rmsnorm. Pause it, then raise the other's priority.
        subprocess.run([*tmux, "send-keys", "space"], check=True)
        subprocess.run([*tmux, "send-keys", "Down"], check=True)
        subprocess.run([*tmux, "send-keys", "+"], check=True)

        def applied():
            rows = read(run_dir, lambda r: [c for c in r.controls() if c.applied_at])
            return rows if rows and len(rows) >= 2 else None

        controls = wait_for(applied, 30, "both controls applied by the run")
        assert [(c.command, c.target) for c in controls] == [("pause_problem", "cpu/row_rmsnorm"),
                                                             ("bump_priority", "cpu/scaled_relu")]
        problems = read(run_dir, lambda r: {p.key: p for p in r.problems()})
        assert problems["cpu/row_rmsnorm"].paused and problems["cpu/row_rmsnorm"].status == "paused"
        assert problems["cpu/scaled_relu"].priority == 1
        wait_for(lambda: "paused" in screen(), 10, "the pause on the watcher's screen")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGTERM)
            run.wait(timeout=60)
