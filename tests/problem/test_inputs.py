"""Input generation: seeded, on the requested device, with conventions that make inputs meaningful."""

import torch

from core.problem import load_problem
from core.problem.inputs import InputError, make_inputs

import pytest


def _problem(make_problem, inputs: dict, reference_params: str, body: str = "return x", description="",
             axes=None, workload_axes=None, name="conventions"):
    axes = axes or {"n": {"type": "var"}, "vocab_size": {"type": "const", "value": 50}}

    def definition(d):
        d.update(name=name, description=description, axes=axes, inputs=inputs,
                 outputs={"out": {"shape": ["n"], "dtype": "float32"}},
                 reference=f"import torch\n\ndef run({reference_params}):\n    {body}\n")

    def workloads(ws):
        for w in ws:
            w["axes"] = workload_axes or {"n": 4096}
            w["inputs"] = {k: {"type": "random"} for k in inputs}

    return load_problem(make_problem(mutate_definition=definition, mutate_workloads=workloads, name=name))


def test_same_seed_same_inputs_other_seed_other_inputs(make_problem):
    problem = load_problem(make_problem())
    w = problem.workloads[1]
    a, b, c = (make_inputs(problem, w, "cpu", seed=s) for s in (7, 7, 8))
    assert torch.equal(a["x"], b["x"]) and not torch.equal(a["x"], c["x"])
    assert a["x"].shape == (128, 64) and a["x"].dtype == torch.bfloat16 and a["eps"] == 1e-6
    assert list(a) == ["x", "weight", "eps"]


def test_norm_weight_is_near_one(make_problem):
    problem = load_problem(make_problem())
    weight = make_inputs(problem, problem.workloads[0], "cpu", seed=1)["weight"].float()
    assert (weight - 1).abs().max() < 0.6 and abs(weight.mean().item() - 1) < 0.1


def test_probabilities_sum_to_one_and_scales_are_positive(make_problem):
    inputs = {"probs": {"shape": ["n", "vocab_size"], "dtype": "float32"},
              "x_scale": {"shape": ["n"], "dtype": "float32"}}
    problem = _problem(make_problem, inputs, "probs, x_scale")
    made = make_inputs(problem, problem.workloads[0], "cpu", seed=0)
    assert torch.allclose(made["probs"].sum(-1), torch.ones(4096), atol=1e-5)
    assert (made["x_scale"] > 0).all()


def test_index_tensors_lie_within_the_named_axis(make_problem):
    inputs = {"token_ids": {"shape": ["n"], "dtype": "int64", "description": "ids into the vocabulary"},
              "expert_idx": {"shape": ["n"], "dtype": "int32",
                             "description": "chosen expert, below num_experts"},
              "mask": {"shape": ["n"], "dtype": "bool"}}
    axes = {"n": {"type": "var"}, "vocab_size": {"type": "const", "value": 50},
            "num_experts": {"type": "const", "value": 8}}
    problem = _problem(make_problem, inputs, "token_ids, expert_idx, mask", axes=axes)
    made = make_inputs(problem, problem.workloads[0], "cpu", seed=0)
    ids, experts, mask = made["token_ids"], made["expert_idx"], made["mask"]
    assert ids.min() >= 0 and ids.max() < 50 and ids.max() > 40  # bound from the vocab axis
    assert experts.min() >= 0 and experts.max() == 7  # bound from the axis named in the description
    assert mask.dtype == torch.bool and 0 < mask.sum() < 4096


def test_low_precision_inputs(make_problem):
    inputs = {"a_fp8": {"shape": ["n"], "dtype": "float8_e4m3fn"},
              "b_fp4": {"shape": ["n"], "dtype": "float4_e2m1fn_x2"}}
    problem = _problem(make_problem, inputs, "a_fp8, b_fp4")
    made = make_inputs(problem, problem.workloads[0], "cpu", seed=0)
    assert made["a_fp8"].dtype == torch.float8_e4m3fn and made["a_fp8"].float().abs().max() <= 2
    assert made["b_fp4"].dtype == torch.float4_e2m1fn_x2 and made["b_fp4"].shape == (4096,)


CUSTOM_REFERENCE = '''import torch

def get_inputs(axes_and_scalars, device):
    n = axes_and_scalars["n"]
    return {"x": torch.arange(n, dtype=torch.float32, device=device) * axes_and_scalars["scale_hint"],
            "k": 3}

def run(x, k):
    return x * k
'''


def _custom_problem(make_problem, reference=CUSTOM_REFERENCE):
    def definition(d):
        d.update(axes={"n": {"type": "var"}}, custom_inputs_entrypoint="get_inputs",
                 inputs={"x": {"shape": ["n"], "dtype": "float32"}, "k": {"shape": None, "dtype": "int32"}},
                 outputs={"out": {"shape": ["n"], "dtype": "float32"}}, reference=reference)

    def workloads(ws):
        for w in ws:
            w["axes"] = {"n": 5, "scale_hint": 2}  # extra axes reach the custom entry point, as upstream
            w["inputs"] = {"x": {"type": "custom"}, "k": {"type": "custom"}}

    return load_problem(make_problem(mutate_definition=definition, mutate_workloads=workloads))


def test_custom_inputs_come_from_the_entry_point_with_extra_axes(make_problem):
    problem = _custom_problem(make_problem)
    made = make_inputs(problem, problem.workloads[0], "cpu", seed=0)
    assert made["x"].tolist() == [0, 2, 4, 6, 8] and made["k"] == 3
    assert problem.warnings == ()


def test_custom_inputs_with_wrong_shape_are_an_input_error(make_problem):
    problem = _custom_problem(make_problem, CUSTOM_REFERENCE.replace('torch.arange(n,', 'torch.arange(n + 1,'))
    with pytest.raises(InputError, match=r"custom input x: shape \[6\], expected \[5\]"):
        make_inputs(problem, problem.workloads[0], "cpu", seed=0)


@pytest.mark.gpu
def test_inputs_are_made_on_the_gpu(make_problem):
    problem = load_problem(make_problem())
    made = make_inputs(problem, problem.workloads[1], "cuda", seed=3)
    assert made["x"].is_cuda and made["weight"].is_cuda
    again = make_inputs(problem, problem.workloads[1], "cuda", seed=3)
    assert torch.equal(made["x"], again["x"])
