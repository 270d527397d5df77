"""The grid's filters, sorts and unrunnable rows on a SOL-ExecBench-shaped store of 235 problems (issue 36): `f`
cycles the status filter, `u` the subset filter, `x` shows only the problems whose best beats T_b, escape clears
them all; the line over the grid says which are on with the counts ("L1 · beats T_b: 63 of 94"); `s` or a click on a
column's header sorts; an unrunnable problem's row says why. Checked as text and as 80x24 snapshots."""

import math
from dataclasses import replace

import pytest
from textual.widgets import Static

from core.store import RunReader, RunStore
from tui.app import make_app
from tui.problems.grid import ProblemGrid
from tui.problems.model import GridView, beats_baseline, status_choices, subset_choices, unrunnable_reason, \
    view_summary
from tui_store import NOW, build_scale_store

pytestmark = pytest.mark.anyio

REASON = "safetensors blob not found: blobs/{name}.safetensors (input x)"


@pytest.fixture
def scale_dir(tmp_path):
    return build_scale_store(tmp_path / "sol-run")


@pytest.fixture
def make_scale(scale_dir):
    def factory():
        return make_app(scale_dir, poll_s=None, clock=lambda: NOW)

    return factory


@pytest.fixture
def problems(scale_dir):
    with RunReader(scale_dir) as reader:
        return reader.problems()


def bar(app) -> str:
    return str(app.screen.query_one("#gridbar", Static).render())


def shown(app) -> list[str]:
    return list(app.screen.grid._order)


def lines(grid: ProblemGrid) -> list[str]:
    """The grid's lines on screen (the header first)."""
    return [grid.render_line(y).text for y in range(grid.scrollable_content_region.height)]


# ------------------------------------------------------------ the model


def test_the_filter_cycles_follow_the_run(problems):
    assert status_choices(problems) == ["", "open", "active", "waiting", "done", "plateaued", "over budget", "failed",
                                        "paused", "unrunnable"]
    assert status_choices([replace(p, status="waiting") for p in problems[:3]]) == ["", "open", "waiting"]
    assert status_choices([replace(p, status="failed") for p in problems[:3]]) == ["", "failed"]
    assert subset_choices(problems) == ["", "FlashInfer-Bench", "L1", "L2", "Quant"]


def test_beats_t_b_counts_as_the_report_does(problems):
    p = problems[0]
    assert beats_baseline(replace(p, best_speedup=1.01)) and not beats_baseline(replace(p, best_speedup=1.0))
    assert not beats_baseline(replace(p, best_speedup=None))
    assert not beats_baseline(replace(p, best_speedup=math.inf))
    assert not beats_baseline(replace(p, best_speedup=math.nan))


def test_the_summary_counts_within_the_subset(problems):
    problems = tuple(problems)
    assert view_summary(problems, GridView(), 235) == "235/235 problems"
    assert view_summary(problems, GridView(subset="L1"), 94) == "L1: 94 of 235"
    assert view_summary(problems, GridView(subset="L1", beats=True), 63) == "L1 · beats T_b: 63 of 94"
    assert view_summary(problems, GridView(status="failed", text="rope"), 3) == "failed · 'rope': 3 of 235"


def test_the_reason_is_read_from_the_decision_event():
    message = ("unrunnable: no workload can run here (skipped on the cpu: over 16 MiB; blob x not found); no agent "
               "will be assigned")
    assert unrunnable_reason(message) == "skipped on the cpu: over 16 MiB; blob x not found"
    assert unrunnable_reason("unrunnable: the GPU is gone") == "the GPU is gone"


# ------------------------------------------------------------ the screen


async def test_f_u_x_filter_and_the_bar_counts_what_they_show(make_scale, problems):
    app = make_scale()
    async with app.run_test(size=(80, 24)) as pilot:
        assert bar(app) == "sort: key · 235/235 problems" and len(shown(app)) == 235
        await pilot.press("u", "u")
        l1 = sorted(p.key for p in problems if p.subset == "L1")
        assert shown(app) == l1 and bar(app) == "sort: key · L1: 94 of 235"
        await pilot.press("x")
        beating = sorted(p.key for p in problems if p.subset == "L1" and p.best_speedup and p.best_speedup > 1)
        assert shown(app) == beating and bar(app) == f"sort: key · L1 · beats T_b: {len(beating)} of 94"
        assert 0 < len(beating) < 94

        await pilot.press("f", "f")  # every status, open, then active
        active = [k for k in beating if app.snapshot.problem(k).status == "active"]
        assert shown(app) == active and bar(app) == f"sort: key · L1 · active · beats T_b: {len(active)} of 94"
        await pilot.press("x", "u", "u", "u")  # beats T_b off; L2, Quant, then every subset again
        assert bar(app) == f"sort: key · active: {sum(p.status == 'active' for p in problems)} of 235"
        await pilot.press("f", "f")  # waiting, then done
        assert {app.snapshot.problem(k).status for k in shown(app)} == {"done"}

        await pilot.press("b")  # the best and worst keys stay within the filters
        done = [p for p in problems if p.status == "done" and p.best_speedup is not None]
        assert app.screen.grid.selected_key == max(done, key=lambda p: p.best_speedup).key

        await pilot.press("escape")
        assert bar(app) == "sort: key · 235/235 problems" and len(shown(app)) == 235


