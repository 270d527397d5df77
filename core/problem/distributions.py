"""Which distribution a random input is drawn from, following SOL-ExecBench's input generator
(``core/bench/io.py``); torch-free, so the fleet can name it in an agent's brief. ``input_rules`` draws each
distribution chosen here.

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

from collections.abc import Mapping
from dataclasses import dataclass

from core.problem.schema import Definition, TensorSpec

# Dtypes the name rules apply to (upstream: floating point, but not fp8/fp4).
NAME_RULE_DTYPES = frozenset({"float64", "float32", "float16", "bfloat16"})


@dataclass(frozen=True)
class Distribution:
    name: str  # short identifier, e.g. "norm_weight"
    summary: str  # the distribution in words
    softmax_of: Distribution | None = None  # a sampling definition's probs: softmax of what it would otherwise get


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


# ---------------------------------------------------------------- the distributions

NORM_WEIGHT = Distribution("norm_weight", "ones")
NORM_BIAS = Distribution("norm_bias", "zeros")
CAUSAL_MASK = Distribution("causal_mask", "additive causal mask: 0 on and below the diagonal, finfo.min above")
BINARY_MASK = Distribution("binary_mask", "0 or 1, each with probability 1/2")
ROPE_COS = Distribution("rope_cos", "cos(clamp(N(0,1), -π, π))")
ROPE_SIN = Distribution("rope_sin", "sin(clamp(N(0,1), -π, π))")
POSITIVE = Distribution("positive", "abs(N(0,1)) + 0.1")
SSM_A_CUMSUM = Distribution("ssm_A_cumsum", "cumulative sum along the last axis of U(-0.1, 0)")
SSM_A_LOG = Distribution("ssm_A_log", "U(-5, -1)")
SSM_A = Distribution("ssm_A", "U(-1, -0.001)")
SSM_GATE = Distribution("ssm_g", "U(-5, 0)")
SOFTMAX_OUTPUT = Distribution("softmax_output", "softmax of N(0,1) along the last axis")
WEIGHT_MATRIX = Distribution("weight_matrix", "N(0,1) / sqrt(last axis)")

NORMAL = Distribution("normal", "N(0,1)")
FP8 = Distribution("fp8", "clamp(N(0,1), -2, 2), rounded to fp8")
FP4 = Distribution("fp4", "N(0,1) rounded to E2M1 (saturating at ±6), two values a byte")
BOOL = Distribution("bool", "False or True, each with probability 1/2")
INT8 = Distribution("int8", "uniform integers in [-128, 128)")
INT = Distribution("int", "uniform integers in [-1024, 1024)")
UINT8 = Distribution("uint8", "uniform integers in [0, 256)")

ALL_DISTRIBUTIONS = (NORM_WEIGHT, NORM_BIAS, CAUSAL_MASK, BINARY_MASK, ROPE_COS, ROPE_SIN, POSITIVE, SSM_A_CUMSUM,
                     SSM_A_LOG, SSM_A, SSM_GATE, SOFTMAX_OUTPUT, WEIGHT_MATRIX, NORMAL, FP8, FP4, BOOL, INT8, INT,
                     UINT8)

_SSM = {"A": SSM_A, "A_log": SSM_A_LOG, "A_cumsum": SSM_A_CUMSUM, "g": SSM_GATE}

_DEFAULTS = {
    "float64": NORMAL, "float32": NORMAL, "float16": NORMAL, "bfloat16": NORMAL,
    "float8_e4m3fn": FP8, "float8_e5m2": FP8, "float4_e2m1fn_x2": FP4, "bool": BOOL,
    "int8": INT8, "int16": INT, "int32": INT, "int64": INT, "uint8": UINT8,
}


def softmax_over(base: Distribution) -> Distribution:
    """A sampling operation's ``probs``: softmax along the last axis (in the input's dtype) of ``base``."""
    return Distribution(f"sampling_probs({base.name})", f"softmax along the last axis of {base.summary}", base)


def _name_rule(name: str, shape: tuple[int, ...], description: str) -> Distribution | None:
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
    if name in _SSM:
        return _SSM[name]
    if is_softmax_output(name, description):
        return SOFTMAX_OUTPUT
    if is_weight_matrix(name, shape):
        return WEIGHT_MATRIX
    return None


def distribution_for(name: str, shape: tuple[int, ...] | None, dtype: str, description: str = "",
                     op_type: str | None = None) -> Distribution:
    """The distribution upstream draws a random input from (``shape`` None for a Python scalar)."""
    if shape is None or dtype not in NAME_RULE_DTYPES:
        return _DEFAULTS[dtype]
    chosen = _name_rule(name, shape, description or "") or _DEFAULTS[dtype]
    if op_type == "sampling" and name == "probs":
        return softmax_over(chosen)
    return chosen


def input_distribution(definition: Definition, spec: TensorSpec, axes: Mapping[str, int]) -> Distribution:
    """The distribution of the random input ``spec`` of ``definition`` in a workload whose axes are ``axes``."""
    return distribution_for(spec.name, definition.shape_of(spec, axes), spec.dtype, spec.description,
                            definition.op_type)
