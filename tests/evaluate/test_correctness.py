"""Honest solutions pass; wrong ones get the status that says why, with the worst error statistics."""

from evaluate_support import HONEST_DPS, HONEST_RETURNING, python_solution

from core.evaluate import Status


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