async def test_the_filters_combine_with_the_text_filter(make_scale, problems):
    app = make_scale()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("u", "u", "u", "slash", *"rope", "enter")  # L2, keys with "rope"
        expected = sorted(p.key for p in problems if p.subset == "L2" and "rope" in p.key)
        assert shown(app) == expected and bar(app) == f"sort: key · L2 · 'rope': {len(expected)} of 82"
        await pilot.press("escape")  # clears the text and the subset
        assert len(shown(app)) == 235


async def test_s_and_a_click_on_a_column_header_sort(make_scale, problems):
    app = make_scale()
    async with app.run_test(size=(80, 24)) as pilot:
        grid = app.screen.grid
        await pilot.press("s", "s", "s", "s")  # priority, status, attempts, speedup
        speedups = [app.snapshot.problem(k).best_speedup or 0 for k in shown(app)]
        assert bar(app).startswith("sort: speedup · ") and speedups == sorted(speedups, reverse=True)

        header = lines(grid)[0]
        await pilot.click(ProblemGrid, offset=(header.index("status") + 1, 0))
        assert bar(app).startswith("sort: status · ")
        statuses = [app.snapshot.problem(k).status for k in shown(app)]
        assert statuses == sorted(statuses) and statuses[-1] == "waiting"
        await pilot.click(ProblemGrid, offset=(header.index("SOL") + 1, 0))
        sols = [app.snapshot.problem(k).best_sol or 0 for k in shown(app)]
        assert bar(app).startswith("sort: SOL · ") and sols == sorted(sols, reverse=True)
        await pilot.click(ProblemGrid, offset=(header.index("problem"), 0))
        assert bar(app).startswith("sort: key · ") and shown(app) == sorted(p.key for p in problems)


async def test_unrunnable_rows_say_why_at_80_columns(make_scale, problems):
    app = make_scale()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(*"f" * 9)
        unrunnable = sorted(p.key for p in problems if p.status == "unrunnable")
        assert shown(app) == unrunnable and bar(app) == f"sort: key · unrunnable: {len(unrunnable)} of 235"
        grid = app.screen.grid
        rows = lines(grid)[1:]
        for key, line in zip(unrunnable, rows):
            assert len(line) <= 80 and " unrunnable  safetensors blob not " in line, line
            assert line.lstrip().startswith(key[:20])
        await pilot.resize_terminal(200, 30)
        await pilot.pause()
        name = unrunnable[0].split("/")[1]
        assert REASON.format(name=name) in lines(grid)[1]


async def test_the_reason_of_an_old_event_and_of_one_seen_later(scale_dir, problems):
    """The reason is read from the store when the decision is older than the events the watcher reads at its start;
    a problem marked unrunnable later gets the reason its poll brings."""
    store = RunStore(scale_dir)
    for k in range(700):
        store.add_event("log", f"step {k}")
    store.close()
    first = min((p for p in problems if p.status == "unrunnable"), key=lambda p: p.key)
    app = make_app(scale_dir, poll_s=None, clock=lambda: NOW)
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.press(*"f" * 9)
        grid = app.screen.grid
        assert REASON.format(name=first.name) in lines(grid)[1]

        later = next(p for p in problems if p.status == "waiting")
        store = RunStore(scale_dir)
        store.update_problem(later.id, status="unrunnable")
        store.add_event("decision", "unrunnable: no workload can run here (every workload over the CPU's 16 MiB "
                                    "cap); no agent will be assigned", problem_id=later.id)
        store.close()
        app.poll_now()
        await pilot.pause()
        line = lines(grid)[1 + shown(app).index(later.key)]
        assert "unrunnable   every workload over the CPU's 16 MiB cap" in line


# ------------------------------------------------------------ 80x24 snapshots


def test_snapshot_l1_beating_t_b_by_speedup(snap_compare, make_scale):
    assert snap_compare(make_scale(), terminal_size=(80, 24), press=["u", "u", "x", "s", "s", "s", "s"])


def test_snapshot_unrunnable(snap_compare, make_scale):
    assert snap_compare(make_scale(), terminal_size=(80, 24), press=["f"] * 9)
