"""What the screens say, checked as text on the deterministic store (issue 34, "80x24 done properly"): log lines
wrapped whole, keys whole where the width allows, the agents' activity under the grid, one key each to the best
and worst problem, `q` asking first where the UI runs in the run's own process, the run's state while the bests
are re-verified and after a resume, the device's word and plurals."""

import pytest

from core.store import RunStore, submit_control
from tui.dialogs import ConfirmStop
from tui.fleet.header import FleetHeader
from tui.logs.view import LogView, wrap
from tui.problems.screen import ProblemsScreen

pytestmark = pytest.mark.anyio

VERDICT = ("attempt 58 by tuner-1: PASSED 1.42x — new best [tuner: FORM=inplace, ROWS=64, BLOCK=256, "
           "VEC=4, UNROLL=2, STAGES=3]")
LONG_KEY = "moe/001_topk_softmax_routing_qwen3_30b_a3b_with_a_much_longer_name"


def shown_rows(widget, height: int) -> list[str]:
    return [widget.render_line(y).text for y in range(height)]


def header_text(app) -> str:
    return str(app.screen.query_one(FleetHeader).render())


def test_wrap_breaks_at_spaces_and_indents_what_follows():
    rows = wrap("12:00:00 tuner-1: " + VERDICT, 40)
    assert all(len(r) <= 40 for r in rows) and all(r.startswith("  ") for r in rows[1:])
    assert " ".join(r.strip() for r in rows) == "12:00:00 tuner-1: " + VERDICT
    assert wrap("short", 40) == ["short"]
    assert wrap("x" * 50, 20) == ["x" * 20, "  " + "x" * 18, "  " + "x" * 12]  # no space: cut where it fills


async def test_the_log_wraps_a_long_verdict_whole_at_80_columns(make, run_dir):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        store = RunStore(run_dir)
        store.add_event("attempt", VERDICT, agent_id=1, problem_id=1)
        store.close()
        app.poll_now()
        await pilot.press("l")
        await pilot.pause()
        log = app.screen.query_one(LogView)
        rows = [r.rstrip() for r in shown_rows(log, log.scrollable_content_region.height)]
        assert all(len(r) <= 80 for r in rows)
        text = " ".join(r.strip() for r in rows)
        assert "tuner-1 cpu/row_rmsnorm: " + VERDICT in text  # the newest line, at the bottom, whole
        assert rows[-1].strip().endswith("STAGES=3]")


async def test_a_long_problem_key_is_whole_at_120_columns_and_cut_with_an_ellipsis_at_80(make, run_dir):
    store = RunStore(run_dir)
    store.add_problem(LONG_KEY, "topk", "moe", "problems/" + LONG_KEY)
    store.close()
    app = make()
    async with app.run_test(size=(120, 40)) as pilot:
        grid = app.screen.grid
        grid.select(LONG_KEY)
        await pilot.pause()
        lines = shown_rows(grid, grid.row_count + 1)
        assert any(line.startswith(f" {LONG_KEY} ") for line in lines), lines
        assert lines[0].split() == ["problem", "pri", "status", "ag", "att", "best", "SOL", "chg"]  # subset gave way
    app = make()
    async with app.run_test(size=(80, 24)):
        grid = app.screen.grid
        line = next(t for t in shown_rows(grid, 14) if t.startswith(" moe/"))
        assert "…" in line and len(line) <= 80 and line.split()[1] == "waiting"


async def test_the_empty_rows_under_the_grid_show_each_agents_problem_and_last_verdict(make):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        panel = app.screen.query_one("#activity")
        assert panel.display and panel.region.height >= 5
        text = str(panel.render())
        lines = text.splitlines()
        # tuner-1 works on cpu/row_rmsnorm; its newest finished attempt is #34 (PASSED); llm-2 has no problem.
        tuner = next(line for line in lines if line.startswith("tuner-1 "))
        assert "working" in tuner and "#34 PASSED 1.70x" in tuner and "cpu/row_rmsnorm" in tuner
        assert "#35 INCORRECT" in next(line for line in lines if line.startswith("tuner-2 "))
        llm2 = next(line for line in lines if line.startswith("llm-2 "))
        assert "idle" in llm2 and llm2.rstrip().endswith("—")
    app = make()
    async with app.run_test(size=(120, 40)) as pilot:  # room for two lines an agent: what it does now too
        await pilot.pause()
        text = str(app.screen.query_one("#activity").render())
        assert "last #34 PASSED 1.70x" in text and "now step 18: compiled, measuring" in text


async def test_b_and_w_put_the_cursor_on_the_best_and_worst_problem(make):
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        grid = app.screen.grid
        speedups = {p.key: p.best_speedup for p in app.snapshot.problems if p.best_speedup is not None}
        await pilot.press("b")
        assert grid.selected_key == max(speedups, key=speedups.get) == "L2/swiglu"
        await pilot.press("w")
        assert grid.selected_key == min(speedups, key=speedups.get) == "cpu/row_rmsnorm"
        await pilot.press("slash", *"L1", "enter", "b")  # within the filter
        assert grid.selected_key == "L1/attention"
        assert "b best" in app.screen.query_one("KeyFooter").render_line(0).text


