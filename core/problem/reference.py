"""Turn a definition's reference source into a module, and normalise what its ``run`` returns."""

from __future__ import annotations

import hashlib
import sys
import types
from collections.abc import Mapping
from typing import Any

import torch

from core.problem.schema import Definition


def compile_reference(definition: Definition) -> types.ModuleType:
    """Execute the reference source in a fresh module (problem code, not candidate code).

    The module is registered in ``sys.modules`` under a name unique to its source: torch.compile imports the module
    of the function it traces by name.
    """
    digest = hashlib.sha256(definition.reference.encode()).hexdigest()[:16]
    module = types.ModuleType(f"kernelfleet_reference_{digest}")
    module.__file__ = f"<reference of {definition.name}>"
    code = compile(definition.reference, module.__file__, "exec")
    exec(code, module.__dict__)
    sys.modules[module.__name__] = module
    return module


class OutputMismatch(ValueError):
    pass


def outputs_by_name(definition: Definition, result: Any) -> dict[str, Any]:
    """Map a returned tensor / tuple / list / dict / scalar onto the definition's output names."""
    names = list(definition.outputs)
    if isinstance(result, Mapping):
        missing = [n for n in names if n not in result]
        if missing:
            raise OutputMismatch(f"returned dict lacks output {', '.join(missing)}")
        return {n: result[n] for n in names}
    if isinstance(result, (tuple, list)):
        if len(result) != len(names):
            raise OutputMismatch(f"returned {len(result)} values, the definition has {len(names)} outputs")
        return dict(zip(names, result))
    if len(names) != 1:
        raise OutputMismatch(f"returned a single value, the definition has {len(names)} outputs")
    return {names[0]: result}


def check_outputs(definition: Definition, outputs: Mapping[str, Any], axes: Mapping[str, int]) -> list[str]:
    """Every way the outputs differ from the definition's shapes and dtypes, one line each."""
    from core.problem.dtypes import torch_dtype

    problems = []
    for name, spec in definition.outputs.items():
        value = outputs[name]
        expected_shape = definition.shape_of(spec, axes)
        if expected_shape is None:
            if isinstance(value, torch.Tensor) and value.dim() == 0:
                value = value.item()
            if not isinstance(value, (int, float, bool)):
                problems.append(f"{name}: expected a Python scalar, got {type(value).__name__}")
            continue
        if not isinstance(value, torch.Tensor):
            problems.append(f"{name}: expected a tensor, got {type(value).__name__}")
            continue
        if tuple(value.shape) != expected_shape:
            problems.append(f"{name}: shape {list(value.shape)}, expected {list(expected_shape)}")
        if value.dtype != torch_dtype(spec.dtype):
            problems.append(f"{name}: dtype {str(value.dtype).removeprefix('torch.')}, expected {spec.dtype}")
    return problems
