"""Every key's effect, driven through Textual's Pilot on the deterministic store: controls land in the store as
rows, screens open and close, the diff viewer steps and toggles, and applied controls show."""

import pytest
from textual.widgets import Input, Static

from core.store import RunStore
from tui.detail.screen import DetailScreen
from tui.dialogs import ConfirmStop, HelpScreen
from tui.diff.screen import DiffScreen
from tui.agents.screen import AgentsScreen
from tui.fleet.histogram import HistogramScreen
from tui.logs.screen import LogsScreen
from tui.logs.view import LogView
from tui.problems.model import column
from tui.problems.screen import ProblemsScreen
from tui_store import controls

pytestmark = pytest.mark.anyio


async def select(pilot, key):
    """Put the grid's cursor on ``key`` (with the filter, then closing it with enter)."""
    await pilot.press("slash", *key, "enter")
    screen = pilot.app.screen
    assert screen.grid.selected_key == key
    return screen


@pytest.mark.parametrize("keys, expected", [
    (["space"], [("pause_problem", "L1/attention", "")]),
    (["plus"], [("bump_priority", "L1/attention", "1")]),
    (["minus", "minus"], [("bump_priority", "L1/attention", "-1")] * 2),
    (["P"], [("pin_problem", "L1/attention", "")]),
    (["a"], []),  # no agent works on it: nothing is sent
    (["q"], []),  # quitting never stops the run
])
async def test_grid_keys_write_controls(make, run_dir, keys, expected):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        assert isinstance(app.screen, ProblemsScreen) and app.screen.grid.selected_key == "L1/attention"
        await pilot.press(*keys)
        await pilot.pause()
    assert controls(run_dir) == expected


async def test_toggles_follow_the_current_state(make, run_dir):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        await select(pilot, "cpu/cumsum")  # paused
        await pilot.press("space")
        await pilot.press("escape")
        await select(pilot, "L1/matmul_bias")  # pinned
        await pilot.press("P")
    assert controls(run_dir) == [("resume_problem", "cpu/cumsum", ""), ("unpin_problem", "L1/matmul_bias", "")]


async def test_agent_key_pauses_then_resumes_the_problems_agent(make, run_dir):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await select(pilot, "cpu/row_rmsnorm")
        await pilot.press("a")
        assert app.wait_controls()  # controls are written by the sender thread
        assert controls(run_dir) == [("pause_agent", "tuner-1", "")]
        # The orchestrator applies it: the agent is paused and leaves the problem.
        store = RunStore(run_dir)
        control = store.controls()[-1]
        store.update_agent(1, paused=True, state="paused", problem_id=None)
        store.mark_control_applied(control.id, "paused")
        store.close()
        app.poll_now()
        await pilot.pause()
        bar = str(screen.query_one("#gridbar", Static).render())
        assert "last control: pause_agent tuner-1: paused" in bar
        # tuner-2 still works on it; the next `a` pauses it, and once both left, `a` resumes the one we paused.
        await pilot.press("a")
        store = RunStore(run_dir)
        store.update_agent(2, paused=True, state="paused", problem_id=None)
        store.close()
        app.poll_now()
        await pilot.press("a")
    assert controls(run_dir) == [("pause_agent", "tuner-1", ""), ("pause_agent", "tuner-2", ""),
                                 ("resume_agent", "tuner-2", "")]


async def test_agents_view(make, run_dir):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("A")
        assert isinstance(app.screen, AgentsScreen)
        await pilot.press("a", "plus", "down", "down", "down", "space", "minus")  # llm-2 has no problem: no bump
        await pilot.press("escape")
        assert isinstance(app.screen, ProblemsScreen)
    assert controls(run_dir) == [("pause_agent", "tuner-1", ""), ("bump_priority", "cpu/row_rmsnorm", "1"),
                                 ("pause_agent", "llm-2", "")]


async def test_stop_asks_first(make, run_dir):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("S")
        assert isinstance(app.screen, ConfirmStop)
        await pilot.press("n")
        assert isinstance(app.screen, ProblemsScreen) and controls(run_dir) == []
        await pilot.press("S", "y")
        assert isinstance(app.screen, ProblemsScreen)
    assert controls(run_dir) == [("stop_run", "", "")]


async def test_sort_and_filter(make):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        grid = screen.grid
        assert grid.selected_key == "L1/attention"
        await pilot.press("s")  # priority, highest first
        assert "sort: priority" in str(screen.query_one("#gridbar", Static).render())
        assert grid._order[0].startswith("L2/")
        await pilot.press("s", "s", "s", "s")  # SOL, highest first
        assert grid._order[0] == "cpu/swiglu_11" or app.snapshot.problem(grid._order[0]).best_sol == max(
            p.best_sol or 0 for p in app.snapshot.problems)
        await pilot.press("slash")
        assert isinstance(app.focused, Input)
        await pilot.press(*"active")
        assert {app.snapshot.problem(k).status for k in grid._order} == {"active"}
        await pilot.press("q")  # typed into the filter, not quitting
        assert grid.row_count == 0 and app.is_running
        await pilot.press("escape")
        assert grid.row_count == 12 and app.focused is grid


