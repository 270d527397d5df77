"""Build a workload's inputs on a device from a seed.

Custom inputs come from the reference's entry point, safetensors inputs from their blobs, scalars from the
workload; random inputs follow the conventions that make them meaningful (see ``_random_tensor``).
"""

from __future__ import annotations

import re
import types
from typing import Any

import torch

from core.problem.dtypes import FLOATING, INTEGER, torch_dtype
from core.problem.schema import Definition, InputKind, Problem, TensorSpec, Workload


class InputError(ValueError):
    """Inputs for a workload could not be built (bad custom entry point output, bad blob, ...)."""


def make_inputs(problem: Problem, workload: Workload, device: str | torch.device, seed: int,
                reference: types.ModuleType | None = None) -> dict[str, Any]:
    """The inputs of ``workload`` in definition order, generated on ``device`` from ``seed``."""
    if workload.unavailable:
        raise InputError(workload.unavailable)
    definition = problem.definition
    device = torch.device(device)
    torch.manual_seed(seed)
    if workload.uses_custom_inputs:
        if reference is None:
            from core.problem.reference import compile_reference

            reference = compile_reference(definition)
        return _custom_inputs(definition, workload, device, reference)
    values: dict[str, Any] = {}
    for name, spec in definition.inputs.items():
        source = workload.inputs[name]
        if source.kind is InputKind.SCALAR:
            values[name] = source.value
        elif source.kind is InputKind.SAFETENSORS:
            values[name] = _load_blob(definition, workload, spec, device)
        else:
            values[name] = _random_value(definition, spec, workload.resolved_axes, device)
    return values


def _custom_inputs(definition: Definition, workload: Workload, device: torch.device,
                   reference: types.ModuleType) -> dict[str, Any]:
    entry = getattr(reference, definition.custom_inputs_entrypoint)
    axes_and_scalars = {**workload.axes, **workload.resolved_axes}
    produced = entry(axes_and_scalars, device)
    if not isinstance(produced, dict):
        raise InputError(f"{definition.custom_inputs_entrypoint} returned {type(produced).__name__}, expected a dict")
    missing = [n for n in definition.inputs if n not in produced]
    if missing:
        raise InputError(f"{definition.custom_inputs_entrypoint} did not return input {', '.join(missing)}")
    values = {}
    for name, spec in definition.inputs.items():
        value = produced[name]
        expected = definition.shape_of(spec, workload.resolved_axes)
        if expected is None:
            if isinstance(value, torch.Tensor) and value.dim() == 0:
                value = value.item()
            if not isinstance(value, (int, float, bool)):
                raise InputError(f"custom input {name}: expected a Python scalar, got {type(value).__name__}")
        else:
            if not isinstance(value, torch.Tensor):
                raise InputError(f"custom input {name}: expected a tensor, got {type(value).__name__}")
            if tuple(value.shape) != expected:
                raise InputError(f"custom input {name}: shape {list(value.shape)}, expected {list(expected)}")
        values[name] = value
    return values


def _load_blob(definition: Definition, workload: Workload, spec: TensorSpec, device: torch.device) -> torch.Tensor:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    source = workload.inputs[spec.name]
    path = workload.safetensors_files[spec.name]
    try:
        tensors = load_file(str(path))
    except (OSError, SafetensorError) as exc:
        raise InputError(f"input {spec.name}: cannot read {path}: {exc}") from None
    if source.tensor_key not in tensors:
        raise InputError(f"input {spec.name}: no tensor {source.tensor_key!r} in {path}")
    tensor = tensors[source.tensor_key]
    expected = definition.shape_of(spec, workload.resolved_axes)
    if expected is not None and tuple(tensor.shape) != expected:
        raise InputError(f"input {spec.name}: blob shape {list(tensor.shape)}, expected {list(expected)}")
    if tensor.dtype != torch_dtype(spec.dtype):
        raise InputError(f"input {spec.name}: blob dtype {tensor.dtype}, expected {spec.dtype}")
    return tensor.to(device)


