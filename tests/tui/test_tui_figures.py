"""One formula per figure: on a store where the old formulas disagreed, the TUI's header and detail, the report and
``core.report.figures`` show the same numbers, and a CPU run's figures say CPU."""

import dataclasses

import pytest

from cli.report_cmd import summary_lines
from core.report import build_report
from core.report.figures import busy_fraction, problem_figures
from core.store import RunReader, RunStore
from tui.detail.model import made_by, problem_summary_line, workload_rows
from tui.fleet.histogram import histogram_text
from tui.fleet.model import header_lines
from tui.formatting import fmt_sol, fmt_x
from tui.snapshot import Poller
from tui_store import NOW


def _workloads(t_b: list[float | None], t_sol: list[float | None]) -> list[dict]:
    return [{"index": i, "axes": f"N={i}", "t_b_ms": b, "t_sol_ms": s, "baseline_method": "torch"}
            for i, (b, s) in enumerate(zip(t_b, t_sol))]


@pytest.fixture
def cpu_run(tmp_path):
    """A CPU run of five problems, each a case the old formulas counted differently:

    - fast: 4x, SOL 0.8;
    - no_t_sol: 2x over its workloads with T_b, no SOL (a workload with T_b has no T_sol);
    - failed: failed, no best;
    - slow: 0.5x, SOL 0.3;
    - broken: a non-finite speedup and SOL (the old header and metric sample took inf in the geomean).

    Its metric samples are stale (taken before the last bests) and the latest has no busy fraction."""
    store = RunStore(tmp_path / "run", create=True)
    try:
        store.init_run({"fleet": "test"}, ["problems/"], "cpu", [], "cpu")
        store.set_run_state("running")
        plan = {
            "t/fast": (_workloads([1.0, 2.0], [0.1, 0.2]), "active", 4.0, 0.8),
            "t/no_t_sol": (_workloads([1.0, None], [None, 0.1]), "active", 2.0, None),
            "t/failed": (_workloads([1.0], [0.1]), "failed", None, None),
            "t/slow": (_workloads([1.0], [0.1]), "plateaued", 0.5, 0.3),
            "t/broken": (_workloads([1.0], [0.1]), "active", float("inf"), float("nan")),
        }
        for key, (workloads, status, speedup, sol) in plan.items():
            subset, name = key.split("/")
            pid = store.add_problem(key, name, subset, f"problems/{key}", op=name, workloads=workloads)
            fields = {"status": status, "attempts": 1, "gpu_seconds": 3.5}
            if speedup is not None:
                aid = store.begin_attempt(pid, None, {"sources": []}, language="python")
                times = {w["index"]: w["t_b_ms"] / speedup for w in workloads if w["t_b_ms"]}
                store.finish_attempt(aid, status="PASSED", times_ms=times, speedup=speedup, sol=sol, gpu_seconds=3.5)
                fields.update(best_attempt_id=aid, best_speedup=speedup, best_sol=sol)
            store.update_problem(pid, **fields)
        store.add_metric(fleet_mean_sol=0.1, geomean_speedup=9.0, gpu_busy=0.625, queue_wait_s=0.5, attempts=1,
                         tokens=0, dollars=0.0, active_problems=3)
        store.add_metric(fleet_mean_sol=0.2, geomean_speedup=8.0, gpu_busy=None, queue_wait_s=None, attempts=2,
                         tokens=0, dollars=0.0, active_problems=3)
    finally:
        store.close()
    return tmp_path / "run"


def test_the_header_the_report_and_the_figures_agree(cpu_run):
    with RunReader(cpu_run) as reader:
        figures = problem_figures(reader.problems())
        report = build_report(reader)
        snapshot = Poller(reader, "run", lambda: NOW).poll()[0]
    # By hand: speedups 4, 2, 0.5 count (inf does not) -> geomean 4^(1/3); SOL 0.8 and 0.3 -> mean 0.55
    assert figures.geomean_speedup == pytest.approx(4 ** (1 / 3)) and figures.mean_sol == pytest.approx(0.55)
    assert (figures.problems, figures.with_result, figures.with_speedup, figures.with_sol) == (5, 3, 3, 2)
    assert (figures.beating_baseline, figures.above_2x, figures.share_beating) == (2, 1, 0.4)
    after = report.after
    assert (after.geomean_speedup, after.mean_sol, after.median_sol) == (figures.geomean_speedup, figures.mean_sol,
                                                                        figures.median_sol)
    assert (after.beating_baseline, after.share_beating, after.with_result) == (2, 0.4, 3)
    line = header_lines(snapshot)[1]
    # The header shows the problems' figures, not the stale samples' 8x and 0.2, and the last known busy fraction.
    assert f"geomean {fmt_x(figures.geomean_speedup)}" in line and "geomean 1.59x" in line
    assert f"SOL {fmt_sol(figures.mean_sol)}" in line and "SOL 0.55" in line
    assert line.startswith("CPU 62% ") and busy_fraction(report.metrics) == 0.625
    summary = " ".join(p.text for p in summary_lines(report.before, report.after, report.metrics,
                                                     report.device_word)).replace("\N{NO-BREAK SPACE}", " ")
    assert "→ 1.59x" in summary  # the geomean, seed → best
    assert "CPU busy while work waited: 62%" in summary and "14.0 CPU seconds" in summary and "GPU" not in summary
    histogram = histogram_text(snapshot)
    assert "3/5 problems with a score" not in histogram and "2/5 problems with a score" in histogram
    assert "3/5 problems with a speedup" in histogram


def test_a_cpu_runs_detail_speaks_of_cpu_seconds_and_scores_each_workload_once(cpu_run):
    with RunReader(cpu_run) as reader:
        snapshot = Poller(reader, "run", lambda: NOW).poll()[0]
        rows = {p.key: p for p in reader.problems()}
        fast, no_t_sol = rows["t/fast"], rows["t/no_t_sol"]
        best_fast, best_no_t_sol = reader.attempt(fast.best_attempt_id), reader.attempt(no_t_sol.best_attempt_id)
    line = problem_summary_line(fast, snapshot)
    assert "3.5 CPU s" in line and "GPU" not in line
    # T_k = T_b / 4 on both; SOL = 1 / (1 + (T_k - T_sol) / (T_b - T_sol)): 1 / (1 + 0.15 / 0.9) = 6/7
    assert [r[5:] for r in workload_rows(fast, best_fast)] == [("4.00x", fmt_sol(6 / 7))] * 2
    # workload 0 has T_b but no T_sol: a speedup, no SOL; workload 1 has no T_b: neither
    assert [r[5:] for r in workload_rows(no_t_sol, best_no_t_sol)] == [("2.00x", "—"), ("—", "—")]


def test_the_detail_says_who_made_the_best_and_how(cpu_run):
    with RunReader(cpu_run) as reader:
        snapshot = Poller(reader, "run", lambda: NOW).poll()[0]
        fast = {p.key: p for p in reader.problems()}["t/fast"]
        best = reader.attempt(fast.best_attempt_id)
    compiled = dataclasses.replace(best, agent_id=7,  # an agent the snapshot has no name for yet
                                   note="compiler: max-autotune + cudagraphs, fullgraph\nwhy: the search")
    line = problem_summary_line(fast, snapshot, compiled)
    assert "best 4.00x SOL 0.80 by #7 (compiler: max-autotune + cudagraphs, fullgraph) (seed" in line, line
    assert made_by(dataclasses.replace(compiled, agent_id=None), snapshot) == ""  # a seed or a composite
    assert made_by(None, snapshot) == ""
