"""Which of the watcher's keys a help text leaves out: the Pilot test checks the help's text, the tmux test the help
as the terminal shows it."""

from __future__ import annotations

import re

from tui.agents.screen import AgentsScreen
from tui.app import WatchApp
from tui.detail.screen import DetailScreen
from tui.detail.table import LineTable
from tui.diff.screen import DiffScreen
from tui.fleet.histogram import HistogramScreen
from tui.logs.screen import LogsScreen
from tui.problems.grid import ProblemGrid
from tui.problems.screen import ProblemsScreen

LABELS = {"question_mark": "?", "slash": "/", "plus": "+", "minus": "-", "pageup": "pgup", "pagedown": "pgdn"}
BOUND = (WatchApp, ProblemsScreen, ProblemGrid, DetailScreen, LineTable, DiffScreen, AgentsScreen, LogsScreen,
         HistogramScreen)


def bound_keys() -> list[str]:
    """Every key bound in the watcher (the app, every screen, the grid and the tables), as the help writes it."""
    return sorted({LABELS.get(k, k) for kind in BOUND for b in kind.BINDINGS for k in b.key.split(",")})


def unlisted_keys(help_text: str) -> list[str]:
    """The bound keys that ``help_text`` does not list as a key: at the start of a line, or set off by two spaces,
    ", " or "/" (so the "a" of "(a * after" is not one)."""
    keys = bound_keys()
    assert {"?", "q", "S", "/", "home", "pgdn", "t"} <= set(keys)
    return [k for k in keys if not re.search(rf"(?:^|  |, |/){re.escape(k)}(?:  |,|/|$)", help_text, re.MULTILINE)]
