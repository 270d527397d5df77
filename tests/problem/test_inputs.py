"""Input generation: seeded, on the requested device, with SOL-ExecBench's distributions (core.problem.input_rules)."""

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


def test_norm_parameters_are_ones_and_zeros_and_a_bare_weight_vector_is_normal(make_problem):
    """Upstream's names: ``<...>norm_weight`` is ones, ``<...>norm_bias`` zeros; a 1-D ``weight`` has no rule."""
    inputs = {"input_layernorm_weight": {"shape": ["n"], "dtype": "bfloat16"},
              "q_norm2_bias": {"shape": ["n"], "dtype": "float32"},
              "weight": {"shape": ["n"], "dtype": "bfloat16"}}
    problem = _problem(make_problem, inputs, "input_layernorm_weight, q_norm2_bias, weight",
                       description="RMSNorm")
    made = make_inputs(problem, problem.workloads[0], "cpu", seed=1)
    assert made["input_layernorm_weight"].dtype == torch.bfloat16
    assert torch.equal(made["input_layernorm_weight"], torch.ones(4096, dtype=torch.bfloat16))
    assert torch.equal(made["q_norm2_bias"], torch.zeros(4096))
    weight = made["weight"].float()
    assert abs(weight.mean().item()) < 0.1 and 0.9 < weight.std().item() < 1.1 and weight.min() < -2


def test_weight_matrices_are_scaled_by_their_fan_in(make_problem):
    inputs = {"q_proj": {"shape": ["n", "k"], "dtype": "float32"},
              "gate_up_weight": {"shape": ["n", "k"], "dtype": "bfloat16"},
              "x": {"shape": ["n", "k"], "dtype": "float32"}}
    axes = {"n": {"type": "var"}, "k": {"type": "const", "value": 256}}
    problem = _problem(make_problem, inputs, "q_proj, gate_up_weight, x", axes=axes, workload_axes={"n": 64})
    made = make_inputs(problem, problem.workloads[0], "cpu", seed=0)
    for name in ("q_proj", "gate_up_weight"):
        assert abs(made[name].float().std().item() - 1 / 16) < 0.004, name
    assert abs(made["x"].std().item() - 1) < 0.05


def test_an_attention_mask_is_exactly_causal(make_problem):
    inputs = {"attention_mask": {"shape": ["b", 1, "s", "s"], "dtype": "bfloat16"},
              "pad_mask": {"shape": ["b", "s"], "dtype": "float32", "description": "1.0 for valid tokens"}}
    axes = {"n": {"type": "const", "value": 4}, "b": {"type": "const", "value": 2}, "s": {"type": "var"}}
    problem = _problem(make_problem, inputs, "attention_mask, pad_mask", axes=axes, workload_axes={"s": 9})
    made = make_inputs(problem, problem.workloads[0], "cpu", seed=0)
    mask = made["attention_mask"]
    expected = torch.zeros(9, 9).masked_fill(torch.ones(9, 9, dtype=torch.bool).triu(1),
                                             torch.finfo(torch.bfloat16).min).to(torch.bfloat16)
    assert mask.shape == (2, 1, 9, 9) and torch.equal(mask, expected.expand(2, 1, 9, 9))
    assert set(made["pad_mask"].unique().tolist()) == {0.0, 1.0}


def test_integer_and_boolean_inputs_take_upstream_ranges_whatever_their_names(make_problem):
    """Upstream has no index rule: ids are uniform over its per-dtype range, negatives included."""
    inputs = {"token_ids": {"shape": ["n"], "dtype": "int64", "description": "ids into the vocabulary"},
              "codes": {"shape": ["n"], "dtype": "int8"},
              "mask": {"shape": ["n"], "dtype": "bool"}}
    problem = _problem(make_problem, inputs, "token_ids, codes, mask")
    made = make_inputs(problem, problem.workloads[0], "cpu", seed=0)
    ids, codes, mask = made["token_ids"], made["codes"], made["mask"]
    assert ids.dtype == torch.int64 and ids.min() >= -1024 and ids.max() < 1024 and ids.min() < -1000
    assert codes.min() >= -128 and codes.max() <= 127 and codes.min() < -120 and codes.max() > 120
    assert mask.dtype == torch.bool and 1800 < mask.sum() < 2300


def test_python_scalars_are_one_default_draw(make_problem):
    inputs = {"x": {"shape": ["n"], "dtype": "float32"}, "eps": {"shape": None, "dtype": "float32"},
              "k": {"shape": None, "dtype": "int32"}}
    problem = _problem(make_problem, inputs, "x, eps, k")
    draws = [make_inputs(problem, problem.workloads[0], "cpu", seed=s) for s in range(200)]
    eps = torch.tensor([d["eps"] for d in draws])
    assert all(isinstance(d["eps"], float) and isinstance(d["k"], int) for d in draws)
    assert (eps < 0).any() and (eps > 0).any() and abs(eps.std().item() - 1) < 0.2
    assert all(-1024 <= d["k"] < 1024 for d in draws)


def test_low_precision_inputs(make_problem):
    inputs = {"a_fp8": {"shape": ["n", "n"], "dtype": "float8_e4m3fn"},
              "b_fp4": {"shape": ["n"], "dtype": "float4_e2m1fn_x2"},
              "c_weight": {"shape": ["n", "n"], "dtype": "float8_e5m2"}}
    problem = _problem(make_problem, inputs, "a_fp8, b_fp4, c_weight", workload_axes={"n": 64})
    made = make_inputs(problem, problem.workloads[0], "cpu", seed=0)
    a = made["a_fp8"].float()
    assert made["a_fp8"].dtype == torch.float8_e4m3fn and a.abs().max() == 2 and 0.7 < a.std() < 1.0
    assert made["b_fp4"].dtype == torch.float4_e2m1fn_x2 and made["b_fp4"].shape == (64,)
    # fp8 takes no name rule: a weight matrix is not scaled by its fan-in
    assert 0.7 < made["c_weight"].float().std() < 1.0


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