_INDEX_WORDS = {"id", "ids", "idx", "index", "indices", "token", "tokens", "label", "labels", "target", "targets",
                "expert", "experts", "position", "positions", "pos", "slot", "slots", "page", "pages", "block"}
_BOUND_AXES = re.compile(r"vocab|num_embeddings|num_experts|num_classes|num_labels|num_pages|num_blocks")


def _words(name: str) -> set[str]:
    return set(name.lower().split("_"))


def _random_value(definition: Definition, spec: TensorSpec, axes: dict[str, int], device: torch.device) -> Any:
    if spec.shape is None:
        if "eps" in _words(spec.name) or "epsilon" in _words(spec.name):
            return 1e-6
        return _random_tensor(definition, spec, (), axes, device).item()
    return _random_tensor(definition, spec, definition.shape_of(spec, axes), axes, device)


def _random_tensor(definition: Definition, spec: TensorSpec, shape: tuple[int, ...], axes: dict[str, int],
                   device: torch.device) -> torch.Tensor:
    """Random data with the conventions kernels expect.

    Normalisation weights lie near 1; probabilities sum to 1 along the last axis; scales and variances are
    positive; index-like integers lie in [0, bound) where bound is an axis named in the input's description or
    an obviously bounding axis (vocab, experts, ...); fp8 values stay within ±2 and fp4 bytes are uniform.
    """
    dtype_name, words = spec.dtype, _words(spec.name)
    dtype = torch_dtype(dtype_name)
    if dtype_name in FLOATING:
        if words & {"prob", "probs", "probabilities"}:
            return torch.softmax(torch.randn(shape, device=device, dtype=torch.float32), dim=-1).to(dtype)
        if _is_norm_weight(definition, spec, shape):
            return (1.0 + 0.1 * torch.randn(shape, device=device, dtype=torch.float32)).to(dtype)
        if words & {"scale", "scales", "var", "variance", "std", "rstd"}:
            return (0.5 + torch.rand(shape, device=device, dtype=torch.float32)).to(dtype)
        return torch.randn(shape, device=device, dtype=dtype)
    if dtype_name in ("float8_e4m3fn", "float8_e5m2"):
        return torch.randn(shape, device=device, dtype=torch.float32).clamp_(-2.0, 2.0).to(dtype)
    if dtype_name == "float4_e2m1fn_x2":
        return torch.randint(0, 256, shape, device=device, dtype=torch.uint8).view(dtype)
    if dtype_name == "bool":
        return torch.randint(0, 2, shape, device=device, dtype=torch.bool)
    if dtype_name in INTEGER:
        if words & _INDEX_WORDS:
            bound = _index_bound(definition, spec, axes)
            return torch.randint(0, max(bound, 1), shape, device=device, dtype=dtype)
        low, high = (0, 256) if dtype_name == "uint8" else (-128, 128) if dtype_name == "int8" else (-1024, 1024)
        return torch.randint(low, high, shape, device=device, dtype=dtype)
    raise ValueError(f"no random generator for dtype {dtype_name}")


def _is_norm_weight(definition: Definition, spec: TensorSpec, shape: tuple[int, ...]) -> bool:
    words = _words(spec.name)
    if len(shape) != 1 or not words & {"weight", "gamma", "w"}:
        return False
    context = f"{spec.name} {definition.name} {definition.description}".lower()
    return "norm" in context


def _index_bound(definition: Definition, spec: TensorSpec, axes: dict[str, int]) -> int:
    description = spec.description.lower()
    mentioned = [a for a in axes if re.search(rf"\b{re.escape(a.lower())}\b", description)]
    if mentioned:
        return axes[mentioned[0]]
    if _words(spec.name) & {"position", "positions", "pos"} and spec.shape:
        last = spec.shape[-1]
        return last if isinstance(last, int) else axes[last]
    bounding = [a for a in axes if _BOUND_AXES.search(a)]
    if bounding:
        return axes[bounding[0]]
    return 1024
