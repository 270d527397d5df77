"""The complete brief: every workload as one compact table row (an upstream problem's 16, a generated one's 48), the
correctness bounds in full, each input's kind, and the workloads that fail or lag named in one line; and the op
families that group like problems on one notes board, from what their references call (pure functions)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from upstream_sources import SOL_EXECBENCH

from core.fleet.similar import DEFAULT_FAMILY, op_family, reference_calls, reference_family
from core.llm.brief import problem_brief
from core.problem import load_problems
from core.store.model import AttemptRow, ProblemRow, WorkloadInfo

BENCHMARK = SOL_EXECBENCH / "benchmark"
RMS_NORM = BENCHMARK / "L1" / "069_rms_norm"
LM_HEAD = BENCHMARK / "L1" / "003_lm_head_projection_with_logit_slicing"


def _row(problem, infos=(), key="L1/p") -> ProblemRow:
    return ProblemRow(1, key, problem.name, problem.subset, str(problem.path), "", 0, False, False, "active", None,
                      None, None, None, None, None, 0, 0, 0, 0, 0.0, 0.0, 0.0, None, tuple(infos))


def _attempt(i: int, status: str, times=None, verdict=None, language="cuda") -> AttemptRow:
    return AttemptRow(i, 1, 7, None, "done", 0.0, 1.0, language, {}, "", {}, "", None, None, verdict, status, "",
                      times_ms=times or {}, speedup=1.0 if status == "PASSED" else None)


def _table_rows(brief: str) -> dict[int, str]:
    return {int(m.group(1)): line for line in brief.splitlines() if (m := re.match(r"\| (\d+) \|", line))}


def test_an_upstream_problem_with_16_workloads_lists_every_one_with_its_tolerance_and_input_kinds():
    if not RMS_NORM.is_dir():
        pytest.skip(f"SOL-ExecBench's benchmark is not at {BENCHMARK}")
    problem = load_problems([str(RMS_NORM)]).problems[0]
    assert len(problem.workloads) == 16
    infos = [WorkloadInfo(w.index, "", 0.1 + w.index / 100, 0.01, "eager", bound="memory") for w in problem.workloads]
    brief = problem_brief(problem, _row(problem, infos), None, [])
    rows = _table_rows(brief)
    assert sorted(rows) == list(range(16)) and "more workloads" not in brief
    axes = problem.workloads[15].axes
    assert "| w | batch_size | seq_len | T_b | T_sol | bound | best | T_b/best |" in brief
    assert rows[15] == f"| 15 | {axes['batch_size']} | {axes['seq_len']} | 0.25 e | 0.01 | mem | - | - |"
    assert ("Here: atol 1e-05, rtol 0.05, matched ratio 0.99, error cap none, matching -inf fails." in brief)
    assert "- input hidden_states: [batch_size, seq_len, hidden_size] bfloat16, random" in brief
    assert re.search(r"- input eps: scalar float32, scalar 1e-0[56]", brief)
    assert "Failing or lagging: no passing time on w0-15 (not passed yet)." in brief


def _write_48(folder: Path) -> Path:
    """A problem of 48 workloads: a var axis, an atol and a scalar that differ per workload, a cap and a ratio."""
    folder.mkdir(parents=True)
    definition = {
        "name": "scaled_rows", "description": "x * scale",
        "axes": {"rows": {"type": "var"}, "width": {"type": "const", "value": 64}},
        "inputs": {"x": {"shape": ["rows", "width"], "dtype": "float32", "description": "activations, N(0,1)"},
                   "scale": {"shape": None, "dtype": "float32"}},
        "outputs": {"out": {"shape": ["rows", "width"], "dtype": "float32"}},
        "reference": "import torch\n\ndef run(x, scale):\n    return x * scale\n",
    }
    (folder / "definition.json").write_text(json.dumps(definition))
    lines = [{"uuid": f"w{i}", "axes": {"rows": 64 * (i + 1)},
              "inputs": {"x": {"type": "random"}, "scale": {"type": "scalar", "value": 0.5 + (i % 3)}},
              "tolerance": {"max_atol": 1e-3 * (1 + i % 2), "max_rtol": 1e-3, "required_matched_ratio": 0.95,
                            "max_error_cap": 0.5}} for i in range(48)]
    (folder / "workload.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return folder


def test_a_48_workload_brief_stays_compact_and_names_what_fails_or_lags(tmp_path):
    problem = load_problems([str(_write_48(tmp_path / "gen" / "scaled_rows"))]).problems[0]
    infos = [WorkloadInfo(i, "", 1.0, 0.1, "torch.compile", bound="memory") for i in range(48)]
    times = {i: 0.5 for i in range(46)}
    times[5], times[9], times[3] = 2.0, 4.0, 0.3  # slower than T_b twice; the furthest from T_sol
    best = _attempt(10, "PASSED", times)
    faster_on_3 = _attempt(11, "PASSED", {3: 0.2})
    failed = _attempt(12, "INCORRECT_NUMERICAL", verdict={"workloads": [
        {"index": 46, "status": "INCORRECT_NUMERICAL"}, {"index": 2, "status": "PASSED"}]})
    brief = problem_brief(problem, _row(problem, infos, "gen/scaled_rows"), best, [best, faster_on_3, failed])
    rows = _table_rows(brief)
    assert sorted(rows) == list(range(48))
    # A row per workload: its var axis, the atol and scalar that differ, T_b, T_sol, bound, best and speedup.
    assert "| w | rows | atol | scale | T_b | T_sol | bound | best | T_b/best |" in brief
    assert rows[3] == "| 3 | 256 | 0.002 | 0.5 | 1 c | 0.1 | mem | 0.2 #11 | 5x |"
    assert rows[47] == "| 47 | 3072 | 0.002 | 2.5 | 1 c | 0.1 | mem | - | - |"
    assert max(len(line) for line in rows.values()) <= 60
    table = brief[brief.index("## Workloads"):brief.index("## Correctness")]
    assert len(table) < 48 * 60 + 1200, len(table)
    assert len(brief) < 8000, len(brief)
    assert ("Here: atol per workload (the table's column), rtol 0.001, matched ratio 0.95, error cap 0.5, "
            "matching -inf fails.") in brief
    assert "- input x: [rows, width] float32, random — activations, N(0,1)" in brief
    assert "- input scale: scalar float32, scalar, its value per workload in the table" in brief
    lagging = next(line for line in brief.splitlines() if line.startswith("Failing or lagging: "))
    assert lagging == ("Failing or lagging: no passing time on w46 (INCORRECT_NUMERICAL, newest attempt 12), w47 "
                       "(not passed yet); slower than T_b: w9 0.25x, w5 0.5x; furthest from T_sol: w9 40x T_sol, "
                       "w5 20x T_sol, w0 5x T_sol; the current best (attempt 10) trails on w3 (1.5x attempt 11's "
                       "time).")


def test_op_families_come_from_what_the_reference_calls():
    gemm = "import torch\n\ndef run(a, b):\n    return a @ b\n"
    rms = ("import torch\n\ndef _rms(x, eps):\n    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)\n\n"
           "def run(x, w, eps):\n    return _rms(x, eps) * w\n")
    custom = ("import torch\n\ndef get_inputs(axes, device):\n    return {'x': torch.randn(4, device=device)}\n\n"
              "def run(x):\n    return torch.sigmoid(x)\n")
    assert reference_calls(gemm) == {"matmul"} and reference_family(gemm) == "gemm"
    assert {"rsqrt", "mean", "pow", "_rms"} <= reference_calls(rms) and reference_family(rms) == "norm"
    assert reference_calls(custom) == {"sigmoid"} and reference_family(custom) == DEFAULT_FAMILY
    assert reference_family("def run(:") == ""
    row = ProblemRow(1, "L1/p", "p", "L1", "/p", "", 0, False, False, "active", None, None, None, None, None, None,
                     0, 0, 0, 0, 0.0, 0.0, 0.0, None)
    assert op_family(row, gemm) == "gemm" and op_family(row, "def run(:") == "L1"
    from dataclasses import replace
    assert op_family(replace(row, op="sampling"), gemm) == "sampling"  # upstream's op_type wins


def test_the_l1_problems_fall_into_several_families_and_a_gemm_is_not_an_rmsnorm():
    if not (RMS_NORM.is_dir() and LM_HEAD.is_dir()):
        pytest.skip(f"SOL-ExecBench's benchmark is not at {BENCHMARK}")
    families = {}
    for definition in sorted((BENCHMARK / "L1").glob("*/definition.json")):
        families[definition.parent.name] = reference_family(json.loads(definition.read_text())["reference"])
    assert len(set(families.values())) >= 5, families
    assert families[LM_HEAD.name] == "gemm" and families[RMS_NORM.name] == "norm"
