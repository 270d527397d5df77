"""The watcher app: ``make_app(run_dir)`` attaches to a run's store, polls it with since-id cursors and writes
controls through :func:`core.store.submit_control`. Quitting the watcher never stops the run, except where the UI
runs in the run's own process (``in_process``, `kernelfleet run`): there `q` asks first, as `S` does."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import queue
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from core.errors import StoreRowError
from core.store import ControlError, RunReader, submit_control
from core.store.model import AgentRow, ProblemRow
from core.store.queries import Queries
from tui.agents.activity import Activity
from tui.agents.screen import AgentsScreen
from tui.controls import Control, agent_for_problem, agent_toggle, bump, control_line, pause_toggle, pin_toggle
from tui.detail.screen import DetailScreen
from tui.dialogs import QUIT_QUESTION, ConfirmStop, HelpScreen
from tui.diff.screen import DiffScreen
from tui.fleet.histogram import HistogramScreen
from tui.logs.screen import LOG_LINES, LogsScreen
from tui.problems.footer import KeyFooter, StatusMessage, with_key_footer
from tui.problems.model import GridRows, GridView
from tui.problems.screen import ProblemsScreen
from tui.snapshot import Clock, Delta, Poller, Snapshot

T = TypeVar("T")
S = TypeVar("S", bound=Screen)
PAGE_CACHE_KIB = 512  # each store connection's page cache

# The screens the app pushes, with Textual's Footer (a widget per key) swapped for a one-line KeyFooter.
Detail, Diff, Agents, Logs, Histogram = map(with_key_footer, (DetailScreen, DiffScreen, AgentsScreen, LogsScreen,
                                                               HistogramScreen))

# (title, help, action) for the command palette; actions run on the current screen, else on the app.
PALETTE = (
    ("Pause / resume problem", "space: pause or resume the selected problem", "pause"),
    ("Pause / resume agent", "a: pause or resume the agent of the selected problem", "agent"),
    ("Raise priority", "+: bump the selected problem's priority by +1", "bump(1)"),
    ("Lower priority", "-: bump the selected problem's priority by -1", "bump(-1)"),
    ("Pin / unpin problem", "P: pin or unpin the selected problem", "pin"),
    ("Sort", "s: cycle the grid's sort column", "sort"),
    ("Best problem", "b: the cursor to the problem with the highest speedup", "jump('best')"),
    ("Worst problem", "w: the cursor to the problem with the lowest speedup", "jump('worst')"),
    ("Filter", "/: filter the grid on key or status", "filter"),
    ("Status filter", "f: cycle the grid's status filter (open, active, ..., unrunnable)", "status_filter"),
    ("Subset filter", "u: cycle the grid's subset filter", "subset_filter"),
    ("Beats T_b filter", "x: only the problems whose best beats T_b, or all", "beats_filter"),
    ("Diffs", "d: the problem's attempts as diffs", "diff"),
    ("Next attempt", "n: the next attempt's diff", "step(1)"),
    ("Previous attempt", "p: the previous attempt's diff", "step(-1)"),
    ("Split / unified diff", "t: toggle side by side", "toggle"),
    ("Agents", "A: the agents view", "app.agents"),
    ("Log", "l: the fleet's event log", "app.logs"),
    ("Histogram", "h: score histograms", "app.histogram"),
    ("Help", "?: keys", "app.help"),
    ("Stop the run", "S: stop the run (asks first)", "app.stop_run"),
    ("Quit", "q: quit the watcher (the run goes on; in kernelfleet run it stops the run, asking first)",
     "app.quit"),
)
MESSAGE_S = {"information": 5.0, "warning": 8.0, "error": 10.0}  # how long a message stays in the footer line


class WatchApp(App):
    TITLE = "kernelfleet watch"
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help"),
        Binding("S", "stop_run", "stop run"),
        Binding("A", "agents", "agents", show=False),
        Binding("l", "logs", "log", show=False),
        Binding("h", "histogram", "histogram", show=False),
    ]
    CSS = "Screen { layers: base; }"

    def __init__(self, run_dir: str | Path, *, poll_s: float | None = 0.5, clock: Clock | None = None,
                 in_process: bool = False):
        super().__init__()
        self.run_dir = Path(run_dir)
        self.in_process = in_process
        self.reader = RunReader(self.run_dir)  # the poller's (its thread), under self.lock
        self.ui_reader = RunReader(self.run_dir)  # the screens' own reads on the main thread: never wait on a poll
        for reader in (self.reader, self.ui_reader):
            # The watcher reads new rows and small tables: SQLite's default 2 MiB page cache per connection only
            # fills with pages of old events, never read again (about 0.2 MiB a minute on the UI bench).
            reader.conn.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
        self.lock = threading.Lock()
        self.poll_s = poll_s
        self.poller = Poller(self.reader, self.run_dir.resolve().name, clock, event_limit=LOG_LINES)
        snapshot, delta = self.poller.poll()
        self.grid_model = GridRows()  # the grid's rows, formatted again only where a problem changed
        self.grid_model.read_reasons(snapshot, delta.events, self.reader)
        self.snapshot: Snapshot = snapshot
        self.events: deque = deque(delta.events, maxlen=LOG_LINES)
        self.activity = Activity()  # what each agent does now, for the grid's activity panel
        self.activity.add(delta)
        self.status: StatusMessage | None = None  # the message the footer line shows now
        self._status_timer: Any = None
        self.paused_agents: dict[str, str] = {}  # problem key -> the agent `a` paused from it
        self.sent: list[int] = []  # control ids this watcher wrote
        self.polls = 0
        self._polling = False
        self.grid_view = GridView()  # the grid's sort and filters: the poll thread prepares its rows
        self._outbox: queue.Queue[Control | None] = queue.Queue()  # controls for the sender thread, in order
        self._sender: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main_context: contextvars.Context | None = None  # the main loop's context (Textual's active app)
        self._kept: dict[type[Screen], Screen] = {}  # screens made once and reused (see _kept_screen)

    # ------------------------------------------------------------ reading

    def read(self, query: Callable[[Queries], T]) -> T:
        """Run ``query`` on the store from the main thread, on its own connection (a poll in progress in the
        poller's thread does not hold it up: WAL readers do not wait on each other or on the writer)."""
        return query(self.ui_reader)

    def grid_rows(self, snapshot: Snapshot, view: GridView) -> list:
        """The grid's rows for ``snapshot``: the ones the poll thread prepared when they fit, else computed."""
        return self.grid_model.rows(snapshot, view)

    def on_mount(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._main_context = contextvars.copy_context()
        self.push_screen(ProblemsScreen())
        if self.poll_s:
            self.set_interval(self.poll_s, self._tick)
        # Keep what start-up made (Textual, the app, the grid: ~50k objects) out of the collector's full passes,
        # which otherwise stall a key for 30-50 ms now and then on a busy run; unfrozen on quit.
        self.call_after_refresh(gc.freeze)

    def on_unmount(self) -> None:
        if self._sender is not None:  # controls already asked for are still sent: quitting loses none
            self._outbox.put(None)
            self._sender.join(timeout=15)
        with self.lock:
            self.reader.close()
        self.ui_reader.close()
        gc.unfreeze()

    def _tick(self) -> None:
        if self._polling:
            return
        self._polling = True
        self.run_worker(self._poll_in_thread, thread=True, group="poll", exit_on_error=False)

    def _poll_in_thread(self) -> None:
        try:
            with self.lock:
                snapshot, delta = self.poller.poll()
                self.grid_model.read_reasons(snapshot, delta.events, self.reader)
        except (sqlite3.Error, StoreRowError) as exc:  # the screen stays, with the last good view and the reason
            self.call_from_thread(self._poll_failed, exc)
            return
        # The grid's sorting, filtering and formatting happen here too: the main thread only updates widgets.
        self.grid_model.rows(snapshot, self.grid_view)
        self.call_from_thread(self.apply, snapshot, delta)

    def _poll_failed(self, exc: Exception) -> None:
        self._polling = False
        self.notify(f"reading the store failed: {exc}", severity="warning")

    def poll_now(self) -> None:
        """Poll on this thread and apply the result (tests, and right after sending a control)."""
        with self.lock:
            snapshot, delta = self.poller.poll()
            self.grid_model.read_reasons(snapshot, delta.events, self.reader)
        self.apply(snapshot, delta)

    def apply(self, snapshot: Snapshot, delta: Delta) -> None:
        self._polling = False
        self.polls += 1
        self.snapshot = snapshot
        self.events.extend(delta.events)
        self.activity.add(delta)
        for control in delta.applied:
            if control.id in self.sent:
                self.notify(control_line(control), title="applied")
        for screen in self.screen_stack:
            show = getattr(screen, "show", None)
            if show is not None:
                show(snapshot, delta)

    # ------------------------------------------------------------ messages

    def notify(self, message: str, *, title: str = "", severity: str = "information", timeout: float | None = None,
               markup: bool = True) -> None:
        """Show ``message`` in the footer line of every screen for a few seconds, instead of as a toast (which
        covers the grid's right half). The text is shown as it is: ``markup`` is ignored."""
        self.status = StatusMessage(f"{title}: {message}" if title else str(message), severity)
        if self._status_timer is not None:
            self._status_timer.stop()
        self._status_timer = self.set_timer(timeout or MESSAGE_S.get(severity, 5.0), self.clear_status)
        self._refresh_footers()

    def clear_status(self) -> None:
        self.status = None
        self._status_timer = None
        self._refresh_footers()

    def _refresh_footers(self) -> None:
        for screen in self.screen_stack:
            for footer in screen.query(KeyFooter):
                footer.refresh()

    # ------------------------------------------------------------ controls

    def send(self, control: Control) -> None:
        """Queue ``control`` for the sender thread, which writes it to the store (a write may wait on the
        orchestrator's lock: never on the main thread) in order, then says "sent"; the poll says "applied"."""
        if self._sender is None:
            self._sender = threading.Thread(target=self._send_in_thread, name="kf-watch-controls", daemon=True)
            self._sender.start()
        self._outbox.put(control)

    def wait_controls(self, timeout: float = 10.0) -> bool:
        """Block until every queued control is written (tests); False on timeout."""
        q = self._outbox
        with q.all_tasks_done:
            return q.all_tasks_done.wait_for(lambda: not q.unfinished_tasks, timeout)

    def _send_in_thread(self) -> None:
        while True:
            control = self._outbox.get()
            try:
                if control is None:
                    return
                try:
                    control_id = submit_control(self.run_dir, control.command, control.target, control.value)
                except (ControlError, sqlite3.Error) as exc:
                    self._on_main(self.notify, f"control not sent: {exc}", severity="error")
                    continue
                self.sent.append(control_id)  # before any poll can see it applied
                self._on_main(self._control_sent, control)
            finally:
                self._outbox.task_done()

    def _on_main(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Run ``fn`` on the main thread soon, without waiting for it (the main thread may be joining us)."""
        loop, context = self._loop, self._main_context
        if loop is None or context is None:
            return
        try:
            # In the app's context: what ``fn`` starts (a message's timer) must see Textual's active app.
            loop.call_soon_threadsafe(lambda: fn(*args, **kwargs), context=context.copy())
        except RuntimeError:  # the loop is closed: the watcher has quit
            pass

    def _control_sent(self, control: Control) -> None:
        value = "" if control.value is None else f" {control.value:+d}"
        state = self.snapshot.run.state if self.snapshot.run else "?"
        note = "" if state in ("starting", "running") else f" (the run is {state}: it applies when resumed)"
        self.notify(f"sent {control.command} {control.target}{value}{note}", timeout=3)

    def _need(self, problem: ProblemRow | None) -> bool:
        if problem is None:
            self.notify("no problem selected", severity="warning")
        return problem is not None

    def toggle_pause(self, problem: ProblemRow | None) -> None:
        if self._need(problem):
            self.send(pause_toggle(problem))

    def toggle_pin(self, problem: ProblemRow | None) -> None:
        if self._need(problem):
            self.send(pin_toggle(problem))

    def bump(self, problem: ProblemRow | None, by: int) -> None:
        if self._need(problem):
            self.send(bump(problem, by))

    def toggle_agent(self, agent: AgentRow | None) -> None:
        if agent is None:
            self.notify("no agent selected", severity="warning")
            return
        self.send(agent_toggle(agent))

    def toggle_agent_of(self, problem: ProblemRow | None) -> None:
        if not self._need(problem):
            return
        agent = agent_for_problem(self.snapshot, problem, self.paused_agents)
        if agent is None:
            self.notify(f"no agent is working on {problem.key}", severity="warning")
            return
        if not agent.paused:
            self.paused_agents[problem.key] = agent.name
        self.toggle_agent(agent)

    # ------------------------------------------------------------ screens

    def _kept_screen(self, kind: type[S]) -> S:
        """The one instance of ``kind``, made and installed on first use. Installed screens stay mounted when
        popped: showing one again mounts no widgets (new widgets cost a stylesheet pass each, and an lru_cache in
        Textual's StylesCache keeps the rendered lines of up to 1024 removed widgets alive). Each one catches up
        with the run when shown."""
        screen = self._kept.get(kind)
        if screen is None:
            screen = self._kept[kind] = kind()
            self.install_screen(screen, kind.__name__)
        return screen  # type: ignore[return-value]

    def open_detail(self, key: str) -> None:
        detail = self._kept_screen(Detail)
        detail.load(key)
        if detail not in self.screen_stack:
            self.push_screen(detail)

    def open_diff(self, key: str, attempt_ids: tuple[int, ...], start: int | None) -> None:
        self.push_screen(Diff(key, attempt_ids, start))

    def _push_once(self, kind: type[Screen], make: Callable[[], Screen]) -> None:
        if isinstance(self.screen, kind):
            self.pop_screen()
            return
        screen = make()
        if screen not in self.screen_stack:
            self.push_screen(screen)

    def action_agents(self) -> None:
        self._push_once(AgentsScreen, lambda: self._kept_screen(Agents))

    def action_logs(self) -> None:
        self._push_once(LogsScreen, lambda: self._kept_screen(Logs))

    def action_histogram(self) -> None:
        self._push_once(HistogramScreen, lambda: self._kept_screen(Histogram))

    def action_help(self) -> None:
        self._push_once(HelpScreen, lambda: HelpScreen(self.in_process))

    async def action_quit(self) -> None:
        """Quit the watcher; in the run's own process that stops the run, so it asks first."""
        if not self.in_process:
            self.exit()
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.exit()

        if not isinstance(self.screen, ConfirmStop):
            self.push_screen(ConfirmStop(QUIT_QUESTION), answered)

    def action_stop_run(self) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self.send(Control("stop_run"))

        self.push_screen(ConfirmStop(), answered)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for title, help_text, action in PALETTE:
            name = action.split("(")[0]
            target: Any = self if action.startswith("app.") else screen
            if action.startswith("app.") or hasattr(screen, f"action_{name}"):
                yield SystemCommand(title, help_text, lambda a=action, t=target: self.call_later(t.run_action, a))


def make_app(run_dir: str | Path, *, poll_s: float | None = 0.5, clock: Clock | None = None,
             in_process: bool = False) -> WatchApp:
    """The watcher for ``run_dir``; ``poll_s=None`` polls only when asked (tests), ``clock`` fixes "now";
    ``in_process``: the UI runs in the run's own process (`kernelfleet run`), where quitting stops the run."""
    return WatchApp(run_dir, poll_s=poll_s, clock=clock, in_process=in_process)
