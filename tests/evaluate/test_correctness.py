"""Honest solutions pass; wrong ones get the status that says why, with the worst error statistics; the rules are
SOL-ExecBench's (checked against its own ``compute_error_stats`` where the package is present)."""


import pytest
from upstream_sources import upstream_module
import torch
from evaluate_support import HONEST_DPS, HONEST_RETURNING, python_solution

from core.evaluate import Status
from core.evaluate.compare import compare_output, worst
from core.evaluate.verdict import ErrorStats
from core.problem.schema import Tolerance


def test_honest_dps_solution_passes_every_workload_with_timing(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(HONEST_DPS))
    assert verdict.status is Status.PASSED, verdict
    assert [w.index for w in verdict.workloads] == [0, 1]
    for workload in verdict.workloads:
        assert workload.passed and workload.errors.max_abs_error < 1e-5
        assert workload.timing.median_ms > 0 and workload.timing.calls >= 5
    assert any("scrubbed" in p for p in verdict.protections)


def test_honest_value_returning_solution_passes(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(HONEST_RETURNING, dps=False), workloads=(1,))
    assert verdict.status is Status.PASSED, verdict


def test_wrong_numbers_fail_with_error_statistics(cpu_pool, rmsnorm_problem):
    source = HONEST_DPS.replace("out.copy_(y * weight)", "out.copy_(y * weight * 1.01)")
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(source))
    assert verdict.status is Status.INCORRECT_NUMERICAL
    worst = verdict.workloads[0].errors
    assert worst.output == "out" and worst.max_abs_error > 1e-3 and worst.matched_ratio < 0.5
    assert "within atol" in verdict.workloads[0].reason


def test_unwritten_outputs_fail_because_they_are_poisoned(cpu_pool, rmsnorm_problem):
    source = HONEST_DPS.replace("out.copy_(y * weight)", "out[:-1].copy_((y * weight)[:-1])")
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(source), workloads=(0,))
    assert verdict.status is Status.INCORRECT_NUMERICAL
    assert "NaN" in verdict.reason


def test_nan_output_fails(cpu_pool, rmsnorm_problem):
    source = HONEST_DPS.replace("out.copy_(y * weight)", "out.copy_(y * weight); out[0, 0] = float('nan')")
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(source), workloads=(0,))
    assert verdict.status is Status.INCORRECT_NUMERICAL and "NaN" in verdict.reason


def test_all_zero_output_fails(cpu_pool, rmsnorm_problem):
    source = HONEST_DPS.replace("out.copy_(y * weight)", "out.zero_()")
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(source), workloads=(0,))
    assert verdict.status is Status.INCORRECT_NUMERICAL and "all zeros" in verdict.reason


WRONG_SHAPE = """import torch

def run(x, weight, eps):
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight)[:, :3]
"""

WRONG_DTYPE = """import torch

def run(x, weight, eps):
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight).double()
"""


def test_wrong_shape_and_dtype(cpu_pool, rmsnorm_problem):
    shape = cpu_pool.evaluate(rmsnorm_problem, python_solution(WRONG_SHAPE, dps=False), workloads=(0,))
    assert shape.status is Status.INCORRECT_SHAPE and "shape [8, 3], expected [8, 256]" in shape.reason
    dtype = cpu_pool.evaluate(rmsnorm_problem, python_solution(WRONG_DTYPE, dps=False), workloads=(0,))
    assert dtype.status is Status.INCORRECT_DTYPE and "float64" in dtype.reason


def test_modifying_an_input_is_caught(cpu_pool, rmsnorm_problem):
    source = HONEST_DPS.replace("out.copy_(y * weight)", "out.copy_(y * weight); x.mul_(0.5)")
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(source), workloads=(0,))
    assert verdict.status is Status.RUNTIME_ERROR and "modified input x" in verdict.reason


def test_exception_in_candidate_names_its_line(cpu_pool, rmsnorm_problem):
    source = HONEST_DPS.replace("    out.copy_(y * weight)", "    raise ValueError('bad tile')")
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution(source), workloads=(0,))
    assert verdict.status is Status.RUNTIME_ERROR
    assert verdict.reason == "workload 0: ValueError: bad tile (main.py:5)"


def test_import_failure_is_a_runtime_error(cpu_pool, rmsnorm_problem):
    verdict = cpu_pool.evaluate(rmsnorm_problem, python_solution("import not_a_module\n" + HONEST_DPS))
    assert verdict.status is Status.RUNTIME_ERROR and "could not load the solution" in verdict.reason


