"""The real terminal: `kernelfleet watch DIR` in a detached 80x24 tmux session, driven with `tmux send-keys` and
read with `tmux capture-pane` (skipped where tmux is missing)."""

import os
import sys
import time
from pathlib import Path

import pytest

from tmux_session import TMUX, Tmux
from tui_store import controls

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.skipif(TMUX is None, reason="needs tmux"), pytest.mark.slow]


@pytest.fixture
def tmux():
    session = Tmux(f"kf-watch-test-{os.getpid()}")
    yield session
    session.kill()


def test_watch_in_a_real_terminal(tmux, run_dir):
    tmux.start([sys.executable, "-m", "cli.main", "watch", str(run_dir)], ROOT)
    text = tmux.wait_for(lambda t: "cpu/silu_mul" in t, what="the problem grid")
    lines = text.splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
    assert "demo-run [running]" in lines[0] and "problems 5 active, 3 done / 12" in lines[0]
    row = next(line for line in lines if "cpu/row_rmsnorm" in line)
    assert "active" in row and "1.30x" in row and "0.58" in row and "█" in row
    assert "? help" in lines[-1] and "q quit" in lines[-1]  # the footer
    # `+` on the first row, then the detail of the second row.
    tmux.send("+")
    deadline = time.monotonic() + 10
    while controls(run_dir) != [("bump_priority", "L1/attention", "1")] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert controls(run_dir) == [("bump_priority", "L1/attention", "1")]
    tmux.wait_for(lambda t: "last control: bump_priority L1/attention 1" in t, what="the pending control")
    tmux.send("Down", "Enter")
    tmux.wait_for(lambda t: "T_sol ms" in t and "L1/conv1d" in t, what="the detail of L1/conv1d")
    tmux.send("Escape")  # alone: ESC and q in one read are alt+q
    tmux.wait_for(lambda t: "sort: key" in t, what="the grid again")
    tmux.send("q")
    tmux.wait_for(lambda t: "L1/attention" not in t, what="the watcher to quit", timeout=15)
    assert controls(run_dir) == [("bump_priority", "L1/attention", "1")]  # quitting sent nothing
