"""Compare a candidate's outputs with the reference's, as SOL-ExecBench defines correctness."""

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
    """One output: exact type, shape and dtype; then element-wise |out - ref| <= atol + rtol * |ref|.

    NaN or Inf in the candidate fails unless the reference has the same value at the same place (and a -inf is
    accepted only where the workload allows it); an all-zero output fails when the reference is not all zero; at
    least ``required_matched_ratio`` of the elements must match; no error may exceed ``max_error_cap``.
    """
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
    if ref.numel() == 0:
        return Comparison(Status.PASSED, "", ErrorStats(output=name))
    if ref.dtype == torch.bool or not (ref.dtype.is_floating_point or ref.dtype.is_complex):
        return _compare_exact(name, out, ref)
    return _compare_float(name, out.float(), ref.float(), tolerance)


def _compare_exact(name: str, out: torch.Tensor, ref: torch.Tensor) -> Comparison:
    equal = out == ref
    matched = _ratio(equal)
    if matched < 1.0:
        wrong = int((~equal).sum().item())
        return Comparison(Status.INCORRECT_NUMERICAL, f"{name}: {wrong} of {ref.numel()} elements differ",
                          ErrorStats(max_abs_error=float("inf"), matched_ratio=matched, output=name))
    return Comparison(Status.PASSED, "", ErrorStats(output=name))


def _compare_float(name: str, out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> Comparison:
    out_finite, ref_finite = torch.isfinite(out), torch.isfinite(ref)
    same_special = (~out_finite) & (~ref_finite) & ((out == ref) | (torch.isnan(out) & torch.isnan(ref)))
    if not tol.allow_negative_inf:
        same_special &= ~torch.isneginf(ref) | torch.isneginf(out)
    bad_special = (~out_finite) & ~same_special
    if bad_special.any():
        count = int(bad_special.sum().item())
        kind = "NaN" if torch.isnan(out[bad_special]).any() else "Inf"
        return Comparison(Status.INCORRECT_NUMERICAL, f"{name}: {count} elements are {kind} where the reference "
                          "is finite", ErrorStats(max_abs_error=float("inf"), matched_ratio=0.0, output=name))
    missing_special = (~ref_finite) & ~same_special
    if missing_special.any() and not (tol.allow_negative_inf and torch.isneginf(ref[missing_special]).all()):
        count = int(missing_special.sum().item())
        return Comparison(Status.INCORRECT_NUMERICAL, f"{name}: {count} elements are finite where the reference "
                          "is NaN/Inf", ErrorStats(max_abs_error=float("inf"), matched_ratio=0.0, output=name))
    both = out_finite & ref_finite
    diff = torch.where(both, (out - ref).abs(), torch.zeros_like(out))
    bound = tol.max_atol + tol.max_rtol * ref.abs()
    matched_mask = (diff <= bound) | ~both
    matched = _ratio(matched_mask)
    max_abs = diff.max().item()
    rel = diff / ref.abs().clamp_min(torch.finfo(torch.float32).tiny)
    max_rel = torch.where(both & (ref != 0), rel, torch.zeros_like(rel)).max().item()
    stats = ErrorStats(max_abs_error=max_abs, max_rel_error=max_rel, matched_ratio=matched, output=name)
    if (out == 0).all() and not (ref == 0).all():
        return Comparison(Status.INCORRECT_NUMERICAL, f"{name}: all zeros, the reference is not", stats)
    if tol.max_error_cap is not None and max_abs > tol.max_error_cap:
        return Comparison(Status.INCORRECT_NUMERICAL,
                          f"{name}: max abs error {max_abs:.3g} exceeds the cap {tol.max_error_cap:g}", stats)
    if matched < tol.required_matched_ratio:
        return Comparison(Status.INCORRECT_NUMERICAL,
                          f"{name}: {matched:.4%} of elements within atol={tol.max_atol:g} rtol={tol.max_rtol:g} "
                          f"(need {tol.required_matched_ratio:.4%}); max abs error {max_abs:.3g}", stats)
    return Comparison(Status.PASSED, "", stats)


def _compare_scalar(name: str, out: Any, ref: Any, tol: Tolerance) -> Comparison:
    if isinstance(out, torch.Tensor) and type(out) is torch.Tensor and out.dim() == 0:
        out = out.item()
    if not isinstance(out, (int, float, bool)):
        return Comparison(Status.RUNTIME_ERROR, f"{name}: expected a Python scalar, got {type(out).__name__}",
                          ErrorStats(output=name))
    error = abs(float(out) - float(ref))
    if error > tol.max_atol + tol.max_rtol * abs(float(ref)):
        return Comparison(Status.INCORRECT_NUMERICAL, f"{name}: {out!r}, expected {ref!r}",
                          ErrorStats(max_abs_error=error, matched_ratio=0.0, output=name))
    return Comparison(Status.PASSED, "", ErrorStats(max_abs_error=error, output=name))


def _ratio(mask: torch.Tensor) -> float:
    # An exact count: a float32 mean of ones can come out as 0.99999994 and fail a required ratio of 1.0.
    return int(mask.sum().item()) / mask.numel()


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def worst(stats: list[ErrorStats]) -> ErrorStats:
    if not stats:
        return ErrorStats()
    return max(stats, key=lambda s: (s.max_abs_error, -s.matched_ratio))
