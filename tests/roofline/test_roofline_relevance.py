"""The relevance probe: inputs charged only for the elements that can influence the outputs."""

import json
import time
from pathlib import Path

import pytest

from core.problem import load_problem
from core.roofline import count_workload, lookup_spec, t_sol
from core.roofline.footprint import SECTOR
from core.roofline.relevance import compile_with_grad, probe_instance, relevant_fractions

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ROOT / "problems"
H200 = lookup_spec("NVIDIA H200")


def our_problem(pattern: str):
    matches = sorted(PROBLEMS.glob(pattern))
    assert matches, f"no problem matches {pattern}"
    return load_problem(matches[0])


def write_problem(folder: Path, reference: str, inputs: dict, outputs: dict, axes: dict, workload_axes: dict):
    folder.mkdir(parents=True)
    definition = {"name": folder.name, "description": "test", "axes": axes, "custom_inputs_entrypoint": None,
                  "inputs": inputs, "outputs": outputs, "reference": reference}
    workload = {"uuid": "w0", "axes": workload_axes, "inputs": {n: {"type": "random"} for n in inputs}}
    (folder / "definition.json").write_text(json.dumps(definition))
    (folder / "workload.jsonl").write_text(json.dumps(workload) + "\n")
    return load_problem(folder)


def test_causal_softmax_scores_are_charged_for_the_lower_triangle_only():
    problem = our_problem("attention/002_scaled_causal_softmax*")
    small, large = problem.workloads[0], problem.workloads[-1]

    # The smallest workload is probed as it is: the causal triangle of each S x S block, less the one score of
    # row 0, whose softmax is 1 whatever its value.
    s = small.resolved_axes["seq_len"]
    probe = relevant_fractions(problem, small)
    assert probe.ok and not probe.shrunk, probe.reason
    assert round(probe.fractions["scores"] * s * s) in (s * (s + 1) // 2 - 1, s * (s + 1) // 2)

    axes = large.resolved_axes
    b, h, s = axes["batch_size"], axes["num_heads"], axes["seq_len"]
    scores_bytes = 2 * b * h * s * s
    full = count_workload(problem, large, relevance=False)
    count = count_workload(problem, large)
    assert full.exact and count.exact, (full.method, count.method)
    assert dict(full.relevant_fraction) == {}
    fraction = count.relevant_fraction["scores"]
    assert 0.45 <= fraction <= 0.55
    assert fraction >= (s + 1) / (2 * s)  # probed on a smaller instance: errs on the side of more bytes
    charged = -(-int(fraction * scores_bytes + 0.999) // SECTOR) * SECTOR
    assert full.bytes_read == scores_bytes
    assert count.bytes_read == pytest.approx(charged, abs=SECTOR)
    assert count.bytes_written == full.bytes_written == scores_bytes  # every probability is still written
    assert any("relevance probe" in n and "scores" in n for n in count.notes), count.notes

    old, new = t_sol(full, H200), t_sol(count, H200)
    assert old.bound == new.bound == "memory"
    expected = 0.4e-6 + (charged + scores_bytes) / H200.memory_bandwidth_bytes_s
    assert new.t_sol_s == pytest.approx(expected, rel=1e-6)
    assert 0.74 < (new.t_sol_s - 0.4e-6) / (old.t_sol_s - 0.4e-6) < 0.78


def test_unmasked_rmsnorm_keeps_every_byte():
    problem = our_problem("norm/001_rmsnorm*")
    for workload in (problem.workloads[0], problem.workloads[-1]):
        count = count_workload(problem, workload)
        full = count_workload(problem, workload, relevance=False)
        assert dict(count.relevant_fraction) == {"hidden_states": 1.0, "weight": 1.0}
        assert count.bytes_read == full.bytes_read and count.bytes_written == full.bytes_written
        assert t_sol(count, H200).t_sol_s == t_sol(full, H200).t_sol_s
        assert not any("relevance" in n for n in count.notes), count.notes


NON_DIFFERENTIABLE = {
    # x reaches the output only through argmax indices: no gradient, yet every element matters.
    "argmax": "import torch\n\n@torch.no_grad()\ndef run(x, y):\n"
              "    idx = x.argmax(dim=-1, keepdim=True)\n    return y * 2.0, torch.gather(x, -1, idx) * 0 + idx\n",
    # round() has a zero gradient everywhere.
    "round": "import torch\n\ndef run(x, y):\n    return y + 1.0, torch.round(x * 4.0)\n",
    # a graph cut: detach
    "detach": "import torch\n\ndef run(x, y):\n    return y + 1.0, x.detach() * 2.0 + y.sum()\n",
    # ReLU: which elements get a gradient depends on their values, not on the shapes.
    "relu": "import torch\n\ndef run(x, y):\n    return y + 1.0, torch.relu(x) + 0.0 * y.sum()\n",
}


@pytest.mark.parametrize("kind", sorted(NON_DIFFERENTIABLE))
def test_non_differentiable_paths_fall_back_to_every_byte(tmp_path, kind):
    problem = write_problem(
        tmp_path / kind, NON_DIFFERENTIABLE[kind],
        inputs={"x": {"shape": ["N", "D"], "dtype": "bfloat16"}, "y": {"shape": ["N", "D"], "dtype": "float32"}},
        outputs={"a": {"shape": ["N", "D"], "dtype": "float32"}, "b": {"shape": ["N", "D"], "dtype": "float32"}},
        axes={"N": {"type": "var"}, "D": {"type": "const", "value": 64}}, workload_axes={"N": 256})
    workload = problem.workloads[0]
    probe = relevant_fractions(problem, workload)
    assert not probe.ok and not probe.fractions
    count = count_workload(problem, workload)
    full = count_workload(problem, workload, relevance=False)
    assert count.exact, count.method
    assert dict(count.relevant_fraction) == {}
    assert count.bytes_read == full.bytes_read
    assert any("relevance probe gave up" in n for n in count.notes), count.notes


MASKED_REFERENCE = '''import torch

@torch.no_grad()
def run(x, w):
    keep = torch.ones(x.shape[-1], dtype=torch.bool, device=x.device)
    keep[x.shape[-1] // 4:] = False
    return (x.masked_fill(~keep, 0.0) * w).sum(dim=-1)
'''


def test_masked_columns_reduce_the_input_under_no_grad(tmp_path):
    """A structural mask built from shapes, inside a ``@torch.no_grad()`` reference: a quarter of x matters."""
    problem = write_problem(
        tmp_path / "masked", MASKED_REFERENCE,
        inputs={"x": {"shape": ["N", "D"], "dtype": "bfloat16"}, "w": {"shape": ["D"], "dtype": "bfloat16"}},
        outputs={"out": {"shape": ["N"], "dtype": "bfloat16"}},
        axes={"N": {"type": "var"}, "D": {"type": "var"}}, workload_axes={"N": 4096, "D": 1024})
    workload = problem.workloads[0]
    count = count_workload(problem, workload)
    assert count.relevant_fraction["x"] == pytest.approx(0.25, abs=0.02)
    assert count.relevant_fraction["w"] == pytest.approx(0.25, abs=0.02)
    full = count_workload(problem, workload, relevance=False)
    assert count.bytes_read < 0.3 * full.bytes_read


def test_probe_instance_shrinks_every_var_axis_by_one_factor():
    problem = our_problem("attention/002_scaled_causal_softmax*")
    workload = problem.workloads[-1]
    instance, shrunk = probe_instance(problem, workload, 1 << 17)
    assert shrunk and problem.input_elements(instance) <= 1 << 17
    assert instance.resolved_axes["num_heads"] == workload.resolved_axes["num_heads"]  # const axes stay
    assert instance.resolved_axes["seq_len"] >= 8 and instance.resolved_axes["batch_size"] >= 8
    same, shrunk = probe_instance(problem, problem.workloads[0], 1 << 17)
    assert same is problem.workloads[0] and not shrunk


SLOW_REFERENCE = '''import torch

def run(x):
    y = x
    for _ in range(200000):
        y = y * 1.0
    return y
'''


def test_probe_respects_its_time_cap(tmp_path):
    problem = write_problem(
        tmp_path / "slow", SLOW_REFERENCE,
        inputs={"x": {"shape": ["N"], "dtype": "float32"}}, outputs={"y": {"shape": ["N"], "dtype": "float32"}},
        axes={"N": {"type": "var"}}, workload_axes={"N": 64})
    start = time.perf_counter()
    probe = relevant_fractions(problem, problem.workloads[0], time_limit_s=0.3)
    elapsed = time.perf_counter() - start
    assert not probe.ok and "time cap" in probe.reason
    assert elapsed < 2.0


def test_no_grad_is_inert_in_the_probe_copy_only():
    import torch

    problem = our_problem("attention/002_scaled_causal_softmax*")
    module = compile_with_grad(problem.definition)
    x = torch.randn(1, 12, 8, 8, requires_grad=True)
    assert module.run(x, 0.125).requires_grad
    with torch.no_grad():
        assert not (x * 2).requires_grad  # the real torch.no_grad is untouched


def test_the_eval_model_says_which_inputs_were_charged_in_part():
    from core.problem import load_problem
    from core.roofline.problem_sol import speed_of_light

    root = Path(__file__).resolve().parents[2] / "problems"
    softmax = speed_of_light(load_problem(root / "attention" / "002_scaled_causal_softmax_gpt2"), [4], "cuda",
                             "NVIDIA H200")
    assert softmax.reduced[4].startswith("scores 0.5")
    rmsnorm = speed_of_light(load_problem(root / "norm" / "001_rmsnorm_llama3_1_8b"), [0], "cuda", "NVIDIA H200")
    assert rmsnorm.reduced == {} and 0 in rmsnorm.t_sol_ms
