"""Random inputs follow SOL-ExecBench's generator: each rule's structure and statistics, and (when the upstream
package is present) the same name predicates and the same distributions as upstream's ``gen_inputs``."""

import json
import math

import pytest
from upstream_sources import upstream_module
import torch

from core.problem import input_rules, load_problem
from core.problem.input_rules import e2m1_codes, generate, rule_for
from core.problem.inputs import make_inputs

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def upstream():
    data = upstream_module("sol_execbench.core.data")
    return upstream_module("sol_execbench.core.bench.io"), data.Definition, data.Workload


def ks_statistic(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.flatten().double().sort().values, b.flatten().double().sort().values
    points = torch.cat([a, b])
    cdf_a = torch.searchsorted(a, points, right=True).double() / a.numel()
    cdf_b = torch.searchsorted(b, points, right=True).double() / b.numel()
    return float((cdf_a - cdf_b).abs().max())


def ks_critical(n: int, m: int) -> float:  # alpha = 1e-6
    return math.sqrt(-0.5 * math.log(0.5e-6)) * math.sqrt((n + m) / (n * m))


# ---------------------------------------------------------------- which rule an input gets

RULE_CASES = [
    # name, shape, dtype, description, op_type -> rule
    ("norm_weight", (8,), "bfloat16", "", None, "norm_weight"),
    ("post_attention_layernorm_weight", (8,), "float32", "", None, "norm_weight"),
    ("rmsnorm2_weight", (4, 8), "float16", "", None, "norm_weight"),
    ("q_norm_bias", (8,), "float32", "", None, "norm_bias"),
    ("attention_mask", (2, 1, 8, 8), "bfloat16", "", None, "causal_mask"),
    ("mask", (8, 8), "float32", "Causal attention mask (additive)", None, "causal_mask"),
    ("attention_mask", (2, 8), "float32", "", None, "binary_mask"),
    ("pad_mask", (2, 8), "float32", "1.0 for valid, 0.0 for masked", None, "binary_mask"),
    ("pad_mask", (2, 8), "float32", "padding positions", None, "normal"),
    ("cos_cached", (8, 4), "float32", "", None, "rope_cos"),
    ("rope_sin", (8, 4), "bfloat16", "", None, "rope_sin"),
    ("x_rstd", (8,), "float32", "", None, "positive"),
    ("variance2", (8,), "float32", "", None, "positive"),
    ("A", (8, 8), "float16", "the left GEMM operand", None, "ssm_A"),
    ("A_log", (8,), "float32", "", None, "ssm_A_log"),
    ("A_cumsum", (2, 8), "float32", "", None, "ssm_A_cumsum"),
    ("g", (2, 8), "float32", "", None, "ssm_g"),
    ("routing_weights", (4, 8), "float32", "", None, "softmax_output"),
    ("p", (4, 8), "float32", "Softmax output of the scores", None, "softmax_output"),
    ("q_proj", (16, 8), "bfloat16", "", None, "weight_matrix"),
    ("weight3", (16, 8), "float32", "", None, "weight_matrix"),
    ("w_proj_weights2", (2, 16, 8), "float32", "", None, "weight_matrix"),
    ("weight", (8,), "float32", "", None, "normal"),  # a 1-D weight has no rule
    ("x_scale", (8,), "float32", "per-token scale", None, "normal"),  # nor has a scale
    ("gemm1_weights", (2, 16, 8), "float8_e4m3fn", "", None, "fp8"),  # low precision takes no name rule
    ("norm_weight", (8,), "float8_e5m2", "", None, "fp8"),
    ("b", (8, 4), "float4_e2m1fn_x2", "", None, "fp4"),
    ("flags", (8,), "bool", "", None, "bool"),
    ("codes", (8,), "int8", "", None, "int8"),
    ("token_ids", (8,), "int64", "ids below vocab_size", None, "int"),
    ("u", (8,), "uint8", "", None, "uint8"),
    ("eps", None, "float32", "", None, "normal"),  # a Python scalar takes no name rule
    ("norm_weight", None, "float32", "", None, "normal"),
    ("probs", (4, 8), "float32", "", "sampling", "sampling_probs(normal)"),
    ("probs", (4, 8), "float32", "", None, "normal"),
]


@pytest.mark.parametrize("name, shape, dtype, description, op_type, expected", RULE_CASES)
def test_rule_for(name, shape, dtype, description, op_type, expected):
    assert rule_for(name, shape, dtype, description, op_type).name == expected


NAMES = ["weight", "weight2", "norm_weight", "q_norm_weight", "input_layernorm_weight", "rmsnorm2_weight",
         "ln_weight", "layernorm_bias", "norm_bias", "norm3_bias", "x_bias", "_weight", "0_weight", "w_proj",
         "w_proj3", "gate_up_projs", "fc_weights", "out_weight_matrix", "w", "attention_mask", "causal_mask",
         "x_mask", "pad_mask", "drop_mask", "cos", "sin", "cos_cached", "rope_sin", "freqs_cos", "rstd", "std",
         "var", "variance", "x_var", "x_variance", "x_variance2", "x_var1", "rstd0", "layer_std", "A", "A_log",
         "A_cumsum", "g", "a", "attn_weights", "routing_weights", "probs", "x", "norm", "projection"]
DESCRIPTIONS = ["", "Causal attention mask", "binary mask", "values 0 or 1", "Softmax output", "1.0 for valid"]
SHAPES = [(8,), (4, 4), (2, 4, 6)]


def test_name_predicates_agree_with_upstream(upstream):
    io = upstream[0]
    for name in NAMES:
        assert input_rules.is_norm_weight(name) == io._is_norm_weight(name), name
        assert input_rules.is_norm_bias(name) == io._is_norm_bias(name), name
        assert input_rules.is_positive(name) == io._is_positive_tensor(name, None), name
        for shape in SHAPES:
            assert input_rules.is_weight_matrix(name, shape) == io._is_weight_matrix(name, shape), (name, shape)
        for description in DESCRIPTIONS:
            assert input_rules.is_binary_mask(name, description) == io._is_binary_mask(name, description), name
            assert (input_rules.is_softmax_output(name, description)
                    == io._is_softmax_output(name, description)), (name, description)
            for shape in SHAPES:
                assert (input_rules.is_causal_mask(name, shape, description)
                        == io._is_causal_attention_mask(name, shape, description)), (name, shape, description)


# ---------------------------------------------------------------- each rule's values


def _make(name, shape, dtype, description="", op_type=None, seed=0):
    torch.manual_seed(seed)
    return generate(rule_for(name, shape, dtype, description, op_type), shape, dtype, CPU)


def test_norm_parameters_are_exactly_one_and_zero():
    assert torch.equal(_make("norm_weight", (3, 5), "bfloat16"), torch.ones(3, 5, dtype=torch.bfloat16))
    assert torch.equal(_make("ln_f_norm_bias", (7,), "float16"), torch.zeros(7, dtype=torch.float16))


def test_causal_mask_is_zero_on_and_below_the_diagonal_and_finfo_min_above():
    mask = _make("causal_mask", (2, 3, 6, 6), "float16")
    lowest = torch.finfo(torch.float16).min
    for i in range(6):
        for j in range(6):
            assert (mask[..., i, j] == (lowest if j > i else 0)).all(), (i, j)


def test_weight_matrix_std_is_one_over_the_root_of_its_last_axis():
    for fan_in in (16, 256):
        weight = _make("o_proj", (512, fan_in), "float32")
        assert abs(weight.std().item() * math.sqrt(fan_in) - 1) < 0.03, fan_in
        assert abs(weight.mean().item()) < 0.01


def test_bounded_rules_stay_in_their_ranges():
    positive = _make("x_rstd", (4096,), "float32")
    assert positive.min() >= 0.1 and abs(positive.mean().item() - (0.1 + math.sqrt(2 / math.pi))) < 0.03
    for name, low, high in (("A", -1.0, -0.001), ("A_log", -5.0, -1.0), ("g", -5.0, 0.0)):
        values = _make(name, (4096,), "float32")
        assert values.min() >= low and values.max() <= high, name
        assert abs(values.mean().item() - (low + high) / 2) < 0.05 * (high - low), name
    cumsum = _make("A_cumsum", (8, 64), "float32")
    steps = cumsum.diff(dim=-1)
    assert (cumsum[:, 0] <= 0).all() and (cumsum[:, 0] >= -0.1).all() and (steps <= 0).all() and (steps >= -0.1).all()
    binary = _make("drop_mask", (4096,), "bfloat16")
    assert set(binary.unique().tolist()) == {0.0, 1.0} and 0.45 < binary.float().mean() < 0.55


def test_rope_tables_are_cos_and_sin_of_a_clamped_normal():
    cos, sin = _make("cos", (64, 64), "float32"), _make("sin", (64, 64), "float32")
    assert cos.min() >= -1 and cos.max() <= 1 and sin.min() >= -1 and sin.max() <= 1
    # E[cos(Z)] = exp(-1/2) for a standard normal Z (the clamp at ±π barely matters); E[sin(Z)] = 0
    assert abs(cos.mean().item() - math.exp(-0.5)) < 0.02 and abs(sin.mean().item()) < 0.02


def test_softmax_rules_sum_to_one_along_the_last_axis():
    routing = _make("routing_weights", (32, 10), "float32")
    assert torch.allclose(routing.sum(-1), torch.ones(32), atol=1e-6) and routing.min() > 0
    probs = _make("probs", (32, 10), "bfloat16", op_type="sampling")
    assert probs.dtype == torch.bfloat16 and torch.allclose(probs.float().sum(-1), torch.ones(32), atol=0.02)


def test_integer_rules_cover_upstream_ranges():
    for dtype, low, high in (("int8", -128, 128), ("int16", -1024, 1024), ("int32", -1024, 1024),
                             ("int64", -1024, 1024), ("uint8", 0, 256)):
        values = _make("position_ids", (20000,), dtype)
        assert values.dtype == getattr(torch, dtype) and values.min() == low and values.max() == high - 1, dtype


def test_e2m1_codes_round_to_nearest_with_ties_to_even():
    values = torch.tensor([0.0, 0.25, 0.3, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.1, 100.0, -0.1, -0.5, -6.0, -2.6])
    assert e2m1_codes(values).tolist() == [0, 0, 1, 2, 2, 4, 4, 6, 6, 7, 7, 8, 9, 15, 13]


def test_fp4_keeps_its_declared_shape_and_packs_rounded_normals():
    packed = _make("b", (256, 64), "float4_e2m1fn_x2")
    assert packed.dtype == torch.float4_e2m1fn_x2 and packed.shape == (256, 64)
    raw = packed.view(torch.uint8).long()
    codes = torch.cat([raw & 15, raw >> 4]).flatten()
    counts = torch.bincount(codes, minlength=16).double() / codes.numel()
    # P(code) for a standard normal rounded to E2M1: magnitude in (0.25, 0.75) -> 0.5 is code 1 (or 9 if < 0)
    normal = torch.distributions.Normal(0.0, 1.0)
    p_half = float(normal.cdf(torch.tensor(0.75)) - normal.cdf(torch.tensor(0.25)))
    assert abs(counts[1] - p_half) < 0.01 and abs(counts[9] - p_half) < 0.01
    assert abs(counts[7] + counts[15] - 2 * float(1 - normal.cdf(torch.tensor(5.0)))) < 0.001


def test_fp8_is_a_normal_clamped_to_two():
    values = _make("hidden_states", (64, 64), "float8_e4m3fn").float()
    assert values.abs().max() == 2 and abs(values.mean().item()) < 0.05 and 0.8 < values.std() < 0.95


# ---------------------------------------------------------------- against upstream's gen_inputs

S, H = 64, 64
UPSTREAM_INPUTS = {
    "x": (["s", "h"], "bfloat16", ""),
    "input_layernorm_weight": (["h"], "bfloat16", ""),
    "post_norm_bias": (["h"], "float32", ""),
    "attention_mask": (["1", "s", "s"], "float32", "Causal attention mask"),
    "drop_mask": (["s", "h"], "float16", ""),
    "cos": (["s", "h"], "float32", ""),
    "sin": (["s", "h"], "bfloat16", ""),
    "x_rstd": (["s", "h"], "float32", ""),
    "A": (["s", "h"], "float32", ""),
    "A_log": (["s", "h"], "float32", ""),
    "A_cumsum": (["s", "h"], "float32", ""),
    "g": (["s", "h"], "float32", ""),
    "routing_weights": (["s", "h"], "float32", ""),
    "q_proj": (["s", "h"], "bfloat16", ""),
    "weight": (["h"], "float16", ""),
    "a_fp8": (["s", "h"], "float8_e4m3fn", ""),
    "b_fp4": (["s", "h"], "float4_e2m1fn_x2", ""),
    "flags": (["s", "h"], "bool", ""),
    "codes": (["s", "h"], "int8", ""),
    "position_ids": (["s", "h"], "int64", "positions"),
    "counts": (["s", "h"], "int32", ""),
}
_E2M1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float64)


