"""How a random input is drawn (torch): each distribution ``core.problem.distributions`` chooses, following
SOL-ExecBench's input generator (``core/bench/io.py``), gets its generator here, so what is drawn is what the
agent's brief names.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from core.problem import distributions
from core.problem.distributions import (
    NAME_RULE_DTYPES, Distribution, distribution_for, is_binary_mask, is_causal_mask, is_norm_bias, is_norm_weight,
    is_positive, is_softmax_output, is_weight_matrix,
)
from core.problem.dtypes import torch_dtype

# The choice and its name predicates stay importable from here (bench/input_distributions.py, the upstream tests).
__all__ = ["ALL_RULES", "NAME_RULE_DTYPES", "InputRule", "e2m1_codes", "generate", "is_binary_mask", "is_causal_mask",
           "is_norm_bias", "is_norm_weight", "is_positive", "is_softmax_output", "is_weight_matrix", "rule_for"]

Generator = Callable[[tuple[int, ...], torch.dtype, torch.device], torch.Tensor]


@dataclass(frozen=True)
class InputRule:
    name: str  # the distribution's identifier, e.g. "norm_weight"
    summary: str  # the distribution in words
    generate: Generator


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


def _rule(distribution: Distribution, generator: Generator) -> InputRule:
    return InputRule(distribution.name, distribution.summary, generator)


ALL_RULES = (
    _rule(distributions.NORM_WEIGHT, lambda s, d, dev: torch.ones(s, dtype=d, device=dev)),
    _rule(distributions.NORM_BIAS, lambda s, d, dev: torch.zeros(s, dtype=d, device=dev)),
    _rule(distributions.CAUSAL_MASK, _causal_mask),
    _rule(distributions.BINARY_MASK, _binary),
    _rule(distributions.ROPE_COS, _trig(torch.cos)),
    _rule(distributions.ROPE_SIN, _trig(torch.sin)),
    _rule(distributions.POSITIVE, lambda s, d, dev: _normal(s, d, dev).abs() + 0.1),
    _rule(distributions.SSM_A_CUMSUM, _cumulative_decay),
    _rule(distributions.SSM_A_LOG, _uniform(-5.0, -1.0)),
    _rule(distributions.SSM_A, _uniform(-1.0, -0.001)),
    _rule(distributions.SSM_GATE, _uniform(-5.0, 0.0)),
    _rule(distributions.SOFTMAX_OUTPUT, _softmax_of_normal),
    _rule(distributions.WEIGHT_MATRIX, _scaled_normal),
    _rule(distributions.NORMAL, _normal),
    _rule(distributions.FP8, _clamped_normal),
    _rule(distributions.FP4, _packed_fp4),
    _rule(distributions.BOOL, _bools),
    _rule(distributions.INT8, _integers(-128, 128)),
    _rule(distributions.INT, _integers(-1024, 1024)),
    _rule(distributions.UINT8, _integers(0, 256)),
)
_RULES = {rule.name: rule for rule in ALL_RULES}


def _softmax_over(rule: InputRule, distribution: Distribution) -> InputRule:
    """``distribution`` (``distributions.softmax_over``) drawn: softmax along the last axis of ``rule``'s draw."""
    return InputRule(distribution.name, distribution.summary,
                     lambda shape, dtype, device: torch.softmax(rule.generate(shape, dtype, device), dim=-1))


def rule_for(name: str, shape: tuple[int, ...] | None, dtype: str, description: str = "",
             op_type: str | None = None) -> InputRule:
    """The rule upstream applies to a random input (``shape`` None for a Python scalar): the generator of its
    distribution (``core.problem.distributions.distribution_for``)."""
    distribution = distribution_for(name, shape, dtype, description, op_type)
    if distribution.softmax_of is not None:
        return _softmax_over(_RULES[distribution.softmax_of.name], distribution)
    return _RULES[distribution.name]


def generate(rule: InputRule, shape: tuple[int, ...], dtype: str, device: torch.device) -> torch.Tensor:
    return rule.generate(tuple(shape), torch_dtype(dtype), device)
