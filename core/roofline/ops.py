"""What each aten op is, for counting: matmul-like ops and their FLOP formulas, which ops move data without
arithmetic, which reduce, which gather or scatter, which keep a tensor's data precision. Keyed by overload-packet
name (``aten.add_`` is "add_")."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

aten = torch.ops.aten


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Ops whose result carries the effective precision of its full-size operands.
GRID_PRESERVING = _names("""
    _to_copy clone contiguous copy lift_fresh_copy alias detach _unsafe_view view_copy reshape expand_copy
    permute_copy transpose_copy t_copy unsqueeze_copy squeeze_copy slice_copy select_copy split_copy
    neg abs clamp clamp_min clamp_max mul div constant_pad_nd cat stack index_select gather embedding index
    masked_fill where repeat flip roll take _reshape_alias unfold narrow_copy
""")
# Ops that only produce or move data: no arithmetic.
NO_ARITHMETIC = GRID_PRESERVING - _names("mul div neg abs clamp clamp_min clamp_max where masked_fill") | _names("""
    copy_ fill_ zero_ fill full full_like zeros zeros_like ones ones_like empty empty_like empty_strided
    new_empty new_empty_strided new_zeros new_ones new_full scalar_tensor arange linspace randn randn_like rand
    rand_like randint randint_like randperm normal_ uniform_ random_ bernoulli_ exponential_ index_put_
    index_put _index_put_impl_ index_copy_ index_copy scatter_ scatter slice_scatter select_scatter
    diagonal_scatter as_strided_scatter _local_scalar_dense lift_fresh set_ resize_ nonzero masked_select
    view_as_real view_as_complex tril_indices triu_indices one_hot embedding_bag _embedding_bag
    _unsafe_index repeat_interleave masked_scatter_ masked_scatter index_fill_ index_fill tril triu
    equal is_nonzero item
""")
REDUCTIONS = {
    **dict.fromkeys(_names("""sum mean amax amin max min prod argmax argmin any all logsumexp cumsum cumprod
        count_nonzero norm linalg_vector_norm nansum aminmax cummax cummin topk sort argsort kthvalue median
        mode"""), 1.0),
    **dict.fromkeys(_names("var std var_mean std_mean"), 3.0),
    **dict.fromkeys(_names("_softmax _log_softmax _safe_softmax"), 5.0),
    **dict.fromkeys(_names("""native_layer_norm native_group_norm native_batch_norm _native_batch_norm_legit
        _native_batch_norm_legit_no_training _fused_rms_norm"""), 8.0),
}
# Gathers: the first tensor argument is read only where indexed.
GATHERS = _names("index_select embedding index gather take _unsafe_index embedding_bag _embedding_bag masked_select")
# In-place ops that overwrite without reading the destination.
WRITE_ONLY = _names("""copy_ fill_ zero_ index_copy_ masked_fill_ masked_scatter_ index_fill_ normal_ uniform_
    random_ bernoulli_ exponential_ set_ resize_""")
SHAPE_ONLY = _names("""empty_like zeros_like ones_like full_like rand_like randn_like randint_like new_empty
    new_zeros new_ones new_full new_empty_strided""")

# Which positional arguments are the two (or three) matmul operands.
OPERANDS = {
    "mm": (0, 1), "bmm": (0, 1), "addmm": (1, 2), "baddbmm": (1, 2), "_scaled_mm": (0, 1), "_int_mm": (0, 1),
    "mv": (0, 1), "addmv": (1, 2), "dot": (0, 1), "vdot": (0, 1), "_grouped_mm": (0, 1),
    "_scaled_grouped_mm": (0, 1), "convolution": (0, 1), "_convolution": (0, 1), "convolution_overrideable": (0, 1),
    "cudnn_convolution": (0, 1), "_slow_conv2d_forward": (0, 1), "convolution_backward": (0, 2),
    "mkldnn_convolution": (0, 1),
}


def numel_of(shape) -> int:
    return math.prod(int(s) for s in shape)


def _sdpa_flops(q, k, v) -> int:
    # Q @ K^T then P @ V, over every (batch..., head) pair: 2*Sq*Skv*D + 2*Sq*Skv*Dv.
    batch = numel_of(q.shape[:-2])
    sq, d = q.shape[-2], q.shape[-1]
    skv, dv = k.shape[-2], v.shape[-1]
    return 2 * batch * sq * skv * (d + dv)


def _extra_formulas() -> dict[Any, Callable]:
    def sdpa_cpu(q, k, v, *args, out_val=None, **kwargs):
        return _sdpa_flops(q, k, v)

    def int_mm(a, b, *args, out_val=None, **kwargs):
        return 2 * a.shape[0] * a.shape[1] * b.shape[1]

    def mv(a, b, *args, out_val=None, **kwargs):
        return 2 * a.numel()

    def addmv(bias, a, b, *args, out_val=None, **kwargs):
        return 2 * a.numel()

    def dot(a, b, *args, out_val=None, **kwargs):
        return 2 * a.numel()

    def grouped_mm(a, b, *args, out_val=None, **kwargs):
        if a.dim() == 2 and b.dim() == 3:  # rows of a split into groups, one weight per group
            return 2 * a.shape[0] * a.shape[1] * b.shape[2]
        if a.dim() == 3 and b.dim() == 3:
            return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
        if a.dim() == 2 and b.dim() == 2:  # the K dimension split into groups
            out = out_val
            if out is not None:
                return 2 * numel_of(out.shape[-2:]) * a.shape[1]
            return 2 * a.shape[0] * a.shape[1] * b.shape[1]
        return 2 * a.shape[-2] * a.shape[-1] * b.shape[-1] * (a.shape[0] if a.dim() == 3 else b.shape[0])

    formulas: dict[Any, Callable] = {}
    for name, fn in (("_scaled_dot_product_flash_attention_for_cpu", sdpa_cpu),
                     ("_scaled_dot_product_fused_attention_overrideable", sdpa_cpu),
                     ("_int_mm", int_mm), ("mv", mv), ("addmv", addmv), ("dot", dot), ("vdot", dot),
                     ("_grouped_mm", grouped_mm), ("_scaled_grouped_mm", grouped_mm)):
        packet = getattr(aten, name, None)
        if packet is not None:
            formulas[packet] = fn
    return formulas


def _flop_formulas() -> dict[Any, Callable]:
    try:
        from torch.utils.flop_counter import flop_registry
        formulas = dict(flop_registry)
    except ImportError:  # pragma: no cover - very old torch
        formulas = {}
    formulas.update({k: v for k, v in _extra_formulas().items() if k not in formulas})
    return formulas


FORMULAS = _flop_formulas()
ATTENTION = {p for p in FORMULAS if "attention" in str(p)}


__all__ = ["ATTENTION", "FORMULAS", "GATHERS", "GRID_PRESERVING", "NO_ARITHMETIC", "OPERANDS", "REDUCTIONS",
           "SHAPE_ONLY", "WRITE_ONLY", "numel_of"]
