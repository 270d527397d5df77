"""A new user's first look, in a real 80x24 terminal: `kernelfleet run --device cpu` (the UI in the same process) on
two small CPU problems in a detached tmux session, driven with the steps of bench/screens/capture.sh (without
waiting for the seeds' results): the grid, `?` (the key help), enter (the first problem's detail), then q (and y
where it asks), which stops the run cleanly."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest

from key_help import unlisted_keys
from tmux_session import TMUX, Tmux

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ("cpu/row_rmsnorm", "cpu/scaled_relu")

pytestmark = [pytest.mark.skipif(TMUX is None, reason="needs tmux"), pytest.mark.slow]


def fleet_problems():
    """tests/fleet/fleet_problems.py (the CPU problems with tunable pytorch seeds), which is not on this folder's
    path."""
    module = sys.modules.get("fleet_problems")
    if module is None:
        spec = importlib.util.spec_from_file_location("fleet_problems", ROOT / "tests" / "fleet" / "fleet_problems.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


@pytest.fixture
def tmux():
    session = Tmux(f"kf-80x24-test-{os.getpid()}", session="run")
    yield session
    session.kill()


def assert_fits(text: str) -> list[str]:
    lines = text.splitlines()
    assert len(lines) == 24 and all(len(line) <= 80 for line in lines), text
    return lines


def assert_footer_keeps_quit_help_stop(footer: str) -> None:
    for key in (" q quit ", " ? help ", " S stop run "):
        assert key in footer, footer


def test_a_cpu_run_at_80x24_shows_the_grid_the_help_and_a_detail(tmp_path, tmux):
    problems = fleet_problems()
    problems.write_problems(tmp_path / "problems", chunks=tuple(range(1, 257)))  # tuning lasts past the test
    config = problems.write_config(tmp_path / "fleet.toml", fleet={"tuner_agents": 1},
                                   tuner={"trials_per_problem": 40})
    script = ('"$0" -m cli.main run "$1/problems" --config "$2" --run-dir "$1/cpu-demo" --device cpu; '
              'echo $? > "$1/exit-status"')
    tmux.start(["sh", "-c", script, sys.executable, str(tmp_path), str(config)], ROOT)

    grid = assert_fits(tmux.wait_for(lambda t: all(p in t for p in PROBLEMS), 60, "the problem grid"))
    assert grid[0].startswith(" cpu-demo [") and "/ 2 · attempts" in grid[0], grid[0]
    assert grid[1].startswith(" CPU "), grid[1]  # the header names the device
    assert grid[3].split() == ["problem", "pri", "status", "ag", "att", "best", "SOL", "chg"]
    assert [line.split()[0] for line in grid[4:6]] == list(PROBLEMS)  # sorted by key
    assert_footer_keeps_quit_help_stop(grid[-1])

    tmux.send("?")
    help_screen = tmux.wait_for(lambda t: "Keys (no mouse needed" in t and "quit: stops the run" in t, 20, "the help")
    assert_fits(help_screen)
    assert "╰" in help_screen.splitlines()[-1]  # the whole help fits: its box closes on the last line
    assert unlisted_keys(help_screen) == []
    tmux.send("Escape")
    tmux.wait_for(lambda t: "sort: key" in t, 20, "the grid again")

    tmux.send("Enter")  # on the first row
    tmux.wait_for(lambda t: "cpu/row_rmsnorm [" in t and "T_sol ms" in t, 20, "the detail of cpu/row_rmsnorm")
    # The detail follows the run: its workloads show once their baselines are measured.
    detail = assert_fits(tmux.wait_for(lambda t: " rows=256 " in t and " rows=1024 " in t, 60, "the workloads"))
    assert detail[0].lstrip().startswith("cpu/row_rmsnorm [")
    workloads = [line.split()[:3] for line in detail if " rows=" in line]
    assert [w[:2] for w in workloads] == [["0", "rows=256"], ["1", "rows=1024"]]
    assert all(float(w[2]) > 0 for w in workloads)  # T_b ms
    # The planner's and the log's panes share the bottom rows, split by one divider column.
    top = next(i for i, line in enumerate(detail) if "┐" in line)
    column = detail[top].index("┐")
    for line in detail[top + 1:-1]:
        assert line[column] == "▕", "\n".join(detail)
    assert detail[-1].startswith(" esc back ")
    assert_footer_keeps_quit_help_stop(detail[-1])

    tmux.send("Escape")
    tmux.wait_for(lambda t: "sort: key" in t, 20, "the grid again")
    tmux.send("q")
    # With the UI in the run's process (make_app(in_process=True) in cli/run_cmd.py) q asks first; y stops the run.
    status = tmp_path / "exit-status"
    deadline = time.monotonic() + 10
    while not status.exists() and time.monotonic() < deadline:
        if "Quit and stop the run?" in tmux.screen():
            tmux.send("y")
            break
        time.sleep(0.2)
    deadline = time.monotonic() + 30
    while not (status.exists() and status.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status.exists() and status.read_text().strip() == "0", tmux.screen()
