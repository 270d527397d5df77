"""Reports of a run: fleet metrics computed by hand from a small deterministic store, `kernelfleet report` (table,
JSON, HTML) and `kernelfleet export` of the best solutions in SOL-ExecBench's solution.json format."""

import json
import os
import re
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
from core.report.html import sol_histogram_bins, sol_over_time_svg, speedup_over_time_svg
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
        if key.startswith("norm/"):
            store.set_attempt_verified(best, "passed: 10 rounds of fresh inputs")
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
                                         "active", 3, 4.0, 0.8, 2.0, 0.6, "passed: 10 rounds of fresh inputs",
                                         "tuner")
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
    assert page.count("<svg class=\"chart\"") == 6  # over time (2), speedups (2), best SOL (2)
    assert "<polyline" in page  # fleet mean SOL and best speedup over time
    assert page.count("<rect") >= 10 + 3  # histogram bins and speedup bars
    for key in PLAN:
        if key != ODD:
            assert key in page
    assert "misc/odd&lt;name&gt;&amp;co" in page and "odd<name>" not in page
    assert page.count("<script") == 1 and "<script>" in page  # one inline script (tests/report/test_html_report.py)
    assert "<link" not in page and "src=" not in page and "@import" not in page
    assert "1.00× → 2.00×" not in page  # the summary is a before/after table, not an arrow string
    assert "4.00×" in page and "2.00×" in page and "no result" in page


# ---------------------------------------------------------------- plots over time


def _points(svg: str) -> list[tuple[float, str, str]]:
    """(seconds since the start, value, title) of every point a plot marks."""
    return [(float(t), value, title) for t, value, title in
            re.findall(r'<circle [^>]*data-t="([0-9.]+)" data-value="([^"]*)"><title>([^<]*)</title>', svg)]


@pytest.fixture()
def cpu_run(tmp_path, solution_dict):
    """A CPU run as the store holds one: speedups but no SOL score (no T_sol on the CPU), metric samples without a
    mean SOL; attempts finished at known times: (problem, seconds after the start, passed, full, speedup)."""
    run = tmp_path / "cpu"
    store = RunStore(run, create=True)
    store.init_run({}, [str(RMSNORM)], "cpu", [], "")
    start = 1_000_000.0
    store.conn.execute("UPDATE run SET created_at = ?", (start,))
    pids = {key: store.add_problem(key, key.split("/")[1], key.split("/")[0], f"/p/{key}")
            for key in ("norm/a", "norm/b")}
    plan = [("norm/a", 30.0, True, True, 0.25), ("norm/b", 40.0, True, True, 2.0),
            ("norm/a", 55.0, False, True, None), ("norm/a", 70.0, True, False, 9.0),  # failed; partial
            ("norm/a", 80.0, True, True, 1.0), ("norm/a", 95.0, True, True, 0.5), ("norm/b", 120.0, True, True, 8.0)]
    for n, (key, at, passed, full, speedup) in enumerate(plan):
        aid = store.begin_attempt(pids[key], None, _named(solution_dict, f"a{n}"), language="pytorch",
                                  workloads=None if full else [0])
        store.finish_attempt(aid, status="PASSED" if passed else "INCORRECT", speedup=speedup, sol=None)
        store.conn.execute("UPDATE attempts SET finished_at = ? WHERE id = ?", (start + at, aid))
    for _ in range(3):
        store.add_metric(fleet_mean_sol=None, geomean_speedup=1.0, gpu_busy=None, queue_wait_s=None, attempts=1,
                         tokens=0, dollars=0.0, active_problems=2)
    store.set_run_state("finished")
    store.conn.execute("UPDATE run SET ended_at = ?", (start + 150.0,))
    store.close()
    return run


def test_progress_replays_each_best_with_the_runs_rule(cpu_run):
    with RunReader(cpu_run) as reader:
        progress = build_report(reader).progress
    # The failed attempt, the partial one (faster, but not on every workload) and the slower ones change nothing.
    assert [(c.problem, c.ts - 1_000_000.0, c.speedup) for c in progress.changes] == [
        ("norm/a", 30.0, 0.25), ("norm/b", 40.0, 2.0), ("norm/a", 80.0, 1.0), ("norm/b", 120.0, 8.0)]
    # The fleet geomean after each change: sqrt(0.25 * 2) , sqrt(1 * 2), sqrt(1 * 8).
    assert [(f.ts - 1_000_000.0, round(f.geomean_speedup, 6), f.with_speedup) for f in progress.fleet] == [
        (30.0, 0.25, 1), (40.0, round(0.5 ** 0.5, 6), 2), (80.0, round(2 ** 0.5, 6), 2), (120.0, 2.828427, 2)]
    assert progress.passing == 6 and progress.with_sol == 0


def test_speedup_over_time_marks_every_stored_change(cpu_run):
    with RunReader(cpu_run) as reader:
        report = build_report(reader)
    svg = speedup_over_time_svg(report.progress, report.run)
    points = _points(svg)
    problem = sorted((t, v, title.split(" ")[0]) for t, v, title in points if title.startswith("norm/"))
    fleet = [(t, v) for t, v, title in points if title.startswith("fleet geomean")]
    assert problem == [(30.0, "0.25×", "norm/a"), (40.0, "2.00×", "norm/b"), (80.0, "1.00×", "norm/a"),
                       (120.0, "8.00×", "norm/b")]
    assert fleet == [(30.0, "0.25×"), (40.0, "0.71×"), (80.0, "1.41×"), (120.0, "2.83×")]
    # Times on one axis from the run's start (x=52) to its end (150 s, x=624).
    xs = {float(t): float(x) for x, t in re.findall(r'<circle cx="([0-9.]+)" [^>]*data-t="([0-9.]+)"', svg)}
    for t, x in xs.items():
        assert x == pytest.approx(52 + 572 * t / 150, abs=0.1)
    # Higher speedups are higher on the plot (smaller y).
    ys = {v: float(y) for y, v in re.findall(r'cy="([0-9.]+)" r="3" fill="#[0-9a-f]+" data-t="[0-9.]+" '
                                             r'data-value="([^"]*)"', svg)}
    assert ys["8.00×"] < ys["2.00×"] < ys["1.00×"] < ys["0.25×"]
    assert "fleet geomean last 2.83×" in svg