async def test_detail_diff_stepping_and_toggle(make, run_dir):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        await select(pilot, "cpu/row_rmsnorm")
        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen)
        detail = app.screen
        assert detail.query_one("#workloads").row_count == 3
        assert detail.query_one("#attempts").row_count == 4
        await pilot.press("space", "plus")  # the detail's keys act on its problem
        await pilot.press("d")
        diff = app.screen
        assert isinstance(diff, DiffScreen)
        assert diff.view.current == 4 and not diff.view.split  # the newest (selected) attempt
        title = lambda: str(diff.query_one("#title", Static).render())  # noqa: E731
        assert "attempt #4 ← #3 (4/4)" in title() and "INCORRECT" in title()
        assert "max abs error" in str(diff.query_one("#reason", Static).render())
        await pilot.press("p")
        assert diff.view.current == 3 and "(3/4)" in title() and "PASSED · speedup 1.30x · SOL 0.58" in title()
        await pilot.press("p", "p", "p")
        assert diff.view.current == 1
        await pilot.press("n")
        assert diff.view.current == 2
        await pilot.press("t")
        assert diff.view.split and "side by side" in title()
        await pilot.press("t")
        assert not diff.view.split and "unified" in title()
        await pilot.press("escape")
        assert app.screen is detail
        await pilot.press("escape")
        assert isinstance(app.screen, ProblemsScreen)
    assert controls(run_dir) == [("pause_problem", "cpu/row_rmsnorm", ""), ("bump_priority", "cpu/row_rmsnorm", "1")]


async def test_other_screens_open_and_close(make):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        for key, kind in (("l", LogsScreen), ("h", HistogramScreen), ("question_mark", HelpScreen)):
            await pilot.press(key)
            assert isinstance(app.screen, kind)
            await pilot.press("escape")
            assert isinstance(app.screen, ProblemsScreen)


async def test_polling_reads_only_what_is_new(make, run_dir):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("l")
        log = app.screen.query_one(LogView)
        lines = len(log.lines)
        cursor = app.poller.attempt_cursor
        store = RunStore(run_dir)
        pending = store.begin_attempt(1, 1, {}, language="python", diff="")
        store.add_event("log", "hello from the test", agent_id=1, problem_id=1)
        store.update_problem(1, best_speedup=9.5, attempts=5)
        app.poll_now()
        assert app.poller.attempt_cursor == pending > cursor and pending in app.poller.pending_attempts
        assert app.snapshot.totals.attempts == 36
        store.finish_attempt(pending, status="PASSED", speedup=9.5, sol=0.9)
        store.close()
        app.poll_now()
        await pilot.pause()
        assert app.snapshot.totals.attempts == 37 and not app.poller.pending_attempts
        assert len(log.lines) == lines + 1 and "hello from the test" in log.lines[-1]
        await pilot.press("escape")
        grid = app.screen.grid
        assert grid._cells["cpu/row_rmsnorm"][column("speedup")] == "9.50x"


async def test_timed_polling_in_a_thread(make, run_dir):
    app = make(poll_s=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        store = RunStore(run_dir)
        store.update_problem(2, status="plateaued")
        store.close()
        for _ in range(100):
            await pilot.pause(0.02)
            if app.snapshot.problem_by_id(2).status == "plateaued":
                break
        assert app.polls >= 1
        key = app.snapshot.problem_by_id(2).key
        assert app.screen.grid._cells[key][column("status")].startswith("plateaued")


async def test_command_palette_lists_the_keys(make):
    app = make()
    async with app.run_test(size=(80, 24)):
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for title in ("Pause / resume problem", "Raise priority", "Pin / unpin problem", "Stop the run", "Filter"):
            assert title in titles


async def test_grid_repaints_a_changed_row_and_keeps_the_cursor_on_its_problem(make, run_dir):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        grid = app.screen.grid
        await pilot.press("down")
        assert grid.selected_key == "L1/conv1d"
        line = lambda key: grid.render_line(grid._order.index(key) - int(grid.scroll_y) + 1).text  # noqa: E731
        assert "9.50x" not in line("cpu/row_rmsnorm")
        store = RunStore(run_dir)
        store.update_problem(1, best_speedup=9.5)
        store.close()
        app.poll_now()
        await pilot.pause()
        assert "9.50x" in line("cpu/row_rmsnorm") and grid.selected_key == "L1/conv1d"
        await pilot.press("s", "s", "s", "s")  # speedup, highest first: the order changes, the cursor follows
        assert grid._order[0] == "cpu/row_rmsnorm" and grid.selected_key == "L1/conv1d"
