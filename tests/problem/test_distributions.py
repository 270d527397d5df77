"""The distribution a random input is drawn from is chosen torch-free (core.problem.distributions) and named in the
agent's brief; what the brief names is what ``input_rules`` draws."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from core.llm.brief import problem_brief
from core.problem import load_problem
from core.problem.distributions import ALL_DISTRIBUTIONS, distribution_for
from core.problem.input_rules import ALL_RULES, generate, rule_for
from core.store.model import ProblemRow

N = 4096


def _near(value: float, expected: float, spread: float = 0.05) -> bool:
    return abs(value - expected) < spread


def _all(*checks):
    return lambda t: all(check(t) for check in checks)


def _in(low: float, high: float):
    """Every value in [low, high]."""
    return lambda t: bool(t.min() >= low and t.max() <= high)


def _moments(mean: float, std: float | None = None, spread: float = 0.05):
    """The values' mean (and standard deviation) near these."""
    return lambda t: (_near(t.double().mean().item(), mean, spread)
                      and (std is None or _near(t.double().std().item(), std, spread)))


def _uniform(low: float, high: float):
    return _all(_in(low, high), _moments((low + high) / 2, (high - low) / math.sqrt(12), 0.05 * (high - low)))


def _integers(low: int, high: int):
    """Integers of an integer dtype covering [low, high) exactly."""
    return lambda t: not t.dtype.is_floating_point and t.min().item() == low and t.max().item() == high - 1


def _causal(t) -> bool:
    above = torch.ones(t.shape[-2:], dtype=torch.bool).triu(1)
    return bool((t[..., above] == torch.finfo(t.dtype).min).all() and (t[..., ~above] == 0).all())


def _decay_steps(t) -> bool:
    """A cumulative sum whose every step (the first value included) lies in [-0.1, 0]."""
    return _uniform(-0.1, 0)(torch.cat([t[..., :1], t.diff(dim=-1)], dim=-1))


def _sums_to_one(t) -> bool:
    return bool(t.min() > 0) and torch.allclose(t.float().sum(-1), torch.ones(t.shape[:-1]), atol=0.02)


def _fp8_clamped_at_two(t) -> bool:
    values = t.float()
    return values.abs().max().item() == 2 and _moments(0)(values)


def _e2m1_normal(t) -> bool:
    """Packed E2M1 values, as many ±0 as a normal's |x| <= 0.25 (2Φ(0.25) - 1 = 0.197)."""
    raw = t.view(torch.uint8).long()
    codes = torch.cat([raw & 7, (raw >> 4) & 7]).flatten()  # the magnitude bits of both nibbles
    return t.dtype == torch.float4_e2m1fn_x2 and _near((codes == 0).double().mean().item(), 0.197, 0.02)


# The summary each distribution gives, with a property of a draw that tells it from the others.
CHECKS = {
    "ones": lambda t: bool((t == 1).all()),
    "zeros": lambda t: bool((t == 0).all()),
    "additive causal mask: 0 on and below the diagonal, finfo.min above": _causal,
    "0 or 1, each with probability 1/2": _all(lambda t: t.dtype.is_floating_point,
                                              lambda t: set(t.unique().tolist()) == {0.0, 1.0}, _moments(0.5)),
    "cos(clamp(N(0,1), -π, π))": _all(_in(-1, 1), _moments(math.exp(-0.5))),  # E[cos Z] = e^(-1/2)
    "sin(clamp(N(0,1), -π, π))": _all(_in(-1, 1), _moments(0, math.sqrt((1 - math.exp(-2)) / 2))),
    "abs(N(0,1)) + 0.1": _all(_in(0.1, math.inf), _moments(0.1 + math.sqrt(2 / math.pi), math.sqrt(1 - 2 / math.pi))),
    "cumulative sum along the last axis of U(-0.1, 0)": _decay_steps,
    "U(-5, -1)": _uniform(-5, -1),
    "U(-1, -0.001)": _uniform(-1, -0.001),
    "U(-5, 0)": _uniform(-5, 0),
    "softmax of N(0,1) along the last axis": _sums_to_one,
    "N(0,1) / sqrt(last axis)": lambda t: _moments(0, 1)(t * math.sqrt(t.shape[-1])),
    "N(0,1)": _moments(0, 1),
    "clamp(N(0,1), -2, 2), rounded to fp8": _fp8_clamped_at_two,
    "N(0,1) rounded to E2M1 (saturating at ±6), two values a byte": _e2m1_normal,
    "False or True, each with probability 1/2": lambda t: t.dtype == torch.bool and _moments(0.5)(t),
    "uniform integers in [-128, 128)": _integers(-128, 128),
    "uniform integers in [-1024, 1024)": _integers(-1024, 1024),
    "uniform integers in [0, 256)": _integers(0, 256),
    "softmax along the last axis of N(0,1)": _sums_to_one,
}

