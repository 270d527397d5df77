"""What keeps the watcher's memory flat and its screen switches cheap on a long, busy run: bounded logs drawn only
where visible, one strip cached per grid row, screens made once and refilled, a one-widget footer."""

import pytest
from textual.app import App

from core.store import RunStore
from tui.detail.screen import DetailScreen
from tui.logs.screen import LOG_LINES, LogsScreen
from tui.logs.view import LogView
from tui.problems.footer import KeyFooter
from key_help import unlisted_keys
from tui_store import controls

pytestmark = pytest.mark.anyio


class OneLog(App):
    def compose(self):
        yield LogView(5)


async def test_log_view_keeps_the_last_lines_as_text_and_follows_the_end():
    app = OneLog()
    async with app.run_test(size=(40, 3)) as pilot:
        log = app.query_one(LogView)
        log.write_lines(f"line {i}" for i in range(4))
        log.write_lines(["two\nparts", "tab\there\x07"])
        assert list(log.lines) == ["line 2", "line 3", "two", "parts", "tab     here"]
        await pilot.pause()
        assert log.scroll_y == log.max_scroll_y > 0  # following the end
        assert [log.render_line(y).text.rstrip() for y in range(3)] == ["two", "parts", "tab     here"]
        log.scroll_home(animate=False, immediate=True)
        log.write_lines(["more"])  # scrolled away from the end: the view stays where it is
        await pilot.pause()
        assert log.scroll_y == 0


async def test_grid_caches_one_strip_per_row_however_often_rows_change(make, run_dir):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        grid = app.screen.grid
        store = RunStore(run_dir)
        for n in range(30):  # a row's cells change at every poll, the cursor moves, the order changes
            store.update_problem(1 + n % 3, attempts=100 + n)
            app.poll_now()
            await pilot.press("down" if n % 2 else "s")
        store.close()
        assert 0 < len(grid._strips) <= grid.row_count


async def test_detail_is_one_screen_refilled_for_each_problem(make, run_dir):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("slash", *"row_rms", "enter", "enter")
        detail = app.screen
        assert isinstance(detail, DetailScreen) and detail.key == "cpu/row_rmsnorm"
        assert detail.query_one("#attempts").row_count == 4 and detail.selected_attempt() == 4
        assert "[active]" in str(detail.query_one("#summary").render())  # shown as text, not read as markup
        await pilot.press("escape", "escape", "slash", *"gelu", "enter", "enter")  # L2/gelu: no attempts
        assert app.screen is detail and detail.key == "L2/gelu"
        assert detail.query_one("#attempts").row_count == 0 and detail.selected_attempt() is None
        lines = list(detail.query_one(LogView).lines)  # its own events only, none left from the first problem
        assert lines[0].endswith("SOL gap (2)") and not any("SOL gap (0)" in line for line in lines)
        assert detail.attempts == {}
        assert "L2/gelu [waiting]" in str(detail.query_one("#summary").render())
        await pilot.press("space")  # acts on the problem shown now
    assert controls(run_dir) == [("pause_problem", "L2/gelu", "")]


async def test_log_screen_catches_up_with_what_came_while_hidden(make, run_dir):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("l")
        logs = app.screen
        log = logs.query_one(LogView)
        before = len(log.lines)
        await pilot.press("escape")
        store = RunStore(run_dir)
        for k in range(3):
            store.add_event("log", f"while hidden {k}", agent_id=1, problem_id=1)
        store.close()
        app.poll_now()
        assert len(log.lines) == before  # hidden: nothing written
        await pilot.press("l")
        assert app.screen is logs and isinstance(logs, LogsScreen)
        assert len(log.lines) == before + 3 and log.lines[-1].endswith("while hidden 2")
        assert log.lines.maxlen == LOG_LINES


async def test_footer_draws_the_screens_keys_on_one_line_and_a_click_presses_one(make, run_dir):
    app = make()
    async with app.run_test(size=(120, 24)) as pilot:
        footer = app.screen.query_one(KeyFooter)
        line = footer.render_line(0).text
        assert line.startswith(" ⏎ detail  b best  w worst  space pause ") and line.rstrip().endswith("^p palette")
        assert not footer.children
        start = line.index(" + prio+")
        await pilot.click(KeyFooter, offset=(start + 1, 0))
        assert app.wait_controls()
        await pilot.pause()
        line = footer.render_line(0).text  # the message takes the keys' place for a while, not the grid's
        assert line.startswith(" sent bump_priority L1/attention +1 ") and line.rstrip().endswith("^p palette")
        app.clear_status()
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen.query_one(KeyFooter).render_line(0).text.startswith(" esc back  d diffs ")
    assert controls(run_dir) == [("bump_priority", "L1/attention", "1")]


async def test_at_80x24_help_quit_and_stop_stay_in_the_footer_and_help_lists_every_key(make):
    from textual.widgets import Static

    from tui.dialogs import HelpScreen, keys_help

    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        line = app.screen.query_one(KeyFooter).render_line(0).text
        assert len(line) <= 80 and " q quit  ? help  S stop run ▏^p palette" in line, line
        start = line.index(" ? help")
        await pilot.click(KeyFooter, offset=(start + 1, 0))
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        shown = app.screen.query_one(Static)
        assert shown.region.width >= 70 and shown.region.height == len(keys_help(False).splitlines())
    assert unlisted_keys(keys_help(False)) == [] and unlisted_keys(keys_help(True)) == []


async def test_kept_screens_catch_up_when_shown_again(make, run_dir):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("A")
        agents = app.screen
        await pilot.press("escape")
        store = RunStore(run_dir)
        store.update_agent(4, state="working", problem_id=5)
        store.close()
        app.poll_now()
        await pilot.press("A")
        assert app.screen is agents
        assert agents._cells["llm-2"][2:4] == ("working", app.snapshot.problem_by_id(5).key)
