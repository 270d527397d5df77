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
  s          cycle the grid's sort column (or click a column's header)
  b  w       to the best / worst problem (highest / lowest speedup)
  /          filter the grid on key or status (escape clears every filter)
  f  u  x    cycle the status / subset filter / only the bests beating T_b
  d          diffs of the problem's attempts (from the detail)
  n  p  t    next / previous attempt, side by side / unified (diff viewer)
  A          agents view (a / space: pause or resume the selected agent)
  l          fleet log     h  score histogram
  S          stop the run (asks first)
  escape     back          ?  this help
  {quit}

Controls are written to the run's store and applied within a tick; what
the orchestrator answers (and any other message) shows in the footer line."""
QUIT_WATCHER = "q          quit the watcher (the run goes on)"
QUIT_RUN = "q          quit: stops the run, which runs in this process (asks first)"


def keys_help(in_process: bool) -> str:
    """The key help; ``in_process``: the UI runs in the run's own process (`kernelfleet run`), so q stops it."""
    return KEYS_HELP.format(quit=QUIT_RUN if in_process else QUIT_WATCHER)


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "app.pop_screen", "close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 78; max-width: 100%; height: auto; max-height: 100%;
                                  border: round $accent; background: $panel; padding: 0 1; }
    HelpScreen Static { width: 100%; height: auto; }
    """

    def __init__(self, in_process: bool = False):
        super().__init__()
        self.in_process = in_process

    def compose(self) -> ComposeResult:
        with VerticalScroll():  # 80x24 shows it whole; a smaller terminal scrolls it
            yield Static(keys_help(self.in_process), markup=False)


STOP_QUESTION = ("Stop the run?\n\nThe orchestrator stops its agents and exits; the store stays and the run can be "
                 "resumed later.")
QUIT_QUESTION = ("Quit and stop the run?\n\nThe run runs in this process: quitting stops it cleanly (its best "
                 "attempts are re-verified first). The store stays; continue it with kernelfleet run --resume.")


class ConfirmStop(ModalScreen[bool]):
    """Asks before stopping the run: ``question`` says how (a stop control, or quitting the run's own process)."""

    BINDINGS = [Binding("y", "answer(True)", "stop the run"), Binding("n,escape", "answer(False)", "cancel")]
    DEFAULT_CSS = """
    ConfirmStop { align: center middle; }
    ConfirmStop > Vertical { width: 60; max-width: 100%; height: auto; border: thick $error;
                             background: $panel; padding: 1 2; }
    """

    def __init__(self, question: str = STOP_QUESTION):
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.question.replace("[", r"\[") + "\n\n[b]y[/b] stop    [b]n[/b] / escape cancel")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