def test_reference_that_fails_is_invalid_reference(cpu_pool, rmsnorm_problem, tmp_path):
    import json
    import shutil

    from core.problem import load_problem

    folder = tmp_path / "norm" / "broken_ref"
    shutil.copytree(rmsnorm_problem.path, folder)
    definition = json.loads((folder / "definition.json").read_text())
    definition["reference"] = definition["reference"].replace("return (", "raise RuntimeError('ref bug'); return (")
    (folder / "definition.json").write_text(json.dumps(definition))
    verdict = cpu_pool.evaluate(load_problem(folder), python_solution(HONEST_DPS), workloads=(0,))
    assert verdict.status is Status.INVALID_REFERENCE and "ref bug" in verdict.reason


def test_the_reference_as_a_candidate_passes(cpu_pool, rmsnorm_problem):
    from core.solution.from_reference import reference_as_solution

    verdict = cpu_pool.evaluate(rmsnorm_problem, reference_as_solution(rmsnorm_problem))
    assert verdict.status is Status.PASSED, verdict.reason


CACHE_UPDATE_REFERENCE = '''import torch

def run(new_rows, cache, position):
    cache[position] = new_rows * 2
    return cache.clone(), new_rows.sum(dim=-1)
'''


def _cache_update_problem(folder):
    import json

    from core.problem import load_problem

    folder.mkdir(parents=True)
    definition = {
        "name": "cache_update", "description": "Writes rows into a cache in place, as a KV-cache update does.",
        "axes": {"rows": {"type": "const", "value": 4}, "slots": {"type": "const", "value": 32},
                 "width": {"type": "const", "value": 16}},
        "inputs": {"new_rows": {"shape": ["rows", "width"], "dtype": "float32"},
                   "cache": {"shape": ["slots", "width"], "dtype": "float32"},
                   "position": {"shape": None, "dtype": "int32"}},
        "outputs": {"cache_out": {"shape": ["slots", "width"], "dtype": "float32"},
                    "row_sums": {"shape": ["rows"], "dtype": "float32"}},
        "reference": CACHE_UPDATE_REFERENCE.replace("cache[position]", "cache[position:position + new_rows.shape[0]]"),
    }
    (folder / "definition.json").write_text(json.dumps(definition))
    line = {"uuid": "u0", "axes": {}, "inputs": {"new_rows": {"type": "random"}, "cache": {"type": "random"},
                                                  "position": {"type": "scalar", "value": 3}}}
    (folder / "workload.jsonl").write_text(json.dumps(line) + "\n")
    return load_problem(folder)


def test_an_input_the_reference_updates_in_place_may_be_updated_but_no_other(cpu_pool, tmp_path):
    from core.solution.from_reference import reference_as_solution

    problem = _cache_update_problem(tmp_path / "misc" / "cache_update")
    verdict = cpu_pool.evaluate(problem, reference_as_solution(problem))
    assert verdict.status is Status.PASSED, verdict.reason

    also_clears_new_rows = '''import torch

def run(new_rows, cache, position):
    cache[position:position + new_rows.shape[0]] = new_rows * 2
    sums = new_rows.sum(dim=-1)
    new_rows.zero_()
    return cache.clone(), sums
'''
    verdict = cpu_pool.evaluate(problem, python_solution(also_clears_new_rows, dps=False))
    assert verdict.status is Status.RUNTIME_ERROR and "modified input new_rows" in verdict.reason


# ---------------------------------------------------------------- upstream's rules, one comparison at a time

NAN, INF = float("nan"), float("inf")


upstream = upstream_module  # the name the comparisons below use


def compare(out, ref, **tolerance):
    return compare_output("out", torch.tensor(out), torch.tensor(ref), Tolerance(**tolerance))


def test_nan_fails_even_where_the_reference_has_nan():
    result = compare([1.0, NAN], [1.0, NAN])
    assert result.status is Status.INCORRECT_NUMERICAL and "NaN" in result.reason
    assert result.stats.has_nan and not result.stats.has_inf
    assert (result.stats.max_abs_error, result.stats.max_rel_error) == (0.0, 0.0)


def test_inf_fails_even_where_the_reference_has_the_same_inf():
    result = compare([1.0, INF], [1.0, INF])
    assert result.status is Status.INCORRECT_NUMERICAL and result.stats.has_inf and not result.stats.has_nan
    assert compare([1.0, -INF], [1.0, -INF]).status is Status.INCORRECT_NUMERICAL  # -inf needs allow_negative_inf


