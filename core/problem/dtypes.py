"""Dtype names of the problem format mapped to torch dtypes."""

from __future__ import annotations

import torch

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "float4_e2m1fn_x2": torch.float4_e2m1fn_x2,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}

FLOATING = {"float64", "float32", "float16", "bfloat16"}
LOW_PRECISION = {"float8_e4m3fn", "float8_e5m2", "float4_e2m1fn_x2"}
INTEGER = {"int64", "int32", "int16", "int8", "uint8"}


def torch_dtype(name: str) -> torch.dtype:
    return TORCH_DTYPES[name]