def test_sol_over_time_on_a_cpu_run_says_why_there_is_no_sol(cpu_run):
    with RunReader(cpu_run) as reader:
        page = render_html(reader)
        report = build_report(reader)
    svg = sol_over_time_svg(report.progress, report.run, len(report.metrics))
    assert "no metric samples yet" not in page
    assert "no SOL score: the cpu device has no speed of light (T_sol); 6 passing attempts and 3 metric samples" \
        in svg and "<circle" not in svg
    assert "Best speedup over time" in page and page.count("<circle") == 8


def test_sol_over_time_uses_the_stored_bests(run_dir):
    with RunReader(run_dir) as reader:
        report = build_report(reader)
    svg = sol_over_time_svg(report.progress, report.run, len(report.metrics))
    values = [v for _, v, title in _points(svg) if title.startswith("fleet mean SOL")]
    # Each solved problem's seed then best, in the order recorded; the mean of the bests so far at each:
    # 0.6; 0.8; (0.8 + 0.5) / 2; (0.8 + 0.6) / 2; (0.8 + 0.6 + 0.25) / 3; (0.8 + 0.6 + 0.5) / 3.
    assert values == ["0.600", "0.800", "0.650", "0.700", "0.550", "0.633"]
    assert values[-1] == f"{report.after.mean_sol:.3f}"


def test_report_names_the_workloads_not_evaluated(tmp_path, solution_dict, capsys):
    run = tmp_path / "skips"
    store = RunStore(run, create=True)
    store.init_run({}, [str(RMSNORM)], "cpu", [], "")
    pid = store.add_problem("norm/a", "a", "norm", "/p/norm/a")
    aid = store.begin_attempt(pid, None, solution_dict, language="pytorch")
    why = "skipped on the cpu: over 16 MiB of inputs and outputs (a GPU-sized workload)"
    verdict = {"status": "PASSED", "reason": "", "workloads": [
        {"index": 0, "status": "PASSED", "reason": ""}, {"index": 3, "status": "UNAVAILABLE", "reason": why},
        {"index": 4, "status": "UNAVAILABLE", "reason": why}]}
    store.finish_attempt(aid, status="PASSED", verdict=verdict, speedup=1.5)
    store.close()
    with RunReader(run) as reader:
        assert build_report(reader).not_evaluated == {"norm/a": [(3, why), (4, why)]}
    assert main(["report", str(run)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the line wraps at the terminal's width
    assert f" norm/a: workloads 3, 4 ({why})" in out


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
    # Which bests were re-verified with upstream's 10 rounds: the two norm problems' (the failed one has none).
    verified = {line.split()[0]: line.split()[-1] for line in out.splitlines() if line.split()[:1] and
                line.split()[0] in PLAN}
    assert verified == {"norm/001_rmsnorm_llama3_1_8b": "yes", "norm/p_b": "yes", "gemm/p_c": "no", ODD: "—"}, out
    assert "0.50x → 1.00x" in out and "— → —" in out
    lines = {line.strip().split("  ")[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert lines["geomean speedup"].endswith("1.00x → 2.00x")
    assert lines["beating the baseline"].endswith("1/4 (25%) → 2/4 (50%)")
    assert lines["above 2x"].endswith("0 → 1")
    assert lines["median SOL"].endswith("0.50 → 0.60")
    assert lines["mean SOL"].endswith("0.45 → 0.63")
    assert lines["problems with a result"].endswith("3/4 → 3/4")
    assert "10 attempts, 460 tokens, $1.1" in out and "14.0 GPU seconds" in out
    assert "  bests by: tuner 3" in out.splitlines()  # the odd problem has none
    # The latest sample that has a busy fraction (the last one has none yet).
    assert "GPU busy while work waited: 88%, mean queue wait 1.2 s" in out


def test_report_of_a_cpu_run_names_the_cpu(cpu_run):
    # Its attempts were evaluated on the CPU (no GPU index) and its pool's busy fraction is the CPU's.
    store = RunStore(cpu_run)
    pid = store.problems()[0].id
    aid = store.begin_attempt(pid, None, {"name": "timed"}, language="pytorch")
    store.finish_attempt(aid, status="PASSED", speedup=0.5, gpu_seconds=3.0, node="box", gpu=None, device_model="cpu")
    store.add_metric(fleet_mean_sol=None, geomean_speedup=1.0, gpu_busy=0.75, queue_wait_s=0.5, attempts=8,
                     tokens=0, dollars=0.0, active_problems=2)
    store.close()
    done = _kernelfleet("report", cpu_run)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "3.0 CPU seconds" in out and "CPU busy while work waited: 75%, mean queue wait 0.5 s" in out, out
    assert "box cpu: 1 attempt, 3.0 CPU seconds" in out, out
    assert "GPU" not in out, out


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