def test_a_nan_or_inf_in_the_reference_alone_fails():
    result = compare([1.0, 2.0], [1.0, NAN])
    assert result.status is Status.INCORRECT_NUMERICAL and result.stats.has_nan
    assert "the reference has 1 NaN/Inf elements" in result.reason


def test_allow_negative_inf_accepts_only_positions_where_both_are_negative_inf():
    allowed = compare([-INF, 1.0, 2.0], [-INF, 1.0, 2.5], allow_negative_inf=True, max_atol=1.0)
    assert allowed.status is Status.PASSED, allowed.reason
    assert allowed.stats.max_abs_error == pytest.approx(0.5)  # the -inf pair takes no part in the figures
    zero_for_minus_inf = compare([0.0, 1.0], [-INF, 1.0], allow_negative_inf=True)
    assert zero_for_minus_inf.status is Status.INCORRECT_NUMERICAL and zero_for_minus_inf.stats.has_inf
    minus_inf_for_zero = compare([-INF, 1.0], [0.0, 1.0], allow_negative_inf=True)
    assert minus_inf_for_zero.status is Status.INCORRECT_NUMERICAL
    assert compare([INF, 1.0], [INF, 1.0], allow_negative_inf=True).status is Status.INCORRECT_NUMERICAL


def test_tolerance_formula_is_atol_plus_rtol_times_the_reference():
    # bound at ref 100: 0.5 + 0.01 * 100 = 1.5
    assert compare([101.5], [100.0], max_atol=0.5, max_rtol=0.01, required_matched_ratio=1.0).status \
        is Status.PASSED
    assert compare([101.6], [100.0], max_atol=0.5, max_rtol=0.01, required_matched_ratio=1.0).status \
        is Status.INCORRECT_NUMERICAL


def test_default_matched_ratio_is_upstreams_099():
    assert Tolerance().required_matched_ratio == 0.99
    ref = torch.ones(200)
    one_wrong, three_wrong = ref.clone(), ref.clone()
    one_wrong[0] = 5.0
    three_wrong[:3] = 5.0
    passed = compare_output("out", one_wrong, ref, Tolerance())
    assert passed.status is Status.PASSED and passed.stats.matched_ratio == pytest.approx(0.995)
    assert passed.stats.max_abs_error == pytest.approx(4.0)
    failed = compare_output("out", three_wrong, ref, Tolerance())
    assert failed.status is Status.INCORRECT_NUMERICAL and "within atol" in failed.reason


def test_error_cap_fails_a_single_outlier_the_ratio_would_allow():
    ref = torch.ones(200)
    out = ref.clone()
    out[0] = 5.0
    result = compare_output("out", out, ref, Tolerance(max_error_cap=1.0))
    assert result.status is Status.INCORRECT_NUMERICAL and "exceeds the cap" in result.reason


def test_all_zero_output_fails_with_the_reference_norm_as_its_errors():
    result = compare([0.0, 0.0], [0.003, 0.004])  # within atol, all the same
    assert result.status is Status.INCORRECT_NUMERICAL and "all zeros" in result.reason
    assert result.stats.max_abs_error == pytest.approx(0.005)
    assert compare([0.0, 0.0], [0.0, 0.0]).status is Status.PASSED


def test_integer_outputs_are_compared_under_the_same_tolerance():
    ref = torch.tensor([150, 2], dtype=torch.int32)
    assert compare_output("ids", torch.tensor([151, 2], dtype=torch.int32), ref,
                          Tolerance(required_matched_ratio=1.0)).status is Status.PASSED  # 1 <= 0.01 + 1.5
    assert compare_output("ids", torch.tensor([150, 3], dtype=torch.int32), ref,
                          Tolerance(required_matched_ratio=1.0)).status is Status.INCORRECT_NUMERICAL


def test_kernelfleet_checks_stay_on_top():
    class Lazy(torch.Tensor):
        pass

    ref = torch.ones(4)
    assert compare_output("out", ref.clone().as_subclass(Lazy), ref, Tolerance()).status is Status.REWARD_HACK
    assert compare_output("out", torch.ones(2, 2), ref, Tolerance()).status is Status.INCORRECT_SHAPE
    assert compare_output("out", torch.ones(4, dtype=torch.float64), ref, Tolerance()).status \
        is Status.INCORRECT_DTYPE


def test_scalar_outputs_follow_the_same_rules():
    assert compare_output("s", 1.005, 1.0, Tolerance()).status is Status.PASSED
    assert compare_output("s", 0.0, 0.5, Tolerance()).status is Status.INCORRECT_NUMERICAL
    nan = compare_output("s", NAN, NAN, Tolerance())
    assert nan.status is Status.INCORRECT_NUMERICAL and nan.stats.has_nan


