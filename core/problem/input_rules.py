"""Which distribution a random input gets, following SOL-ExecBench's input generator (``core/bench/io.py``).

Upstream decides by the input's name, rank, dtype and description. For the plain floating dtypes the first
matching name rule wins, in ``_name_rule``'s order (norm weights are ones, causal masks are triangular, weight
matrices are scaled by 1/sqrt(fan_in), ...); any other input gets its dtype's default draw. Low-precision floats,
booleans and integers never take a name rule; a Python scalar (shape None) always gets its dtype's default. A
sampling definition's ``probs`` is then put through a softmax.

Two deliberate departures, both for inputs upstream cannot generate at all: a float64 tensor that no name rule
matches, and any uint8 tensor, get a default draw (upstream raises); an fp4 tensor keeps its declared shape
(upstream packs the declared shape into bytes, halving its last axis), its nibbles distributed as upstream's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from core.problem.dtypes import torch_dtype

Generator = Callable[[tuple[int, ...], torch.dtype, torch.device], torch.Tensor]

# Dtypes the name rules apply to (upstream: floating point, but not fp8/fp4).
NAME_RULE_DTYPES = frozenset({"float64", "float32", "float16", "bfloat16"})


@dataclass(frozen=True)
class InputRule:
    name: str  # short identifier, e.g. "norm_weight"
    summary: str  # the distribution in words
    generate: Generator


# ---------------------------------------------------------------- name predicates

_DIGITS = "0123456789"


def _base(name: str) -> str:
    """The name without trailing digits (``weight2`` -> ``weight``)."""
    return name.rstrip(_DIGITS)


def _norm_parameter(name: str, suffix: str) -> bool:
    """``<...>norm<digits>_<suffix>``: a normalisation layer's weight or bias (norm_weight, q_norm_weight,
    input_layernorm_weight, rmsnorm2_bias, ...)."""
    return name.endswith(suffix) and _base(name[: -len(suffix)]).endswith("norm")


def is_norm_weight(name: str) -> bool:
    return _norm_parameter(name, "_weight")


def is_norm_bias(name: str) -> bool:
    return _norm_parameter(name, "_bias")


def is_causal_mask(name: str, shape: tuple[int, ...], description: str) -> bool:
    if len(shape) < 2 or shape[-1] != shape[-2]:
        return False
    text = description.lower()
    return name in ("attention_mask", "causal_mask") or ("attention mask" in text and "causal" in text)


_BINARY_MASK_NAMES = frozenset({"x_mask", "text_mask", "aspect_ratio_mask", "drop_mask", "attention_mask"})
_BINARY_WORDS = ("binary", "{0, 1}", "0 or 1", "1.0 for valid", "0.0 for masked")


def is_binary_mask(name: str, description: str) -> bool:
    if name in _BINARY_MASK_NAMES:
        return True
    text = description.lower()
    return name.endswith("_mask") and any(word in text for word in _BINARY_WORDS)


_COS_NAMES = frozenset({"cos", "cos_cached", "rope_cos"})
_SIN_NAMES = frozenset({"sin", "sin_cached", "rope_sin"})

_POSITIVE_NAMES = frozenset({"rstd", "std", "variance", "var"})


def is_positive(name: str) -> bool:
    base = _base(name)
    return (name in _POSITIVE_NAMES or name.endswith(("_rstd", "_std", "_variance", "_var"))
            or base in _POSITIVE_NAMES or base.endswith(("_rstd", "_std", "_var")))


_SOFTMAX_NAMES = frozenset({"attn_weights", "attention_weights", "routing_weights"})


def is_softmax_output(name: str, description: str) -> bool:
    text = description.lower()
    return name in _SOFTMAX_NAMES or ("softmax" in text and "output" in text)


_WEIGHT_SUFFIXES = ("_weight", "_weights", "_proj", "_projs", "_weight_matrix")


def is_weight_matrix(name: str, shape: tuple[int, ...]) -> bool:
    base = _base(name)
    return len(shape) >= 2 and (base == "weight" or base.endswith(_WEIGHT_SUFFIXES))


# ---------------------------------------------------------------- generators


def _normal(shape, dtype, device):
    return torch.randn(shape, dtype=dtype, device=device)


def _uniform(low: float, high: float) -> Generator:
    return lambda shape, dtype, device: torch.empty(shape, dtype=dtype, device=device).uniform_(low, high)


def _causal_mask(shape, dtype, device):
    size = shape[-1]
    above_diagonal = torch.ones(size, size, dtype=torch.bool, device=device).triu(1)
    mask = torch.zeros(shape, dtype=dtype, device=device)
    return mask.masked_fill_(above_diagonal, torch.finfo(dtype).min)


def _binary(shape, dtype, device):
    return torch.randint(0, 2, shape, device=device).to(dtype)


def _angle(shape, device):
    return torch.randn(shape, dtype=torch.float32, device=device).clamp_(-math.pi, math.pi)


def _cumulative_decay(shape, dtype, device):
    return torch.empty(shape, dtype=dtype, device=device).uniform_(-0.1, 0.0).cumsum(dim=-1)


def _softmax_of_normal(shape, dtype, device):
    return torch.softmax(torch.randn(shape, dtype=torch.float32, device=device), dim=-1).to(dtype)


def _scaled_normal(shape, dtype, device):
    return torch.randn(shape, dtype=dtype, device=device) / math.sqrt(shape[-1])


def _clamped_normal(shape, dtype, device):
    return torch.randn(shape, dtype=torch.float32, device=device).clamp_(-2.0, 2.0).to(dtype)


# E2M1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 are codes 0..7; a value halfway between two goes to the even code.
# Each pair is (midpoint, ties go up): the code is the number of midpoints a magnitude lies above.
_E2M1_MIDPOINTS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True),
                   (5.0, False))


def e2m1_codes(values: torch.Tensor) -> torch.Tensor:
    """The 4-bit E2M1 code (sign bit 8) nearest to each float, saturating at ±6."""
    magnitude = values.abs()
    code = torch.zeros(values.shape, dtype=torch.uint8, device=values.device)
    for midpoint, ties_up in _E2M1_MIDPOINTS:
        code += (magnitude >= midpoint if ties_up else magnitude > midpoint).to(torch.uint8)
    return code | ((values < 0).to(torch.uint8) << 3)


def _packed_fp4(shape, dtype, device):
    if not shape:
        raise ValueError("an fp4 input needs at least one axis (two values are packed per byte)")
    codes = e2m1_codes(torch.randn((*shape[:-1], 2 * shape[-1]), dtype=torch.float32, device=device))
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).view(dtype)


def _integers(low: int, high: int) -> Generator:
    return lambda shape, dtype, device: torch.randint(low, high, shape, dtype=dtype, device=device)


def _bools(shape, dtype, device):
    return torch.randint(0, 2, shape, dtype=torch.bool, device=device)


def _trig(function) -> Generator:
    return lambda shape, dtype, device: function(_angle(shape, device)).to(dtype)


# ---------------------------------------------------------------- the rules

NORM_WEIGHT = InputRule("norm_weight", "ones", lambda s, d, dev: torch.ones(s, dtype=d, device=dev))
NORM_BIAS = InputRule("norm_bias", "zeros", lambda s, d, dev: torch.zeros(s, dtype=d, device=dev))
CAUSAL_MASK = InputRule("causal_mask", "additive causal mask: 0 on and below the diagonal, finfo.min above",
                        _causal_mask)
BINARY_MASK = InputRule("binary_mask", "0 or 1, each with probability 1/2", _binary)
ROPE_COS = InputRule("rope_cos", "cos(clamp(N(0,1), -π, π))", _trig(torch.cos))
ROPE_SIN = InputRule("rope_sin", "sin(clamp(N(0,1), -π, π))", _trig(torch.sin))
POSITIVE = InputRule("positive", "abs(N(0,1)) + 0.1", lambda s, d, dev: _normal(s, d, dev).abs() + 0.1)
SSM_A_CUMSUM = InputRule("ssm_A_cumsum", "cumulative sum along the last axis of U(-0.1, 0)", _cumulative_decay)
SSM_A_LOG = InputRule("ssm_A_log", "U(-5, -1)", _uniform(-5.0, -1.0))
SSM_A = InputRule("ssm_A", "U(-1, -0.001)", _uniform(-1.0, -0.001))
SSM_GATE = InputRule("ssm_g", "U(-5, 0)", _uniform(-5.0, 0.0))
SOFTMAX_OUTPUT = InputRule("softmax_output", "softmax of N(0,1) along the last axis", _softmax_of_normal)
WEIGHT_MATRIX = InputRule("weight_matrix", "N(0,1) / sqrt(last axis)", _scaled_normal)

NORMAL = InputRule("normal", "N(0,1)", _normal)
FP8 = InputRule("fp8", "clamp(N(0,1), -2, 2), rounded to fp8", _clamped_normal)
FP4 = InputRule("fp4", "N(0,1) rounded to E2M1 (saturating at ±6), two values a byte", _packed_fp4)
BOOL = InputRule("bool", "False or True, each with probability 1/2", _bools)
INT8 = InputRule("int8", "uniform integers in [-128, 128)", _integers(-128, 128))
INT = InputRule("int", "uniform integers in [-1024, 1024)", _integers(-1024, 1024))
UINT8 = InputRule("uint8", "uniform integers in [0, 256)", _integers(0, 256))

_SSM_RULES = {"A": SSM_A, "A_log": SSM_A_LOG, "A_cumsum": SSM_A_CUMSUM, "g": SSM_GATE}

_DEFAULTS = {
    "float64": NORMAL, "float32": NORMAL, "float16": NORMAL, "bfloat16": NORMAL,
    "float8_e4m3fn": FP8, "float8_e5m2": FP8, "float4_e2m1fn_x2": FP4, "bool": BOOL,
    "int8": INT8, "int16": INT, "int32": INT, "int64": INT, "uint8": UINT8,
}

ALL_RULES = (NORM_WEIGHT, NORM_BIAS, CAUSAL_MASK, BINARY_MASK, ROPE_COS, ROPE_SIN, POSITIVE, SSM_A_CUMSUM,
             SSM_A_LOG, SSM_A, SSM_GATE, SOFTMAX_OUTPUT, WEIGHT_MATRIX, NORMAL, FP8, FP4, BOOL,
             INT8, INT, UINT8)


def _softmax_over(rule: InputRule) -> InputRule:
    """A sampling operation's ``probs``: softmax along the last axis (in the input's dtype) of what the input
    would otherwise get."""
    return InputRule(f"sampling_probs({rule.name})", f"softmax along the last axis of {rule.summary}",
                     lambda shape, dtype, device: torch.softmax(rule.generate(shape, dtype, device), dim=-1))


def _name_rule(name: str, shape: tuple[int, ...], description: str) -> InputRule | None:
    if is_norm_weight(name):
        return NORM_WEIGHT
    if is_norm_bias(name):
        return NORM_BIAS
    if is_causal_mask(name, shape, description):
        return CAUSAL_MASK
    if is_binary_mask(name, description):
        return BINARY_MASK
    if name in _COS_NAMES:
        return ROPE_COS
    if name in _SIN_NAMES:
        return ROPE_SIN
    if is_positive(name):
        return POSITIVE
    if name in _SSM_RULES:
        return _SSM_RULES[name]
    if is_softmax_output(name, description):
        return SOFTMAX_OUTPUT
    if is_weight_matrix(name, shape):
        return WEIGHT_MATRIX
    return None


def rule_for(name: str, shape: tuple[int, ...] | None, dtype: str, description: str = "",
             op_type: str | None = None) -> InputRule:
    """The rule upstream applies to a random input (``shape`` None for a Python scalar)."""
    if shape is None:
        return _DEFAULTS[dtype]
    if dtype not in NAME_RULE_DTYPES:
        return _DEFAULTS[dtype]
    rule = _name_rule(name, shape, description or "") or _DEFAULTS[dtype]
    if op_type == "sampling" and name == "probs":
        return _softmax_over(rule)
    return rule


def generate(rule: InputRule, shape: tuple[int, ...], dtype: str, device: torch.device) -> torch.Tensor:
    return rule.generate(tuple(shape), torch_dtype(dtype), device)
