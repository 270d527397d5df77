"""Compare a candidate's outputs with the reference's, as SOL-ExecBench decides correctness.

The numerical rules are upstream's (``sol_execbench/core/bench/correctness.py``): both sides cast to float32; any
NaN or Inf in either tensor fails, even where both hold the same value, except that with ``allow_negative_inf``
positions where *both* are -inf are accepted and left out of the figures; an all-zero output fails when the
reference's norm is not zero; an element matches when ``|out - ref| <= max_atol + max_rtol * |ref|``; at least
``required_matched_ratio`` of the elements must match and, when ``max_error_cap`` is set, no error may exceed it.
kernelfleet adds checks on top: the output must be a plain ``torch.Tensor`` (a subclass is REWARD_HACK) of the exact
shape and dtype in every round, not only the first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from core.evaluate.verdict import ErrorStats, Status
from core.problem.schema import Tolerance


@dataclass(frozen=True)
class Comparison:
    status: Status
    reason: str
    stats: ErrorStats


def compare_output(name: str, out: Any, ref: Any, tolerance: Tolerance) -> Comparison:
    """One output against the reference's, by upstream's rules (see the module's docstring)."""
    if not isinstance(ref, torch.Tensor):
        return _compare_scalar(name, out, ref, tolerance)
    if type(out) is not torch.Tensor:
        kind = type(out).__name__
        status = Status.REWARD_HACK if isinstance(out, torch.Tensor) else Status.RUNTIME_ERROR
        return Comparison(status, f"{name}: expected a plain torch.Tensor, got {kind}", ErrorStats(output=name))
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(Status.INCORRECT_SHAPE, f"{name}: shape {list(out.shape)}, expected {list(ref.shape)}",
                          ErrorStats(output=name))
    if out.dtype != ref.dtype:
        return Comparison(Status.INCORRECT_DTYPE, f"{name}: dtype {_dtype(out.dtype)}, expected {_dtype(ref.dtype)}",
                          ErrorStats(output=name))
    if out.device != ref.device:
        out = out.to(ref.device)
    return _compare_values(name, out.to(torch.float32), ref.to(torch.float32), tolerance)


def _compare_values(name: str, x: torch.Tensor, y: torch.Tensor, tol: Tolerance) -> Comparison:
    """Upstream's ``compute_error_stats`` on float32 tensors of one shape, with kernelfleet's reasons."""
    total = y.numel()
    if total == 0:
        return Comparison(Status.PASSED, "", ErrorStats(output=name))
    x_bad, y_bad = ~torch.isfinite(x), ~torch.isfinite(y)
    if tol.allow_negative_inf:
        both_neg_inf = torch.isneginf(x) & torch.isneginf(y)
        x_bad &= ~both_neg_inf
        y_bad &= ~both_neg_inf
    if x_bad.any() or y_bad.any():
        return _non_finite(name, x, y, x_bad, y_bad, tol)

    ref_norm = float(torch.linalg.vector_norm(y).item())
    if ref_norm > 0 and float(torch.linalg.vector_norm(x).item()) == 0:
        # Upstream reports the reference's norm as both errors here.
        return Comparison(Status.INCORRECT_NUMERICAL, f"{name}: all zeros, the reference is not",
                          ErrorStats(ref_norm, ref_norm, 0.0, name))

    if tol.allow_negative_inf:  # matching -inf positions passed above and take no part in the figures
        keep = ~(torch.isneginf(x) & torch.isneginf(y))
        x, y = x[keep], y[keep]
        if x.numel() == 0:
            return Comparison(Status.PASSED, "", ErrorStats(output=name))
    abs_error = (x - y).abs()
    max_abs = float(abs_error.max().item())
    exceeds = (abs_error > tol.max_atol + tol.max_rtol * y.abs()) | ~torch.isfinite(abs_error)
    # Upstream's own arithmetic, so a ratio on the boundary is decided as upstream decides it.
    matched = min(1.0, max(0.0, 1.0 - float(int(exceeds.sum().item())) / float(abs_error.numel())))
    # Upstream divides by |ref| floored at max_atol; with max_atol 0 that floor would be 0 (a 0/0 NaN upstream).
    floor = tol.max_atol if tol.max_atol > 0 else torch.finfo(torch.float32).tiny
    max_rel = float((abs_error / y.abs().clamp(min=floor)).max().item())
    stats = ErrorStats(max_abs, max_rel, matched, name)
    if tol.max_error_cap is not None and max_abs > tol.max_error_cap:
        return Comparison(Status.INCORRECT_NUMERICAL,
                          f"{name}: max abs error {max_abs:.3g} exceeds the cap {tol.max_error_cap:g}", stats)
    if matched < tol.required_matched_ratio:
        return Comparison(Status.INCORRECT_NUMERICAL,
                          f"{name}: {matched:.4%} of elements within atol={tol.max_atol:g} rtol={tol.max_rtol:g} "
                          f"(need {tol.required_matched_ratio:.4%}); max abs error {max_abs:.3g}", stats)
    return Comparison(Status.PASSED, "", stats)


def _non_finite(name: str, x: torch.Tensor, y: torch.Tensor, x_bad: torch.Tensor, y_bad: torch.Tensor,
                tol: Tolerance) -> Comparison:
    """Upstream's failure for NaN/Inf: errors 0, ``has_nan`` when either tensor holds a NaN, else ``has_inf``."""
    has_nan = bool(torch.isnan(x).any().item() or torch.isnan(y).any().item())
    parts = []
    out_count = int(x_bad.sum().item())
    if out_count:
        parts.append(f"{out_count} output elements are {'NaN' if torch.isnan(x[x_bad]).any() else 'Inf'}")
    ref_count = int(y_bad.sum().item())
    if ref_count:
        parts.append(f"the reference has {ref_count} NaN/Inf elements")
    reason = f"{name}: {'; '.join(parts)} (NaN and Inf fail even where the reference has the same value"
    if not tol.allow_negative_inf and (torch.isneginf(x) & torch.isneginf(y)).any():
        reason += "; matching -inf passes only where the workload sets allow_negative_inf"
    reason += ")"
    wrong = int((x_bad | y_bad).sum().item())
    matched = 1.0 - wrong / y.numel()
    return Comparison(Status.INCORRECT_NUMERICAL, reason,
                      ErrorStats(0.0, 0.0, matched, name, has_nan=has_nan, has_inf=not has_nan))


def _compare_scalar(name: str, out: Any, ref: Any, tol: Tolerance) -> Comparison:
    """A Python-scalar output: as upstream, both become float32 values under the same rules as tensors."""
    if isinstance(out, torch.Tensor) and type(out) is torch.Tensor and out.dim() == 0:
        out = out.item()
    if not isinstance(out, (int, float, bool)):
        return Comparison(Status.RUNTIME_ERROR, f"{name}: expected a Python scalar, got {type(out).__name__}",
                          ErrorStats(output=name))
    compared = _compare_values(name, torch.tensor(float(out), dtype=torch.float32),
                               torch.tensor(float(ref), dtype=torch.float32), tol)
    if compared.status is Status.PASSED:
        return compared
    return Comparison(compared.status, f"{compared.reason} (got {out!r}, expected {ref!r})", compared.stats)


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def worst(stats: list[ErrorStats]) -> ErrorStats:
    """The figures to report, as upstream picks them over rounds and outputs: a NaN first, then an Inf, then the
    largest absolute error (then the lowest matched ratio)."""
    if not stats:
        return ErrorStats()
    return max(stats, key=lambda s: (s.has_nan, s.has_inf, s.max_abs_error, -s.matched_ratio))