def test_worst_reports_a_nan_before_an_inf_before_the_largest_error():
    big, inf, nan = ErrorStats(9.0, 1.0, 0.5, "a"), ErrorStats(0.0, 0.0, 0.9, "b", has_inf=True), \
        ErrorStats(0.0, 0.0, 0.9, "c", has_nan=True)
    assert worst([big, inf, nan]).output == "c" and worst([big, inf]).output == "b"
    assert worst([ErrorStats(1.0), big]).output == "a"


UPSTREAM_CASES = [
    ([1.0, 2.0, 3.0], [1.0, 2.001, 3.0], {}),
    ([1.0, 2.5, 3.0], [1.0, 2.0, 3.0], {"max_atol": 0.1, "max_rtol": 0.1}),
    ([1.0, 2.5, 3.0], [1.0, 2.0, 3.0], {"max_atol": 0.1, "max_rtol": 0.1, "required_matched_ratio": 0.6}),
    ([1.0, 2.5, 3.0], [1.0, 2.0, 3.0], {"max_atol": 1.0, "max_error_cap": 0.4}),
    ([1.0, NAN], [1.0, NAN], {}),
    ([1.0, 2.0], [1.0, NAN], {}),
    ([1.0, INF], [1.0, INF], {}),
    ([-INF, 1.0], [-INF, 1.0], {}),
    ([-INF, 1.0], [-INF, 1.2], {"allow_negative_inf": True}),
    ([0.0, 1.0], [-INF, 1.0], {"allow_negative_inf": True}),
    ([INF, 1.0], [INF, 1.0], {"allow_negative_inf": True}),
    ([0.0, 0.0], [0.003, 0.004], {}),
    ([0.0, 0.0], [0.0, 0.0], {}),
    ([1e-3, 5.0], [0.0, 4.0], {"max_atol": 0.0, "max_rtol": 0.5}),
    ([3e38, 1.0], [-3e38, 1.0], {"required_matched_ratio": 0.5}),
]


@pytest.mark.parametrize("out, ref, tolerance", UPSTREAM_CASES)
def test_same_decision_and_figures_as_upstream(out, ref, tolerance):
    correctness = upstream("sol_execbench.core.bench.correctness")
    workload = upstream("sol_execbench.core.data.workload")
    theirs, exceeds = correctness.compute_error_stats(torch.tensor(out), torch.tensor(ref),
                                                      workload.ToleranceSpec(**tolerance))
    ours = compare(out, ref, **tolerance)
    assert (ours.status is Status.PASSED) == (not exceeds), ours.reason
    assert (ours.stats.has_nan, ours.stats.has_inf) == (theirs.has_nan, theirs.has_inf)
    assert ours.stats.max_abs_error == pytest.approx(theirs.max_absolute_error)
    if tolerance.get("max_atol", 1e-2) > 0:  # upstream's relative error divides by zero with max_atol 0
        assert ours.stats.max_rel_error == pytest.approx(theirs.max_relative_error)


# ---------------------------------------------------------------- the ratio a workload file sets, end to end

ONE_ELEMENT_OFF = HONEST_DPS.replace("out.copy_(y * weight)", "out.copy_(y * weight); out[0, 0] += 1.0")


def test_misspelt_ratio_key_is_ignored_and_the_default_applies(cpu_pool, rmsnorm_problem, tmp_path):
    import json
    import shutil

    from core.problem import load_problem

    folder = tmp_path / "norm" / "ratio_keys"
    shutil.copytree(rmsnorm_problem.path, folder)
    lines = [json.loads(line) for line in (folder / "workload.jsonl").read_text().splitlines()]
    lines[0]["tolerance"]["required_match_ratio"] = 1.0  # not upstream's field: 0.99 stays in force
    lines[1]["tolerance"]["required_matched_ratio"] = 1.0
    (folder / "workload.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    problem = load_problem(folder)
    assert [w.tolerance.required_matched_ratio for w in problem.workloads] == [0.99, 1.0]
    verdict = cpu_pool.evaluate(problem, python_solution(ONE_ELEMENT_OFF))
    first, second = verdict.workloads
    assert first.status is Status.PASSED, first.reason
    assert first.errors.matched_ratio == pytest.approx(1 - 1 / (8 * 256)) and first.errors.max_abs_error >= 0.9
    assert second.status is Status.INCORRECT_NUMERICAL and "need 100.0000%" in second.reason