# An input of each distribution: name, shape, dtype, description, op_type.
INPUTS = [
    ("input_layernorm_weight", (N,), "bfloat16", "", None),
    ("q_norm_bias", (N,), "float32", "", None),
    ("mask", (2, 16, 16), "float16", "Causal attention mask (additive)", None),
    ("drop_mask", (N,), "float32", "", None),
    ("cos", (N,), "float32", "", None),
    ("sin_cached", (N,), "float32", "", None),
    ("x_rstd", (N,), "float32", "", None),
    ("A_cumsum", (8, 64), "float32", "", None),
    ("A_log", (N,), "float32", "", None),
    ("A", (64, 64), "float32", "", None),
    ("g", (N,), "float32", "", None),
    ("p", (64, 10), "float32", "softmax output of the scores", None),
    ("o_proj", (64, 256), "float32", "", None),
    ("x", (N,), "float64", "", None),
    ("a_fp8", (64, 64), "float8_e5m2", "", None),
    ("b_fp4", (64, 64), "float4_e2m1fn_x2", "", None),
    ("flags", (N,), "bool", "", None),
    ("codes", (20000,), "int8", "", None),
    ("token_ids", (20000,), "int64", "ids below vocab_size", None),
    ("pixels", (20000,), "uint8", "", None),
    ("probs", (64, 10), "float32", "", "sampling"),
]


def test_every_distribution_is_drawn_by_a_rule_of_its_own():
    assert [(d.name, d.summary) for d in ALL_DISTRIBUTIONS] == [(r.name, r.summary) for r in ALL_RULES]
    chosen = {distribution_for(name, shape, dtype, text, op).name for name, shape, dtype, text, op in INPUTS}
    assert chosen == {d.name for d in ALL_DISTRIBUTIONS} | {"sampling_probs(normal)"}


@pytest.mark.parametrize("name, shape, dtype, description, op_type", INPUTS, ids=[i[0] for i in INPUTS])
def test_the_named_distribution_is_the_one_drawn(name, shape, dtype, description, op_type):
    distribution = distribution_for(name, shape, dtype, description, op_type)
    rule = rule_for(name, shape, dtype, description, op_type)
    assert (rule.name, rule.summary) == (distribution.name, distribution.summary)
    torch.manual_seed(0)
    drawn = generate(rule, shape, dtype, torch.device("cpu"))
    assert drawn.shape == shape and CHECKS[distribution.summary](drawn), distribution.summary


def test_the_choice_follows_the_workloads_axes():
    """A mask is causal only where it is square: the same input can be drawn differently per workload."""
    text = "causal attention mask"
    assert distribution_for("mask", (8, 8), "float32", text).name == "causal_mask"
    assert distribution_for("mask", (8, 16), "float32", text).name == "normal"
    assert distribution_for("norm_weight", None, "float32").summary == "N(0,1)"  # a Python scalar takes no name rule


def _problem(tmp_path):
    inputs = {"x": (["s", "h"], "bfloat16", "hidden states"), "norm_weight": (["h"], "bfloat16", ""),
              "mask": (["s", "t"], "float32", "Causal attention mask"), "ids": (["s"], "int64", ""),
              "eps": (None, "float32", "")}
    definition = {"name": "masked_norm", "description": "",
                  "axes": {"s": {"type": "var"}, "t": {"type": "var"}, "h": {"type": "const", "value": 64}},
                  "inputs": {n: {"shape": shape, "dtype": dtype, "description": text}
                             for n, (shape, dtype, text) in inputs.items()},
                  "outputs": {"out": {"shape": ["s", "h"], "dtype": "bfloat16"}},
                  "reference": "def run(x, norm_weight, mask, ids, eps):\n    return x\n"}
    sources = {n: {"type": "random"} for n in inputs if n != "eps"}
    sources["eps"] = {"type": "scalar", "value": 1e-6}
    workloads = [{"uuid": f"w{i}", "axes": {"s": s, "t": t}, "inputs": sources}
                 for i, (s, t) in enumerate([(16, 16), (32, 32), (16, 64)])]
    folder = tmp_path / "gen" / "masked_norm"
    folder.mkdir(parents=True)
    (folder / "definition.json").write_text(json.dumps(definition))
    (folder / "workload.jsonl").write_text("".join(json.dumps(w) + "\n" for w in workloads))
    return load_problem(folder)


def test_the_brief_names_each_random_inputs_distribution(tmp_path):
    problem = _problem(tmp_path)
    row = ProblemRow(1, "gen/masked_norm", problem.name, "gen", str(problem.path), "", 0, False, False, "active",
                     None, None, None, None, None, None, 0, 0, 0, 0, 0.0, 0.0, 0.0, None)
    lines = [line for line in problem_brief(problem, row, None, []).splitlines() if line.startswith("- input ")]
    assert lines == [
        "- input x: [s, h] bfloat16, random — hidden states; values: N(0,1)",
        "- input norm_weight: [h] bfloat16, random; values: ones",
        "- input mask: [s, t] float32, random — Causal attention mask; values: additive causal mask: 0 on and below "
        "the diagonal, finfo.min above on w0-1; N(0,1) on w2",
        "- input ids: [s] int64, random; values: uniform integers in [-1024, 1024)",
        "- input eps: scalar float32, scalar 1e-06",
    ]


def test_the_brief_and_the_distributions_import_no_torch():
    script = ("import sys, core.llm.brief, core.problem.distributions\n"
              "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
