"""`kernelfleet report` at the terminal's width (issue 34, "80 columns"): at 80 and 60 columns every figure of
every problem is printed whole and no line is wider than the terminal; at 120 and 200 there is one row per problem;
the summary wraps without losing text. The run store is a real one, with SOL-ExecBench-long problem keys."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli.report_cmd import fmt_sol, fmt_x, split_key
from core.report import build_report
from core.report.metrics import ProblemSummary, RunReport, comparison_rows, verified_label
from core.store import LlmCall, RunReader, RunStore

ROOT = Path(__file__).resolve().parents[2]
LONG_KEY = "L2/079_fused_rmsnorm_residual_quant_fp8_llama3_1_70b"
LONGER_KEY = "FlashInfer-Bench/gqa_paged_decode_h32_kv8_d128_ps1_with_sliding_window"  # 70: wraps at 60
NO_BEST_KEY = "L3/101_deepseek_v3_mla_decode_absorbed_fp8_kv_cache"
ONE_ATTEMPT_KEY = "L1/003_gelu_tanh_approximation"
SKIP_REASON = "skipped on the cpu: over 16 MiB of inputs and outputs (a GPU-sized workload)"

# key -> (status, [(speedup, SOL) of each passing attempt after the seed], seed (speedup, SOL), re-verified);
# a seed of None: every attempt failed (no best)
PLAN = {
    LONG_KEY: ("active", [(3.1, 0.4), (12.34, 0.87)], (0.47, 0.12), "passed: 10 rounds of fresh inputs"),
    "L1/012_rmsnorm_llama3_1_8b": ("plateaued", [(2.8, 0.64)] * 11, (1.04, 0.31), ""),
    LONGER_KEY: ("over budget", [(1.37, 0.09), (1.2, 0.08)], (0.98, 0.05), "failed: round 3 mismatched"),
    ONE_ATTEMPT_KEY: ("active", [], (1.1, 0.42), ""),
    NO_BEST_KEY: ("failed", [], None, ""),
}


def _solution(name: str) -> dict:
    return {"name": name, "definition": "d", "author": "test", "spec": {}, "sources": []}


def _add_problem(store: RunStore, agent: int, key: str, plan) -> None:
    status, tries, seed_figures, verified = plan
    subset, name = key.split("/")
    pid = store.add_problem(key, name, subset, f"/problems/{key}")
    gpu = 1 if key == ONE_ATTEMPT_KEY else 0  # GPU 1 evaluates one attempt in all: "1 attempt"
    if seed_figures is None:
        for n in range(2):
            aid = store.begin_attempt(pid, agent, _solution(f"broken{n}"), language="cuda_cpp")
            store.finish_attempt(aid, status="COMPILE_ERROR", reason="nvcc failed", gpu_seconds=0.0,
                                 node="gpu-node-07", gpu=gpu, device_model="NVIDIA H200")
        store.update_problem(pid, status=status, attempts=2, failures_in_row=2)
        return
    seed = store.begin_attempt(pid, None, _solution(f"seed_{name}"), language="cuda_cpp")
    verdict = {"status": "PASSED", "reason": "", "workloads": [
        {"index": 0, "status": "PASSED", "reason": ""}, {"index": 5, "status": "UNAVAILABLE", "reason": SKIP_REASON},
        {"index": 6, "status": "UNAVAILABLE", "reason": SKIP_REASON}]} if key == LONG_KEY else None
    store.finish_attempt(seed, status="PASSED", verdict=verdict, speedup=seed_figures[0], sol=seed_figures[1],
                         gpu_seconds=61.7, node="gpu-node-07", gpu=gpu, device_model="NVIDIA H200")
    best, best_figures = seed, seed_figures
    for n, (speedup, sol) in enumerate(tries):
        store.add_llm_call(agent, pid, LlmCall("tool_calls", 610_000, 27_000, dollars=6.1))
        aid = store.begin_attempt(pid, agent, _solution(f"try{n}_{name}"), language="cuda_cpp", parent_id=best)
        store.finish_attempt(aid, status="PASSED", verdict=verdict, speedup=speedup, sol=sol, gpu_seconds=42.5,
                             node="gpu-node-07", gpu=gpu, device_model="NVIDIA H200")
        if speedup > best_figures[0]:
            best, best_figures = aid, (speedup, sol)
    if verified:
        store.set_attempt_verified(best, verified)
    store.update_problem(pid, status=status, attempts=1 + len(tries), seed_attempt_id=seed,
                         seed_speedup=seed_figures[0], seed_sol=seed_figures[1], best_attempt_id=best,
                         best_speedup=best_figures[0], best_sol=best_figures[1])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("width") / "run"
    store = RunStore(run, create=True)
    store.init_run({"agents": 4}, ["/problems"], "cuda", [0, 1], "NVIDIA H200")
    agent = store.add_agent("llm-1", "llm")
    for key, plan in PLAN.items():
        _add_problem(store, agent, key, plan)
    store.add_metric(fleet_mean_sol=0.5, geomean_speedup=2.0, gpu_busy=0.875, queue_wait_s=12.25, attempts=21,
                     tokens=0, dollars=0.0, active_problems=4)
    store.set_run_state("running")
    store.close()
    return run


@pytest.fixture(scope="module")
def report(run_dir) -> RunReport:
    with RunReader(run_dir) as reader:
        return build_report(reader)


def _report_at(run_dir: Path, columns: int | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    done = subprocess.run([sys.executable, "-m", "cli.main", "report", str(run_dir)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _flat(text: str) -> str:
    """``text`` with every run of spaces and line breaks as one space: what wrapping a line cannot change."""
    return " ".join(text.split())


# ---------------------------------------------------------------- reading a problem's figures back


def _key_start(lines: list[str], key: str) -> tuple[int, int]:
    """(first line, lines taken) of ``key`` as printed: whole as a line's first word, or wrapped, its pieces the
    first words of the lines that follow."""
    first_words = [line.split()[0] if line.split() else "" for line in lines]
    for start, word in enumerate(first_words):
        taken, end = word, start + 1
        while taken and key.startswith(taken) and taken != key and end < len(lines):
            taken, end = taken + first_words[end], end + 1
        if taken == key:
            return start, end - start
    raise AssertionError(f"{key} not printed whole")


def _arrow(before: str, after: str, unit: str) -> str:
    """A regex for "seed → best" as the report may print it: "0.47x → 12.34x", or "0.47→12.34x" when narrow."""
    def figure(text: str, last: bool) -> str:
        number = re.escape(text.removesuffix(unit))
        if text == "—" or not unit:
            return number
        return number + re.escape(unit) + ("" if last else "?")

    return rf"(?<![\d.]){figure(before, False)}\s*→\s*{figure(after, True)}(?![\d.])"


def _figures(lines: list[str], p: ProblemSummary) -> tuple[int, str]:
    """(the line, its text less the key's piece) holding ``p``'s figures: its key's first line when they share it
    (one row per problem), else the line after the key."""
    start, taken = _key_start(lines, p.key)
    words = lines[start].split(None, 1)
    return (start, words[1]) if len(words) > 1 else (start + taken, lines[start + taken])


def _assert_problem_whole(lines: list[str], p: ProblemSummary) -> None:
    _, text = _figures(lines, p)
    assert re.search(_arrow(fmt_x(p.seed_speedup), fmt_x(p.best_speedup), "x"), text), (p.key, text)
    assert re.search(_arrow(fmt_sol(p.seed_sol), fmt_sol(p.best_sol), ""), text), (p.key, text)
    assert re.search(rf"(?<!\S){re.escape(p.status)}(?!\S)", text), (p.key, text)
    assert re.search(rf"(?<![\d.]){p.attempts}(?![\d.])", text), (p.key, text)
    assert text.split()[-1] == verified_label(p), (p.key, text)


def _assert_summary_whole(out: str, report: RunReport) -> None:
    flat = _flat(out)
    for name, before, after in comparison_rows(report.before, report.after, fmt_x, fmt_sol):
        assert f"{name} {before} → {after}" in flat, name
    assert "21 attempts, 9555000 tokens, $91.50, 884.3 GPU seconds" in flat
    assert "GPU busy while work waited: 88%, mean queue wait 12.2 s (since the last start)" in flat
    assert "gpu-node-07 GPU 0 (NVIDIA H200): 20 attempts, 822.6 GPU seconds" in flat
    assert "gpu-node-07 GPU 1 (NVIDIA H200): 1 attempt, 61.7 GPU seconds" in flat
    assert f"{LONG_KEY}: workloads 5, 6 ({SKIP_REASON})" in flat


def _assert_fits(out: str, columns: int) -> None:
    assert "…" not in out and "..." not in out
    too_wide = [line for line in out.splitlines() if len(line) > columns]
    assert not too_wide, "\n".join(too_wide)


# ---------------------------------------------------------------- the tests


def test_the_store_is_what_the_tests_expect(report):
    assert [p.key for p in report.problems] == list(PLAN)
    assert [(p.attempts, p.best_speedup) for p in report.problems][:2] == [(3, 12.34), (12, 2.8)]
    assert report.problems[-1].best_speedup is None and verified_label(report.problems[-1]) == "—"
    assert report.after.attempts == 21 and len(report.devices) == 2


@pytest.mark.parametrize("columns", [80, 60])
def test_narrow_terminals_get_every_figure_whole(run_dir, report, columns):
    out = _report_at(run_dir, columns)
    _assert_fits(out, columns)
    lines = out.splitlines()
    for p in report.problems:
        _assert_problem_whole(lines, p)
    _assert_summary_whole(out, report)


def test_at_80_columns_the_sol_execbench_keys_are_not_wrapped(run_dir, report):
    lines = _report_at(run_dir, 80).splitlines()
    for p in report.problems:
        assert any(line.split()[:1] == [p.key] for line in lines), p.key


def test_at_60_columns_a_key_longer_than_the_line_wraps_whole(run_dir):
    lines = _report_at(run_dir, 60).splitlines()
    start, taken = _key_start(lines, LONGER_KEY)
    assert taken == 2


@pytest.mark.parametrize("columns", [200, 120, None])  # None: not a terminal, COLUMNS unset (160)
def test_wide_terminals_get_one_row_per_problem(run_dir, report, columns):
    out = _report_at(run_dir, columns)
    _assert_fits(out, columns or 160)
    lines = out.splitlines()
    for p in report.problems:
        assert _figures(lines, p)[0] == _key_start(lines, p.key)[0], p.key  # the key and its figures share a row
        _assert_problem_whole(lines, p)
    _assert_summary_whole(out, report)


def test_at_200_columns_no_key_wraps(run_dir, report):
    lines = _report_at(run_dir, 200).splitlines()
    for p in report.problems:
        assert _key_start(lines, p.key)[1] == 1, p.key


def test_plurals(run_dir):
    out = _report_at(run_dir, 80)
    assert not re.search(r"(?<![\d.])1 (attempts|tokens|workloads)\b", out)
    assert "1 attempt," in out


def test_narrower_than_any_layout_the_figures_stay_whole(run_dir, report):
    # 40 columns: the figures' line is wider, and the terminal wraps it; nothing is cut.
    out = _report_at(run_dir, 40)
    assert "…" not in out
    lines = out.splitlines()
    for p in report.problems:
        _assert_problem_whole(lines, p)
    # A key longer than a summary line is broken where the line ends, its characters all there.
    squeezed = "".join(out.split())
    assert "".join(f"{LONG_KEY}: workloads 5, 6 ({SKIP_REASON})".split()) in squeezed
    assert "".join("21 attempts, 9555000 tokens, $91.50, 884.3 GPU seconds".split()) in squeezed


@pytest.mark.parametrize("width", [0, 8, 20, 37, 60])
def test_a_key_splits_after_its_separators_into_pieces_that_fit(width):
    pieces = split_key(LONGER_KEY, width)
    assert "".join(pieces) == LONGER_KEY and all(pieces)
    # The first piece fits the width, the others (indented by 2) 2 fewer; 8 at the least.
    assert len(pieces[0]) <= max(width, 8) and all(len(piece) <= max(width - 2, 8) for piece in pieces[1:])
    assert all(piece[-1] in "/_-" for piece in pieces[:-1]) or width < 16


def test_a_key_that_fits_is_one_piece():
    assert split_key(LONG_KEY, len(LONG_KEY)) == [LONG_KEY]