def _definition(inputs: dict) -> dict:
    return {"name": "rules", "description": "one input per upstream rule",
            "axes": {"s": {"type": "var"}, "h": {"type": "const", "value": H}},
            "inputs": {name: {"shape": shape, "dtype": dtype, "description": text}
                       for name, (shape, dtype, text) in inputs.items()},
            "outputs": {"out": {"shape": ["s", "h"], "dtype": "float32"}},
            "reference": f"def run({', '.join(inputs)}):\n    return x\n"}


def _generators(tmp_path, upstream, inputs: dict):
    """draw(seed) -> (our inputs, upstream's inputs) for one workload of a definition with ``inputs``."""
    io, Definition, Workload = upstream
    definition = _definition(inputs)
    workload = {"uuid": "w0", "axes": {"s": S}, "inputs": {n: {"type": "random"} for n in inputs}}
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "definition.json").write_text(json.dumps(definition))
    (folder / "workload.jsonl").write_text(json.dumps(workload) + "\n")
    problem = load_problem(folder)
    upstream_definition, upstream_workload = Definition.model_validate(definition), Workload.model_validate(workload)

    def draw(seed: int):
        ours = make_inputs(problem, problem.workloads[0], "cpu", seed=seed)
        torch.manual_seed(seed + 1000)
        theirs = io.gen_inputs(upstream_definition, upstream_workload, "cpu")
        return ours, dict(zip(inputs, theirs))

    return draw


