"""The problem model: a SOL-ExecBench definition and its workloads, as frozen dataclasses (no torch here)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

# Every dtype name the upstream format uses, plus the few plain ones a problem may reasonably add.
DTYPES = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float4_e2m1fn_x2",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
)


class AxisKind(str, Enum):
    CONST = "const"
    VAR = "var"
    EXPR = "expr"


@dataclass(frozen=True)
class Axis:
    name: str
    kind: AxisKind
    value: int | None = None  # const axes
    expression: str | None = None  # expr axes
    parsed: ast.expr | None = field(default=None, compare=False, repr=False)
    description: str = ""


@dataclass(frozen=True)
class TensorSpec:
    """``shape`` is None for a Python scalar, () for a 0-D tensor, else a tuple of axis names and literal sizes."""

    name: str
    shape: tuple[str | int, ...] | None
    dtype: str
    description: str = ""

    @property
    def is_scalar(self) -> bool:
        return self.shape is None


class InputKind(str, Enum):
    RANDOM = "random"
    SCALAR = "scalar"
    CUSTOM = "custom"
    SAFETENSORS = "safetensors"


@dataclass(frozen=True)
class InputSource:
    kind: InputKind
    value: int | float | bool | None = None  # scalar
    path: str | None = None  # safetensors
    tensor_key: str | None = None  # safetensors


@dataclass(frozen=True)
class Tolerance:
    """Upstream correctness bounds; the defaults are SOL-ExecBench's (``ToleranceSpec``)."""

    max_atol: float = 1e-2
    max_rtol: float = 1e-2
    required_matched_ratio: float = 0.99
    max_error_cap: float | None = None
    allow_negative_inf: bool = False


@dataclass(frozen=True)
class Workload:
    index: int  # line order in workload.jsonl, from 0
    uuid: str
    axes: Mapping[str, int]  # the var axes as given
    inputs: Mapping[str, InputSource]
    tolerance: Tolerance
    resolved_axes: Mapping[str, int]  # const + var + expr
    unavailable: str | None = None  # why this workload cannot be built here, if it cannot
    safetensors_files: Mapping[str, Path] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def runnable(self) -> bool:
        return self.unavailable is None

    @property
    def uses_custom_inputs(self) -> bool:
        return any(s.kind is InputKind.CUSTOM for s in self.inputs.values())


@dataclass(frozen=True)
class Definition:
    name: str
    description: str
    axes: Mapping[str, Axis]
    inputs: Mapping[str, TensorSpec]
    outputs: Mapping[str, TensorSpec]
    reference: str
    custom_inputs_entrypoint: str | None = None
    hf_id: str | None = None
    op_type: str | None = None  # e.g. "sampling": upstream's input generator reads it (core.problem.input_rules)

    def shape_of(self, spec: TensorSpec, axes: Mapping[str, int]) -> tuple[int, ...] | None:
        if spec.shape is None:
            return None
        return tuple(a if isinstance(a, int) else axes[a] for a in spec.shape)


@dataclass(frozen=True)
class Problem:
    path: Path  # the problem folder
    subset: str  # the parent folder's name, e.g. "L1"
    definition: Definition
    workloads: tuple[Workload, ...]
    warnings: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def runnable_workloads(self) -> tuple[Workload, ...]:
        return tuple(w for w in self.workloads if w.runnable)

    def input_elements(self, workload: Workload) -> int:
        """Total number of input elements of a workload: a size measure for picking the smallest."""
        total = 0
        for spec in self.definition.inputs.values():
            shape = self.definition.shape_of(spec, workload.resolved_axes)
            n = 1
            for d in shape or ():
                n *= d
            total += n
        return total

    def smallest_runnable_workload(self) -> Workload | None:
        runnable = self.runnable_workloads
        return min(runnable, key=self.input_elements) if runnable else None
