"""Modal dialogs: the stop-run confirmation and the key help."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS_HELP = """\
Keys (no mouse needed; ctrl+p opens the command palette)

  up/down, pgup/pgdn, home/end  move in a table
  enter      problem detail (in the detail: the selected attempt's diff)
  space      pause / resume the selected problem
  a          pause / resume the agent working on the selected problem
  +  -       raise / lower the problem's priority
  P          pin / unpin the problem (a * after its status)
  s          cycle the grid's sort column
  /          filter the grid on key or status (escape clears)
  d          diffs of the problem's attempts (from the detail)
  n  p       next / previous attempt in the diff viewer
  t          side by side / unified diff
  A          agents view (a / space: pause or resume the selected agent)
  l          fleet log     h  score histogram
  S          stop the run (asks first)
  escape     back          ?  this help
  q          quit the watcher (the run goes on)

Controls are written to the run's store; the orchestrator applies them
within a tick, and the result shows in the grid's status line and as a
notification."""


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "app.pop_screen", "close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 78; max-width: 100%; height: auto; max-height: 100%;
                                  border: round $accent; background: $panel; padding: 0 1; }
    HelpScreen Static { width: 100%; height: auto; }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():  # 80x24 shows it whole; a smaller terminal scrolls it
            yield Static(KEYS_HELP)


class ConfirmStop(ModalScreen[bool]):
    BINDINGS = [Binding("y", "answer(True)", "stop the run"), Binding("n,escape", "answer(False)", "cancel")]
    DEFAULT_CSS = """
    ConfirmStop { align: center middle; }
    ConfirmStop > Vertical { width: 60; max-width: 100%; height: auto; border: thick $error;
                             background: $panel; padding: 1 2; }
    """

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Stop the run?\n\nThe orchestrator stops its agents and exits; the store stays and the run "
                         "can be resumed later.\n\n[b]y[/b] stop    [b]n[/b] / escape cancel")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