def _values(tensor) -> torch.Tensor:
    if tensor.dtype == torch.float4_e2m1fn_x2:
        raw = tensor.view(torch.uint8).long().flatten()
        return _E2M1[torch.cat([raw & 15, raw >> 4])]
    return tensor.flatten().double()


def test_every_rule_has_upstreams_distribution(tmp_path, upstream):
    draw = _generators(tmp_path, upstream, UPSTREAM_INPUTS)
    (ours, theirs), (_, theirs_again) = draw(3), draw(4)
    for name in UPSTREAM_INPUTS:
        mine, up = ours[name], theirs[name]
        assert mine.dtype == up.dtype, name
        if name != "b_fp4":  # upstream packs the declared shape, halving fp4's last axis; ours keeps it
            assert mine.shape == up.shape, name
        a, b = _values(mine), _values(up)
        if torch.equal(b, _values(theirs_again[name])):  # a deterministic rule: the very same tensor
            assert torch.equal(a, b), name
            continue
        assert ks_statistic(a, b) < ks_critical(a.numel(), b.numel()), name
        spread = b.std().item() * math.sqrt(1 / a.numel() + 1 / b.numel())  # the standard error of a difference
        assert abs(a.mean() - b.mean()) < 6 * spread, name
        assert abs(a.std() - b.std()) < 6 * spread, name


