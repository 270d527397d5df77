"""Reports of a run: fleet metrics computed by hand from a small deterministic store, `kernelfleet report` (table,
JSON, HTML) and `kernelfleet export` of the best solutions in SOL-ExecBench's solution.json format."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import main
from core.problem import load_problem
from core.report import (
    ExportError,
    FleetSummary,
    ProblemSummary,
    build_report,
    export_best,
    fleet_summary,
    not_exported,
    render_html,
    report_to_dict,
    summarize,
)
from core.report.html import sol_histogram_bins
from core.solution.from_reference import reference_as_solution
from core.solution.io import parse_solution, solution_to_dict
from core.store import LlmCall, RunReader, RunStore

ROOT = Path(__file__).resolve().parents[2]
RMSNORM = ROOT / "problems" / "norm" / "001_rmsnorm_llama3_1_8b"
ODD = "misc/odd<name>&co"

# key -> (seed speedup, seed SOL, best speedup, best SOL); None: no passing attempt
PLAN = {
    "norm/001_rmsnorm_llama3_1_8b": (2.0, 0.6, 4.0, 0.8),
    "norm/p_b": (1.0, 0.5, 2.0, 0.6),
    "gemm/p_c": (0.5, 0.25, 1.0, 0.5),
    ODD: None,
}
# Hand-computed:
#   after  (best): speedups 4, 2, 1 -> geomean (8)^(1/3) = 2; beating (> 1): 4 and 2 -> 2 of 4 = 50%;
#                  above 2x: 4 only (2.0 is not > 2); SOL 0.8, 0.6, 0.5 -> median 0.6, mean 1.9/3
#   before (seed): speedups 2, 1, 0.5 -> geomean 1; beating: 2 only -> 1 of 4 = 25%; above 2x: none;
#                  SOL 0.6, 0.5, 0.25 -> median 0.5, mean 0.45


@pytest.fixture(scope="module")
def solution_dict():
    return solution_to_dict(reference_as_solution(load_problem(RMSNORM)))


def _named(solution: dict, name: str) -> dict:
    return {**solution, "name": name}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, solution_dict):
    run = tmp_path_factory.mktemp("report") / "run"
    store = RunStore(run, create=True)
    store.init_run({"agents": 2}, [str(RMSNORM)], "cuda", [0], "NVIDIA H200")
    agent = store.add_agent("tuner-1", "tuner")
    for key, plan in PLAN.items():
        subset, name = key.split("/")
        pid = store.add_problem(key, name, subset, f"/problems/{key}")
        if plan is None:
            store.add_llm_call(agent, pid, LlmCall("tool_calls", 8, 2, dollars=0.05))
            aid = store.begin_attempt(pid, agent, _named(solution_dict, "broken"), language="pytorch")
            store.finish_attempt(aid, status="RUNTIME_ERROR", reason="boom", gpu_seconds=0.5)
            store.update_problem(pid, status="failed", attempts=1, seed_attempt_id=aid, failures_in_row=1)
            continue
        seed_x, seed_sol, best_x, best_sol = plan
        seed = store.begin_attempt(pid, None, _named(solution_dict, f"seed_{name}"), language="pytorch")
        store.finish_attempt(seed, status="PASSED", speedup=seed_x, sol=seed_sol, times_ms={0: 1.0},
                             gpu_seconds=1.0)
        store.add_llm_call(agent, pid, LlmCall("tool_calls", 90, 10, dollars=0.25))
        best = store.begin_attempt(pid, agent, _named(solution_dict, f"best_{name}"), language="pytorch",
                                   parent_id=seed)
        store.finish_attempt(best, status="PASSED", speedup=best_x, sol=best_sol, times_ms={0: 0.5},
                             gpu_seconds=2.0)
        # a later, slower attempt: not the best, so not exported
        store.add_llm_call(agent, pid, LlmCall("garbage", 45, 5, dollars=0.125))  # calls count, attempt or not
        later = store.begin_attempt(pid, agent, _named(solution_dict, f"later_{name}"), language="pytorch",
                                    parent_id=best)
        store.finish_attempt(later, status="PASSED", speedup=best_x / 2, sol=best_sol / 2, gpu_seconds=1.5)
        store.update_problem(pid, status="active", attempts=3, seed_attempt_id=seed, seed_speedup=seed_x,
                             seed_sol=seed_sol, best_attempt_id=best, best_speedup=best_x, best_sol=best_sol)
    for mean_sol, busy in ((0.45, 0.5), (0.55, 0.875), (1.9 / 3, None)):
        store.add_metric(fleet_mean_sol=mean_sol, geomean_speedup=None, gpu_busy=busy, queue_wait_s=1.25,
                         attempts=1, tokens=0, dollars=0.0, active_problems=3)
    store.set_run_state("running")
    store.close()
    return run


# ---------------------------------------------------------------- metrics


def test_summary_after(run_dir):
    with RunReader(run_dir) as reader:
        problems, fleet = summarize(reader)
    assert [p.key for p in problems] == list(PLAN)
    assert problems[0] == ProblemSummary("norm/001_rmsnorm_llama3_1_8b", "001_rmsnorm_llama3_1_8b", "norm",
                                         "active", 3, 4.0, 0.8, 2.0, 0.6)
    assert problems[3] == ProblemSummary(ODD, "odd<name>&co", "misc", "failed", 1, None, None, None, None)
    assert fleet == FleetSummary(
        problems=4, with_result=3, geomean_speedup=pytest.approx(2.0, rel=1e-12), beating_baseline=2,
        share_beating=0.5, above_2x=1, median_sol=pytest.approx(0.6), mean_sol=pytest.approx(1.9 / 3),
        attempts=10, tokens=3 * 150 + 10, dollars=pytest.approx(3 * 0.375 + 0.05), gpu_seconds=pytest.approx(14.0))


def test_summary_before(run_dir):
    with RunReader(run_dir) as reader:
        _, before = summarize(reader, seed=True)
    assert before.problems == 4 and before.with_result == 3
    assert before.geomean_speedup == pytest.approx(1.0, rel=1e-12)
    assert (before.beating_baseline, before.share_beating, before.above_2x) == (1, 0.25, 0)
    assert before.median_sol == pytest.approx(0.5) and before.mean_sol == pytest.approx(0.45)
    assert before.attempts == 10  # the run's totals in both


def test_report_object_and_json_form(run_dir):
    with RunReader(run_dir) as reader:
        report = build_report(reader)
    assert report.before.geomean_speedup == pytest.approx(1.0) and report.after.geomean_speedup == pytest.approx(2.0)
    assert report.run.state == "running" and report.run.gpu_name == "NVIDIA H200"
    assert [round(m.fleet_mean_sol, 4) for m in report.metrics] == [0.45, 0.55, 0.6333]
    data = json.loads(json.dumps(report_to_dict(report)))
    assert data["after"]["above_2x"] == 1 and data["before"]["share_beating"] == 0.25
    assert data["problems"][3]["best_speedup"] is None


def test_fleet_summary_edge_cases():
    empty = fleet_summary([])
    assert (empty.problems, empty.with_result, empty.geomean_speedup, empty.share_beating) == (0, 0, None, 0.0)
    assert empty.median_sol is None and empty.mean_sol is None and empty.attempts == 0
    # a problem with a SOL score but no speedup counts as a result, and only in the SOL figures
    only_sol = ProblemSummary("a/b", "b", "a", "active", 1, None, 0.7, None, None)
    nothing = ProblemSummary("a/c", "c", "a", "waiting", 0, None, None, None, None)
    summary = fleet_summary([only_sol, nothing])
    assert summary.with_result == 1 and summary.geomean_speedup is None and summary.beating_baseline == 0
    assert summary.median_sol == 0.7 and summary.mean_sol == 0.7
    # geomean of 3 and 1/3 is 1; an even count's median is the middle pair's mean
    pair = [ProblemSummary("a/x", "x", "a", "active", 1, 3.0, 0.2, None, None),
            ProblemSummary("a/y", "y", "a", "active", 1, 1 / 3, 0.4, None, None)]
    summary = fleet_summary(pair)
    assert summary.geomean_speedup == pytest.approx(1.0) and summary.median_sol == pytest.approx(0.3)
    assert (summary.beating_baseline, summary.above_2x, summary.share_beating) == (1, 1, 0.5)


# ---------------------------------------------------------------- HTML


def test_html_is_self_contained_with_charts_and_escaped_text(run_dir):
    with RunReader(run_dir) as reader:
        page = render_html(reader)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count("<svg") == 3
    assert "<polyline" in page  # fleet mean SOL over time
    assert page.count("<rect") >= 10 + 3  # histogram bins and speedup bars
    for key in PLAN:
        if key != ODD:
            assert key in page
    assert "misc/odd&lt;name&gt;&amp;co" in page and "odd<name>" not in page
    assert "<script" not in page and "<link" not in page and "src=" not in page and "@import" not in page
    assert "1.00× → 2.00×" not in page  # the summary is a before/after table, not an arrow string
    assert "4.00×" in page and "2.00×" in page and "no result" in page


def test_histogram_bins():
    assert sol_histogram_bins([0.0, 0.05, 0.1, 0.6, 0.999, 1.0, float("nan")]) == [2, 1, 0, 0, 0, 0, 1, 0, 0, 2]
    assert sol_histogram_bins([]) == [0] * 10


# ---------------------------------------------------------------- export


def test_export_writes_the_best_solutions(run_dir, tmp_path, solution_dict):
    out = tmp_path / "out"
    with RunReader(run_dir) as reader:
        written = export_best(reader, out)
        skipped = not_exported(reader)
    assert written == [out / "norm" / "001_rmsnorm_llama3_1_8b" / "solution.json",
                       out / "norm" / "p_b" / "solution.json", out / "gemm" / "p_c" / "solution.json"]
    assert skipped == [(ODD, "no passing attempt")]
    for path in written:
        text = path.read_text()
        assert text.startswith("{\n  ")  # indent 2
        data = json.loads(text)
        name = path.parent.name
        assert data == _named(solution_dict, f"best_{name}")
        solution = parse_solution(data, path)
        assert solution.name == f"best_{name}" and solution.definition == "001_rmsnorm_llama3_1_8b"
    assert not list(out.rglob("*.tmp"))


def test_export_unknown_format(run_dir, tmp_path):
    with RunReader(run_dir) as reader, pytest.raises(ExportError, match="unknown export format 'triton'"):
        export_best(reader, tmp_path / "out", format="triton")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- the CLI


def _kernelfleet(*args):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([sys.executable, "-m", "cli.main", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_report_cli_prints_the_table_and_the_before_after_summary(run_dir):
    done = _kernelfleet("report", run_dir)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for key in PLAN:
        assert key in out
    assert "2.00x → 4.00x" in out and "0.60 → 0.80" in out  # the rmsnorm row
    assert "0.50x → 1.00x" in out and "— → —" in out
    lines = {line.strip().split("  ")[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert lines["geomean speedup"].endswith("1.00x → 2.00x")
    assert lines["beating the baseline"].endswith("1/4 (25%) → 2/4 (50%)")
    assert lines["above 2x"].endswith("0 → 1")
    assert lines["median SOL"].endswith("0.50 → 0.60")
    assert lines["mean SOL"].endswith("0.45 → 0.63")
    assert lines["problems with a result"].endswith("3/4 → 3/4")
    assert "10 attempts, 460 tokens, $1.1" in out and "14.0 GPU seconds" in out
    # The latest sample that has a busy fraction (the last one has none yet).
    assert "GPU busy while work waited: 88%, mean queue wait 1.2 s" in out


def test_report_cli_json_and_html(run_dir, tmp_path, capsys):
    page = tmp_path / "pages" / "report.html"
    assert main(["report", str(run_dir), "--json", "--html", str(page)]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["after"]["geomean_speedup"] == pytest.approx(2.0)
    assert data["before"]["median_sol"] == pytest.approx(0.5)
    assert f"wrote {page}" in captured.err
    text = page.read_text()
    assert "<svg" in text and "norm/p_b" in text and "gemm/p_c" in text


def test_report_cli_missing_run_dir_exits_2_with_one_line(tmp_path):
    done = _kernelfleet("report", tmp_path / "nope")
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no run here" in lines[0]
    assert str(tmp_path / "nope") in lines[0]


def test_report_cli_invalid_store_exits_2_with_one_line(tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "run.sqlite").write_bytes(b"this is not a database" * 100)
    assert main(["report", str(bad)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == "" and len(lines) == 1 and "not a kernelfleet run store" in lines[0]


def test_export_cli(run_dir, tmp_path):
    out = tmp_path / "exported"
    done = _kernelfleet("export", run_dir, "--format", "sol-execbench", out)
    assert done.returncode == 0, done.stderr
    assert f"skipped {ODD}: no passing attempt" in done.stdout
    assert "exported 3 solutions (sol-execbench), skipped 1" in done.stdout
    files = sorted(out.rglob("solution.json"))
    assert len(files) == 3
    for path in files:
        parse_solution(json.loads(path.read_text()), path)


def test_export_cli_unknown_format_is_an_argparse_error(run_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["export", str(run_dir), "--format", "triton", str(tmp_path / "x")])
    assert info.value.code == 2
    assert "invalid choice: 'triton'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_export_cli_missing_run_dir(tmp_path, capsys):
    assert main(["export", str(tmp_path / "nope"), str(tmp_path / "x")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "no run here" in lines[0]