async def test_q_in_the_runs_own_process_asks_first_and_n_keeps_it_running(make, run_dir):
    app = make(in_process=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmStop) and "Quit and stop the run?" in app.screen.question
        await pilot.press("n")
        assert isinstance(app.screen, ProblemsScreen) and app.is_running
        await pilot.press("question_mark")
        assert "quit: stops the run" in str(app.screen.query_one("Static").render())
        await pilot.press("escape", "q", "y")
        await pilot.pause()
        assert app._exit  # y quits, which stops the run in its process
    watcher = make()
    async with watcher.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")  # `kernelfleet watch`: quits at once
        await pilot.pause()
        assert watcher._exit


async def test_the_header_says_stopping_while_the_bests_are_re_verified_and_a_resume_is_running(make, run_dir):
    store = RunStore(run_dir)
    store.add_event("run", "started: 12 problems, 4 agents, device cpu")
    store.close()
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        assert "demo-run [running]" in header_text(app)
        control = submit_control(run_dir, "stop_run")
        store = RunStore(run_dir)
        store.mark_control_applied(control, "stopping")
        store.add_event("control", "stop_run: stopping")
        app.poll_now()
        await pilot.pause()
        assert "[stopping]" in header_text(app) and "problems 3 done / 12" in header_text(app)
        store.add_event("log", "re-verifying the best attempt of 3 problems with 10 rounds of fresh inputs "
                               "(upstream's rule; Ctrl-C or a stop control skips the rest)")
        store.add_event("log", "best attempt 4 re-verified: 10 rounds of fresh inputs passed", problem_id=1)
        store.add_event("log", "best attempt 8 failed re-verification: INCORRECT; the best is now attempt 6",
                        problem_id=2)
        store.add_event("log", "best attempt 6 re-verified: 10 rounds of fresh inputs passed", problem_id=2)
        app.poll_now()
        await pilot.pause()
        assert "[stopping: re-verifying 2/3]" in header_text(app)
        bar = lambda: str(app.screen.query_one("#gridbar").render())  # noqa: E731
        assert "last control: stop_run: stopping" in bar()
        store.set_run_state("stopped")
        store.add_event("run", "stopped: stopped by a stop_run control")
        app.poll_now()
        await pilot.pause()
        assert "[stopped]" in header_text(app) and "last control: stop_run: stopped" in bar()
        store.set_run_state("running")
        store.add_event("run", "resumed: 12 problems, 4 agents, device cpu")
        store.close()
        app.poll_now()
        await pilot.pause()
        header = header_text(app)
        assert "[running]" in header and "problems 5 active, 3 done / 12" in header
        assert "last control: stop_run: stopped" in bar()  # the stop before the resume is over, not pending


async def test_the_detail_names_the_runs_device_and_counts_in_the_singular(make, run_dir):
    store = RunStore(run_dir)
    store.update_problem(1, attempts=1)
    store.close()
    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("slash", *"row_rms", "enter", "enter")
        summary = str(app.screen.query_one("#summary").render())
        assert "· 1 attempt," in summary and " CPU s" in summary and "GPU" not in summary
        assert "agents tuner-1, tuner-2" in summary
        await pilot.press("escape", "escape", "slash", *"gelu", "enter", "enter")
        summary = str(app.screen.query_one("#summary").render())
        assert "no agent" in summary and "0 attempts" in summary


async def test_the_detail_flags_speedups_against_a_t_b_taken_in_another_machine_state(make, run_dir):
    from dataclasses import asdict, replace

    moved = "the machine's probe moved 0.8 → 3.1 ms (+288%; load 0.3 → 7.9)"
    store = RunStore(run_dir)
    row = next(p for p in store.problems() if "row_rms" in p.key)
    workloads = [asdict(replace(w, state_moved=moved if w.index == 0 else "")) for w in row.workloads]
    assert workloads, "the problem has workloads to flag"
    store.set_problem_workloads(row.id, workloads)
    store.close()
    app = make()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("slash", *"row_rms", "enter", "enter")
        summary = str(app.screen.query_one("#summary").render())
        assert f"speedups not comparable on workload 0: T_b taken in another machine state ({moved})" in summary
        await pilot.press("escape", "escape", "slash", *"gelu", "enter", "enter")
        assert "not comparable" not in str(app.screen.query_one("#summary").render())


async def test_a_store_row_that_does_not_parse_leaves_the_last_view_and_says_why(make, run_dir):
    import sqlite3

    app = make()
    async with app.run_test(size=(80, 24)) as pilot:
        app.poll_now()
        before = app.snapshot
        with sqlite3.connect(run_dir / "run.sqlite") as conn:
            conn.execute("UPDATE problems SET frontier_json = '[{\"leads\": [0]}]' WHERE id = 2")
        app._tick()  # a poll in its worker thread, as the timer does
        for _ in range(50):
            await pilot.pause(0.05)
            if app.status is not None:
                break
        assert "problems row 2 does not parse: KeyError: 'attempt_id'" in app.status.text
        assert app.snapshot is before and app.screen.grid.row_count > 0