def test_python_scalars_have_upstreams_distribution(tmp_path, upstream):
    inputs = {"x": (["s", "h"], "float32", ""), "alpha": (None, "float32", ""), "k": (None, "int32", "")}
    draw = _generators(tmp_path, upstream, inputs)
    draws = [draw(seed) for seed in range(300)]
    for name in ("alpha", "k"):
        ours = torch.tensor([float(d[0][name]) for d in draws])
        theirs = torch.tensor([float(d[1][name]) for d in draws])
        assert type(draws[0][0][name]) is type(draws[0][1][name]), name
        assert ks_statistic(ours, theirs) < ks_critical(300, 300), name


def test_a_sampling_definitions_probs_are_a_distribution(tmp_path):
    """op_type is read from definition.json (as upstream reads it) and selects the sampling rule for ``probs``."""
    inputs = {"probs": (["s", "h"], "float32", ""), "x": (["s", "h"], "float32", "")}
    folder = tmp_path / "sampling"
    folder.mkdir()
    (folder / "definition.json").write_text(json.dumps({**_definition(inputs), "op_type": "sampling"}))
    (folder / "workload.jsonl").write_text(json.dumps({"uuid": "w0", "axes": {"s": S},
                                                       "inputs": {n: {"type": "random"} for n in inputs}}) + "\n")
    problem = load_problem(folder)
    assert problem.definition.op_type == "sampling"
    made = make_inputs(problem, problem.workloads[0], "cpu", seed=3)
    assert torch.allclose(made["probs"].sum(-1), torch.ones(S), atol=1e-5) and (made["probs"] >= 0).all()
    assert (made["x"] < 0).any()  # x is a plain normal
