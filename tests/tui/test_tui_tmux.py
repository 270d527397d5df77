"""The real terminal: `kernelfleet watch DIR` in a detached 80x24 tmux session, driven with `tmux send-keys` and
read with `tmux capture-pane` (skipped where tmux is missing)."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tui_store import controls

ROOT = Path(__file__).resolve().parents[2]
TMUX = shutil.which("tmux")

pytestmark = [pytest.mark.skipif(TMUX is None, reason="needs tmux"), pytest.mark.slow]


class Tmux:
    def __init__(self, socket: str):
        self.socket = socket

    def __call__(self, *args: str, check: bool = True) -> str:
        result = subprocess.run([TMUX, "-L", self.socket, *args], capture_output=True, text=True, timeout=30)
        if check and result.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {result.stderr}")
        return result.stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "watch")

    def wait_for(self, predicate, timeout: float = 60.0, what: str = "the screen") -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if predicate(text):
                return text
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; the screen:\n{text}")


@pytest.fixture
def tmux():
    session = Tmux(f"kf-watch-test-{os.getpid()}")
    yield session
    session("kill-server", check=False)


def test_watch_in_a_real_terminal(tmux, run_dir):
    command = f"{sys.executable} -m cli.main watch {run_dir}"
    tmux("-f", "/dev/null", "new-session", "-d", "-s", "watch", "-x", "80", "-y", "24", "-c", str(ROOT),
         "env", "TERM=xterm-256color", "COLORTERM=truecolor", *command.split())
    tmux("set-option", "-t", "watch", "remain-on-exit", "on")
    text = tmux.wait_for(lambda t: "cpu/silu_mul" in t, what="the problem grid")
    lines = text.splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
    assert "demo-run [running]" in lines[0] and "problems 5 active, 3 done / 12" in lines[0]
    row = next(line for line in lines if "cpu/row_rmsnorm" in line)
    assert "active" in row and "1.30x" in row and "0.58" in row and "█" in row
    assert "? help" in lines[-1] and "q quit" in lines[-1]  # the footer
    # `+` on the first row, then the detail of the second row.
    tmux("send-keys", "-t", "watch", "+")
    deadline = time.monotonic() + 10
    while controls(run_dir) != [("bump_priority", "L1/attention", "1")] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert controls(run_dir) == [("bump_priority", "L1/attention", "1")]
    tmux.wait_for(lambda t: "last control: bump_priority L1/attention 1" in t, what="the pending control")
    tmux("send-keys", "-t", "watch", "Down", "Enter")
    tmux.wait_for(lambda t: "T_sol ms" in t and "L1/conv1d" in t, what="the detail of L1/conv1d")
    tmux("send-keys", "-t", "watch", "Escape", "q")
    tmux.wait_for(lambda t: "L1/attention" not in t, what="the watcher to quit", timeout=15)
    assert controls(run_dir) == [("bump_priority", "L1/attention", "1")]  # quitting sent nothing
