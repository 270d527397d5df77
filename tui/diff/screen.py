"""The diff viewer (`d` from a problem's detail): `n` / `p` step through the problem's attempts, `t` toggles
unified / side by side; each attempt's status, speedup and SOL score in the title line."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from core.store.model import AttemptRow
from tui.diff.model import DiffView, attempt_title
from tui.diff.render import split, unified
from tui.snapshot import Delta, Snapshot


class DiffScreen(Screen):
    BINDINGS = [
        Binding("escape,d", "app.pop_screen", "back"),
        Binding("n", "step(1)", "next"),
        Binding("p", "step(-1)", "previous"),
        Binding("t", "toggle", "split/unified"),
    ]
    DEFAULT_CSS = """
    DiffScreen #title { height: auto; padding: 0 1; background: $boost; text-style: bold; }
    DiffScreen #reason { height: auto; max-height: 2; padding: 0 1; color: $text-muted; }
    DiffScreen #body { height: 1fr; }
    """

    def __init__(self, key: str, attempt_ids: tuple[int, ...], start: int | None = None):
        super().__init__()
        self.key = key
        index = attempt_ids.index(start) if start in attempt_ids else len(attempt_ids) - 1
        self.view = DiffView(tuple(attempt_ids), max(0, index))
        self.cache: dict[int, AttemptRow] = {}
        self.problem_id = getattr(self.app.snapshot.problem(key), "id", None)

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield Static(id="reason")
        with VerticalScroll(id="body"):
            yield Static(id="diff")
        yield Footer()

    def on_mount(self) -> None:
        self.render_view()
        self.query_one("#body").focus()

    def attempt(self, attempt_id: int) -> AttemptRow | None:
        if attempt_id not in self.cache:
            row = self.app.read(lambda r: r.attempt(attempt_id))
            if row is None:
                return None
            self.cache[attempt_id] = row
        return self.cache[attempt_id]

    def render_view(self) -> None:
        attempt_id = self.view.current
        attempt = self.attempt(attempt_id) if attempt_id is not None else None
        if attempt is None:
            self.query_one("#title", Static).update(f"{self.key}: no attempts")
            return
        mode = "side by side" if self.view.split else "unified"
        title = f"{self.key} · " + attempt_title(attempt, self.view.index, len(self.view.attempt_ids),
                                                 self.app.snapshot) + f" · {mode}"
        self.query_one("#title", Static).update(title)
        reason = attempt.note or ""
        if attempt.reason and attempt.status != "PASSED":
            reason = (reason + " · " if reason else "") + attempt.reason
        self.query_one("#reason", Static).update(reason.replace("\n", " ")[:300])
        self.query_one("#diff", Static).update(split(attempt.diff) if self.view.split else unified(attempt.diff))

    def action_step(self, by: int) -> None:
        view = self.view.step(by)
        if view != self.view:
            self.view = view
            self.render_view()
            self.query_one("#body", VerticalScroll).scroll_home(animate=False)

    def action_toggle(self) -> None:
        self.view = self.view.toggled()
        self.render_view()

    def show(self, snapshot: Snapshot, delta: Delta | None) -> None:
        if delta is None:
            return
        refresh = False
        for a in delta.attempts:
            if a.problem_id != self.problem_id:
                continue
            if a.id in self.cache:
                self.cache[a.id] = a
                refresh = refresh or a.id == self.view.current
            elif a.id not in self.view.attempt_ids:
                self.view = DiffView(self.view.attempt_ids + (a.id,), self.view.index, self.view.split)
                refresh = True
        if refresh:
            self.render_view()
