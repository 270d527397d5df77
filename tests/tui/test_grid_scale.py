"""The grid at SOL-ExecBench's scale (issue 36): 235 problems with attempts in a real store, polled by the real app.
A poll that changes one problem formats that problem's row alone and draws it only when it is on screen; a poll
that changes nothing, a second later, formats and draws nothing. The refresh time is in bench/tui_grid_235.md."""

import pytest

import tui.problems.model
from core.store import RunReader, RunStore
from tui.app import make_app
from tui.problems.grid import ProblemGrid
from tui_store import NOW, build_scale_store

pytestmark = pytest.mark.anyio


@pytest.fixture
def scale_dir(tmp_path):
    return build_scale_store(tmp_path / "sol-run")


@pytest.fixture
def work(monkeypatch):
    """The keys of the rows formatted (cells made) and drawn (a line rendered) since the last ``clear()``."""

    class Work:
        formatted: list[str] = []
        drawn: list[str] = []

        def clear(self):
            self.formatted, self.drawn = [], []

    work = Work()
    work.clear()
    problem_cells, line = tui.problems.model.problem_cells, ProblemGrid._line

    def counting_cells(p, *args, **kwargs):
        work.formatted.append(p.key)
        return problem_cells(p, *args, **kwargs)

    def counting_line(grid, texts, *args, **kwargs):
        if texts and texts[0] != "problem":  # not the header
            work.drawn.append(texts[0])
        return line(grid, texts, *args, **kwargs)

    monkeypatch.setattr(tui.problems.model, "problem_cells", counting_cells)
    monkeypatch.setattr(ProblemGrid, "_line", counting_line)
    return work


def update_problem(run_dir, key: str, **fields) -> None:
    store = RunStore(run_dir)
    with RunReader(run_dir) as reader:
        store.update_problem(reader.problem_by_key(key).id, **fields)
    store.close()


def line_of(grid: ProblemGrid, key: str) -> str:
    return grid.render_line(grid._order.index(key) - int(grid.scroll_y) + 1).text


async def test_a_poll_that_changes_one_of_235_problems_formats_and_draws_that_row_alone(scale_dir, work):
    clock = [NOW]
    app = make_app(scale_dir, poll_s=None, clock=lambda: clock[0])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        grid = app.screen.grid
        assert grid.row_count == 235 and len(work.formatted) == 235  # the first view formats every row once
        assert 15 <= len(work.drawn) <= 20  # and draws the rows on screen, not the 235
        on_screen, off_screen = grid._order[2], grid._order[200]

        work.clear()
        update_problem(scale_dir, on_screen, best_speedup=9.5, attempts=7)
        app.poll_now()
        await pilot.pause()
        assert work.formatted == [on_screen] and work.drawn == [on_screen]
        assert "9.50x" in line_of(grid, on_screen)

        work.clear()
        update_problem(scale_dir, off_screen, best_speedup=8.25)
        app.poll_now()
        await pilot.pause()
        assert work.formatted == [off_screen] and work.drawn == []
        assert app.snapshot.problem(off_screen).best_speedup == 8.25

        work.clear()  # an agent moves from L1/001 (off screen) to the first row: both rows' agent counts change
        store = RunStore(scale_dir)
        store.update_agent(1, problem_id=app.snapshot.problem(grid._order[0]).id)
        store.close()
        app.poll_now()
        await pilot.pause()
        assert sorted(work.formatted) == sorted([grid._order[0], "L1/001_rmsnorm_llama3_1_8b"])
        assert work.drawn == [grid._order[0]]

        work.clear()
        clock[0] += 1.0  # a second on, nothing changed: no age's text moves (ages here are in minutes)
        app.poll_now()
        await pilot.pause()
        assert work.formatted == [] and work.drawn == []


async def test_the_poll_thread_prepares_the_rows_the_screen_shows(scale_dir, work):
    """The timed poll (in its thread) formats the changed row; the screen takes the rows it prepared."""
    app = make_app(scale_dir, poll_s=0.05, clock=lambda: NOW)
    async with app.run_test(size=(80, 24)) as pilot:
        grid = app.screen.grid
        key = grid._order[1]
        polls = app.polls
        while app.polls < polls + 2:
            await pilot.pause(0.05)
        work.clear()
        update_problem(scale_dir, key, best_speedup=7.75)
        while app.snapshot.problem(key).best_speedup != 7.75:
            await pilot.pause(0.05)
        await pilot.pause()
        assert work.formatted == [key] and work.drawn == [key]
        assert "7.75x" in line_of(grid, key)


def test_the_scale_store_is_sol_execbench_shaped(scale_dir):
    with RunReader(scale_dir) as reader:
        problems = reader.problems()
        assert len(problems) == 235 and reader.attempt_count() > 300
    counts = {}
    for p in problems:
        counts[p.subset] = counts.get(p.subset, 0) + 1
    assert counts == {"L1": 94, "L2": 82, "FlashInfer-Bench": 26, "Quant": 33}
