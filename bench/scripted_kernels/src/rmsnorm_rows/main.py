"""RMSNorm for many tokens (kernelfleet fast path): for hidden == 4096, ROWS_PER_CTA rows per CTA of 256 threads,
each thread's 16-byte loads of all its rows issued before any use, the weight fetched once per thread for all its
rows, one barrier per CTA, fp32 math, one bf16 rounding (bit-identical to rmsnorm_vec at BLOCK=128). Few tokens
make few CTAs, so it is slower than rmsnorm_vec there. Other sizes use rmsnorm_vec's generic kernels, one block per
row: a vector kernel, or a scalar one when rows are not 16-byte aligned (hidden % 8 != 0) or longer than 8192."""

import numpy as np
import torch

from core.solution.runtime import launch, load_module
from kernelfleet_tunables import ROWS_PER_CTA

_mod = load_module("rmsnorm.cu")
_rows = _mod.get_function("rmsnorm_rows_h4096_bf16")
_vec = _mod.get_function("rmsnorm_vec_bf16")
_scalar = _mod.get_function("rmsnorm_scalar_bf16")
_THREADS = 256  # THREADS in rmsnorm.cu
_FALLBACK_BLOCK = 128  # FALLBACK_BLOCK in rmsnorm.cu
_MAX_VEC_HIDDEN = 8192


def _input(t):
    """Contiguous and 16-byte aligned (the vector kernels read 16-byte vectors)."""
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _output(t):
    """(buffer to write, tensor to copy it into afterwards or None)."""
    if t.is_contiguous() and t.data_ptr() % 16 == 0:
        return t, None
    return torch.empty(t.shape, dtype=t.dtype, device=t.device), t


def run(hidden_states, weight, eps, output):
    hidden = hidden_states.shape[-1]
    rows = hidden_states.numel() // hidden if hidden else 0
    if rows == 0:
        return
    x, w = _input(hidden_states), _input(weight)
    out, dst = _output(output)
    eps32 = np.float32(float(eps))
    if hidden == 4096:
        ctas = (rows + ROWS_PER_CTA - 1) // ROWS_PER_CTA
        launch(_rows, (ctas,), (_THREADS,), (x, w, out, np.int32(rows), eps32))
    elif hidden % 8 == 0 and hidden <= _MAX_VEC_HIDDEN:
        launch(_vec, (rows,), (_FALLBACK_BLOCK,), (x, w, out, np.int32(hidden), eps32))
    else:
        launch(_scalar, (rows,), (_FALLBACK_BLOCK,), (x, w, out, np.int32(hidden), eps32))
    if dst is not None:
        dst.copy_(out)
