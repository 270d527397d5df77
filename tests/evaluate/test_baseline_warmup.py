"""torch.compile's warm-up for T_b runs beside candidates on the GPU, so it calls the compiled reference only where
dynamo may compile another graph: the first input set, and each set whose Python scalars differ."""

from __future__ import annotations

import json
import threading

import pytest
from evaluate_support import QUICK

from core.evaluate import baseline as tb
from core.problem import load_problem

SCALED = '''import torch

@torch.no_grad()
def run(x, alpha):
    return x * alpha
'''


def scaled_problem(root, alpha_source: dict):
    folder = root / "misc" / "scaled"
    folder.mkdir(parents=True)
    (folder / "definition.json").write_text(json.dumps({
        "name": "scaled", "description": "x times a scalar.",
        "axes": {"n": {"type": "var"}}, "custom_inputs_entrypoint": None,
        "inputs": {"x": {"shape": ["n"], "dtype": "float32"}, "alpha": {"shape": None, "dtype": "float32"}},
        "outputs": {"y": {"shape": ["n"], "dtype": "float32"}},
        "reference": SCALED,
    }))
    (folder / "workload.jsonl").write_text(json.dumps(
        {"uuid": "w0", "axes": {"n": 256}, "inputs": {"x": {"type": "random"}, "alpha": alpha_source},
         "tolerance": {"max_atol": 1e-5, "max_rtol": 1e-5}}) + "\n")
    return load_problem(folder)


def warm_calls(problem) -> tuple[list, tb.WorkloadBaseline]:
    """The scalar of each call the compiled reference got during the compile's warm-up, and the result."""
    calls = []

    def counting_compiler(fn, **options):
        def compiled(x, alpha):
            if threading.current_thread().name == tb.COMPILE_THREAD_NAME:
                calls.append(alpha)
            return fn(x, alpha)
        return compiled

    result, _ = tb.measure_workload(problem, 0, "cpu", QUICK, compile_fn=counting_compiler)
    return calls, result


@pytest.mark.parametrize("alpha_source, expected_calls", [
    ({"type": "scalar", "value": 0.5}, 1),  # every set alike but for x: the first set compiles the one graph
    ({"type": "random"}, tb.DEFAULT_INPUT_SETS),  # a random scalar per set: each may need its own graph
])
def test_the_warm_up_calls_only_sets_that_may_compile_another_graph(tmp_path, alpha_source, expected_calls):
    calls, result = warm_calls(scaled_problem(tmp_path, alpha_source))
    assert len(calls) == expected_calls == len(set(calls)), calls
    assert result.ok and result.compiled_ms is not None, result  # the first set's output matched eager's
