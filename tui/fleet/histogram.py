"""The score histogram screen (`h`): best SOL scores and best speedups over the fleet as text bars."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from core.report.figures import counted_sol, counted_speedup
from tui.fleet.model import SOL_EDGES, SPEEDUP_EDGES, speedup_label
from tui.formatting import histogram, plural
from tui.snapshot import Delta, Snapshot


def histogram_text(s: Snapshot, width: int = 30) -> str:
    # The values the fleet's figures count (core.report.figures), so "N with a score" is the header's N.
    sols = [counted_sol(p.best_sol) for p in s.problems]
    speedups = [counted_speedup(p.best_speedup) for p in s.problems]
    solved = sum(v is not None for v in sols)
    lines = [f"Best SOL score, {solved}/{plural(len(sols), 'problem')} with a score", ""]
    lines += histogram(sols, SOL_EDGES, width)
    with_speedup = sum(v is not None for v in speedups)
    lines += ["", f"Best speedup, {with_speedup}/{plural(len(speedups), 'problem')} with a speedup", ""]
    lines += histogram(speedups, SPEEDUP_EDGES, width, speedup_label)
    return "\n".join(lines)


class HistogramScreen(Screen):
    BINDINGS = [Binding("escape,h", "app.pop_screen", "back")]

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="histogram")
        yield Footer()

    def on_screen_resume(self) -> None:
        self.show(self.app.snapshot, None)  # the app keeps this screen: it missed the polls while hidden

    def show(self, snapshot: Snapshot, delta: Delta | None) -> None:
        self.query_one("#histogram", Static).update(histogram_text(snapshot))
