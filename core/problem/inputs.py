"""Build a workload's inputs on a device from a seed.

Custom inputs come from the reference's entry point, safetensors inputs from their blobs, scalars from the
workload; random inputs get the distributions SOL-ExecBench's generator gives them (see ``input_rules``), so a
kernel sees here the values it will see on the leaderboard.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from core.problem.dtypes import torch_dtype
from core.problem.input_rules import generate, rule_for
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


def _random_value(definition: Definition, spec: TensorSpec, axes: dict[str, int], device: torch.device) -> Any:
    """A random input as SOL-ExecBench generates it (see core.problem.input_rules); a Python scalar for shape None."""
    shape = definition.shape_of(spec, axes)
    rule = rule_for(spec.name, shape, spec.dtype, spec.description, definition.op_type)
    if shape is None:
        return generate(rule, (), spec.dtype, device).item()
    return generate(rule, shape, spec.dtype, device)
