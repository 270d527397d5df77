"""Dtype names and the precision a tensor core takes them at: which of two formats is narrower."""

from __future__ import annotations

from typing import Iterable

import torch

_DTYPE_NAMES = {
    torch.float64: "float64", torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
    torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2", torch.int64: "int64",
    torch.int32: "int32", torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
}
if hasattr(torch, "float4_e2m1fn_x2"):
    _DTYPE_NAMES[torch.float4_e2m1fn_x2] = "float4_e2m1fn_x2"

# Bits of information per value, for the formats a tensor core takes; other dtypes carry no precision tag.
_PRECISION_BITS = {"float4_e2m1fn_x2": 4, "float8_e4m3fn": 8, "float8_e5m2": 8, "int8": 8, "float16": 16,
                   "bfloat16": 16, "float32": 32, "float64": 64}


def dtype_name(dtype: torch.dtype) -> str:
    return _DTYPE_NAMES.get(dtype) or str(dtype).removeprefix("torch.")


def narrower(a: str, b: str) -> str:
    """The lower-precision of two dtype names; a name without a precision rank loses to one with."""
    ra, rb = _PRECISION_BITS.get(a), _PRECISION_BITS.get(b)
    if ra is None:
        return b
    if rb is None:
        return a
    return a if ra <= rb else b


def wider(names: Iterable[str]) -> str | None:
    ranked = [n for n in names if n in _PRECISION_BITS]
    if not ranked:
        return None
    return max(ranked, key=lambda n: _PRECISION_BITS[n])


__all__ = ["dtype_name", "narrower", "wider"]
