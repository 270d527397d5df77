"""The pure model: formatting, sorting, filtering, bars, histograms and side-by-side diffs."""

import math
from dataclasses import replace

from core.store import LlmCall, RunReader, RunStore
from tui.diff.model import DiffView, side_by_side
from tui.fleet.model import done_count, header_lines
from tui.formatting import fmt_ago, histogram, sol_bar, sparkline
from tui.problems.model import SORTS, filter_problems, grid_rows, sort_problems
from tui.snapshot import Poller
from tui_store import NOW


def test_sol_bar_has_eighths_and_fixed_width():
    assert sol_bar(None) == " " * 8
    assert sol_bar(1.0) == "█" * 8
    assert sol_bar(0.5) == "████    "
    assert sol_bar(0.0625, 8) == "▌       "
    assert len(sol_bar(0.77, 10)) == 10


def test_sparkline_and_histogram():
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert sparkline([None, 1.0]) == " ▅"
    assert sparkline([]) == ""
    lines = histogram([0.05, 0.15, 0.15, None, 1.0], (0.0, 0.1, 0.2, 1.0), width=4)
    assert lines == ["0.0–0.1 │██   1", "0.1–0.2 │████ 2", "0.2–1.0 │██   1"]
    assert [line.split()[-1] for line in histogram([5.0, -1.0, math.inf], (0, 1, 2))] == ["1", "1"]


def test_fmt_ago():
    assert fmt_ago(None, 10) == "—"
    assert fmt_ago(5, 17) == "12s"
    assert fmt_ago(0, 3 * 3600 + 5) == "3h"


def test_the_header_counts_every_finished_status_as_done(run_dir):
    with RunReader(run_dir) as reader:
        problems = Poller(reader, "demo-run", lambda: NOW).poll()[0].problems
    finished = ("done", "plateaued", "over budget", "failed")
    statuses = ["done", "plateaued", "over budget", "failed", "active", "waiting", "paused"]
    rows = [replace(p, status=statuses[i % len(statuses)]) for i, p in enumerate(problems)]
    assert done_count(rows) == sum(r.status in finished for r in rows) > 0
    assert done_count([replace(p, status="done") for p in problems]) == len(problems)


def test_sort_filter_and_grid_rows(run_dir):
    with RunReader(run_dir) as reader:
        snap = Poller(reader, "demo-run", lambda: NOW).poll()[0]
    by_key = sort_problems(snap.problems, 0)
    assert [p.key for p in by_key] == sorted(p.key for p in snap.problems)
    by_sol = sort_problems(snap.problems, [s.name for s in SORTS].index("SOL"))
    sols = [p.best_sol for p in by_sol if p.best_sol is not None]
    assert sols == sorted(sols, reverse=True) and by_sol[-1].best_sol is None
    assert {p.status for p in filter_problems(snap.problems, "ACTIVE")} == {"active"}
    assert [p.key for p in filter_problems(snap.problems, "cpu row")] == ["cpu/row_rmsnorm"]
    rows = dict(grid_rows(snap, 0, ""))
    assert rows["cpu/row_rmsnorm"][4] == "2"  # two agents on it
    assert rows["L1/matmul_bias"][3] == "active*"  # pinned


def test_side_by_side_aligns_changed_lines():
    diff = ("--- a/k.py\n+++ b/k.py\n@@ -1,3 +1,4 @@\n a\n-b\n+B\n c\n+d\n")
    rows = side_by_side(diff)
    assert [r.kind for r in rows] == ["file", "hunk", "equal", "replace", "equal", "insert"]
    assert (rows[3].left_no, rows[3].left, rows[3].right_no, rows[3].right) == (2, "b", 2, "B")
    assert (rows[5].left_no, rows[5].right_no, rows[5].right) == (None, 4, "d")


def test_diff_view_steps_within_bounds():
    view = DiffView((3, 5, 9), 2)
    assert view.step(1).index == 2 and view.step(-1).current == 5 and view.step(-5).current == 3
    assert view.toggled().split and not view.toggled().toggled().split
    assert DiffView(()).step(1).current is None


def test_the_header_shows_the_cost_and_the_llm_endpoint_live(run_dir):
    with RunReader(run_dir) as reader:
        poller = Poller(reader, "demo-run", lambda: NOW)
        first = poller.poll()[0]
        assert "llm ok" in header_lines(first)[1] and "90.0k tok $0.90" in header_lines(first)[1]
        store = RunStore(run_dir)
        try:
            store.add_llm_call(1, 1, LlmCall("tool_calls", 9000, 1000, tokens_estimated=True, dollars=0.5))
            store.add_llm_call(1, 1, LlmCall("retry", detail="HTTP 500: upstream exploded; retry 1/3"))
            store.add_llm_call(1, 1, LlmCall("error", detail="HTTP 500: upstream exploded"))
            retrying = poller.poll()[0]
            line = header_lines(retrying)[1]
            assert "~100.0k tok $1.40" in line and "llm retrying (2 failed): HTTP 500: upstream exploded" in line
            assert retrying.totals.attempts == first.totals.attempts  # calls are not attempts
            store.update_agent(1, state="stopped", problem_id=None)
            assert "llm down: HTTP 500: upstream exploded" in header_lines(poller.poll()[0])[1]
            store.add_llm_call(1, 1, LlmCall("answer", 10, 10))
            assert "llm ok" in header_lines(poller.poll()[0])[1]
        finally:
            store.close()


def test_the_header_of_a_fresh_cpu_run_names_the_device_and_leaves_no_gap_for_a_missing_sparkline(tmp_path):
    store = RunStore(tmp_path / "fresh", create=True)
    try:
        store.init_run({"fleet": "test"}, ["problems/"], "cpu", [0], "cpu")
        store.set_run_state("running")
    finally:
        store.close()
    with RunReader(tmp_path / "fresh") as reader:
        line = header_lines(Poller(reader, "fresh", lambda: NOW).poll()[0])[1]
    assert line == "CPU — · 0 tok $0.00 · SOL — · geomean —"
