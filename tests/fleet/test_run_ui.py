"""`kernelfleet run` without --headless, in a real terminal (tmux): the UI shows the run's problems while the core
works in the same process, q asks first, and closing the UI stops the run cleanly."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
from fleet_problems import write_config, write_problems
from fleet_runner import ROOT, read, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]


def test_run_shows_the_ui_and_quitting_it_stops_the_run(tmp_path):
    write_problems(tmp_path / "problems")
    config = write_config(tmp_path / "fleet.toml", fleet={"tuner_agents": 1}, tuner={"trials_per_problem": 40})
    run_dir, done = tmp_path / "run", tmp_path / "exit-status"
    socket = f"kf-run-{os.getpid()}"
    tmux = ["tmux", "-L", socket]
    command = (f"cd {ROOT} && {sys.executable} -m cli.main run {tmp_path / 'problems'} --config {config} "
               f"--run-dir {run_dir}; echo $? > {done}")
    subprocess.run([*tmux, "new-session", "-d", "-x", "100", "-y", "30", command], check=True)

    def screen() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True).stdout

    try:
        wait_for(lambda: "cpu/row_rmsnorm" in screen() and "cpu/scaled_relu" in screen(), 120, "the problem grid")
        wait_for(lambda: (read(run_dir, lambda r: r.attempt_count()) or 0) >= 2, 120, "attempts while the UI is up")
        subprocess.run([*tmux, "send-keys", "q"], check=True)
        wait_for(lambda: "Quit and stop the run?" in screen(), 30, "q to ask first (the run is in this process)")
        assert not done.exists()
        subprocess.run([*tmux, "send-keys", "y"], check=True)
        wait_for(done.exists, 60, "the run to exit")
        time.sleep(0.2)
        assert done.read_text().strip() == "0"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    assert read(run_dir, lambda r: r.run_info().state) == "stopped"
    assert any("the UI was closed" in e.message for e in read(run_dir, lambda r: r.events(kind="run")))
