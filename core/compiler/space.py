"""What the compiler agent searches, as data: how a problem's PyTorch reference is compiled, captured and computed.

A configuration (``CompilerConfig``) is one choice per axis: ``torch.compile``'s mode (or none: "eager") and its
switches (``fullgraph``, ``dynamic=False``, Inductor options: epilogue fusion, coordinate-descent tuning, the GEMM
backends max-autotune picks from, ``triton.cudagraphs``), explicit CUDA-graph capture of the call per input shape,
and a precision (TF32 for fp32 matmuls, reduced-precision reductions, or the whole call in bfloat16/float16). The
space leaves out what does not apply on the device or to the problem's inputs (``Target``): on the CPU no CUDA
graphs, no CUTLASS and no TF32. Whether a precision holds is never decided here: the evaluator's correctness check
decides, as for any candidate.

Axes depend on each other (GEMM backends matter only under max-autotune, graph capture is pointless where Inductor
already captures), so a searched point is ``normalize``d: axes that do nothing in it are put at their defaults, and
two points that build the same solution have the same ``key``. Pure.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

EAGER = "eager"  # no torch.compile: the reference as it is, under the other axes
CPU_MODES = ("default", EAGER, "max-autotune-no-cudagraphs")
CUDA_MODES = CPU_MODES + ("max-autotune", "reduce-overhead")
AUTOTUNE_MODES = frozenset({"max-autotune", "max-autotune-no-cudagraphs"})  # autotune GEMMs, coordinate descent on
CUDAGRAPH_MODES = frozenset({"max-autotune", "reduce-overhead"})  # Inductor captures CUDA graphs itself
# Inductor's own choice of GEMM backends is "" (left as the installed torch has it).
GEMM_BACKENDS = ("", "ATEN", "TRITON")
CUTLASS_BACKENDS = "ATEN,TRITON,CUTLASS"
EXACT = "exact"
LOW_PRECISIONS = ("bf16", "fp16")  # the whole call computed in this dtype where the inputs are float32
FLOAT32 = "float32"
HALF_DTYPES = frozenset({"float16", "bfloat16"})
_MODE_LABELS = {"default": "torch.compile default", "max-autotune": "max-autotune + cudagraphs",
                "reduce-overhead": "reduce-overhead + cudagraphs"}


@dataclass(frozen=True)
class Target:
    """What a space is made for: the run's device and what the problem's inputs are."""

    device: str  # "cuda" or "cpu"
    float32_inputs: bool = True  # some floating input is float32 (TF32, or computing in a half type, may apply)
    half_inputs: bool = False  # some input is float16/bfloat16 (reduced-precision reductions may apply)
    cutlass: bool = False  # Inductor's CUTLASS GEMM backend is installed

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")


@dataclass(frozen=True)
class CompilerConfig:
    """One point of the space; every field's default is "as PyTorch does it"."""

    mode: str = "default"
    fullgraph: bool = False
    dynamic: bool | None = None  # None: PyTorch's automatic dynamic shapes; False: one compile per shape
    epilogue_fusion: bool = True
    coordinate_descent_tuning: bool = False
    gemm_backends: str = ""
    triton_cudagraphs: bool = False
    graph_capture: bool = False  # explicit CUDA-graph capture per input shape, inputs copied into static buffers
    precision: str = EXACT  # EXACT, "tf32", "reduced_reductions", or one of LOW_PRECISIONS

    @property
    def compiled(self) -> bool:
        return self.mode != EAGER

    @property
    def inductor_cudagraphs(self) -> bool:
        return self.compiled and (self.mode in CUDAGRAPH_MODES or self.triton_cudagraphs)

    @property
    def inductor_options(self) -> dict[str, Any]:
        """Inductor options set beyond the mode's own (``torch._inductor.list_mode_options``)."""
        options: dict[str, Any] = {}
        if not self.epilogue_fusion:
            options["epilogue_fusion"] = False
        if self.coordinate_descent_tuning:
            options["coordinate_descent_tuning"] = True
        if self.gemm_backends:
            options["max_autotune_gemm_backends"] = self.gemm_backends
        if self.triton_cudagraphs:
            options["triton.cudagraphs"] = True
        return options

    @property
    def is_reference(self) -> bool:
        """Whether it changes nothing: the reference itself, which is the seed already."""
        return normalize(self) == CompilerConfig(mode=EAGER)

    def key(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def label(self) -> str:
        """What it is, in a few words: "max-autotune + cudagraphs, fullgraph", "eager, bf16"."""
        parts = [_MODE_LABELS.get(self.mode, self.mode)]
        if self.triton_cudagraphs:
            parts.append("triton.cudagraphs")
        if self.fullgraph:
            parts.append("fullgraph")
        if self.dynamic is False:
            parts.append("dynamic=False")
        if not self.epilogue_fusion:
            parts.append("no epilogue fusion")
        if self.coordinate_descent_tuning:
            parts.append("coordinate descent")
        if self.gemm_backends:
            parts.append(f"gemm {self.gemm_backends}")
        if self.graph_capture:
            parts.append("CUDA graph per shape")
        if self.precision != EXACT:
            parts.append(self.precision)
        return ", ".join(parts)


def config_from(values: dict[str, Any]) -> CompilerConfig:
    """A configuration from a dict of its fields (unknown names ignored: a newer kernelfleet's extras)."""
    known = {f.name for f in fields(CompilerConfig)}
    return normalize(CompilerConfig(**{k: v for k, v in values.items() if k in known}))


def space_for(target: Target) -> dict[str, tuple]:
    """Axis -> its values, the default first; only axes that can do something on ``target``."""
    space: dict[str, tuple] = {
        "mode": CUDA_MODES if target.cuda else CPU_MODES,
        "fullgraph": (False, True),
        "dynamic": (None, False),
        "epilogue_fusion": (True, False),
    }
    if target.cuda:
        space["coordinate_descent_tuning"] = (False, True)
        space["gemm_backends"] = GEMM_BACKENDS + ((CUTLASS_BACKENDS,) if target.cutlass else ())
        space["triton_cudagraphs"] = (False, True)
        space["graph_capture"] = (False, True)
    space["precision"] = precisions(target)
    return space


def precisions(target: Target) -> tuple[str, ...]:
    found = [EXACT]
    if target.cuda and target.float32_inputs:
        found.append("tf32")
    if target.cuda and target.half_inputs:
        found.append("reduced_reductions")
    if target.float32_inputs:
        found += list(LOW_PRECISIONS if target.cuda else LOW_PRECISIONS[:1])  # float16 on the CPU: slow, no gain
    return tuple(found)


def normalize(config: CompilerConfig) -> CompilerConfig:
    """The same configuration with every axis that does nothing in it at its default."""
    if not config.compiled:
        config = replace(config, fullgraph=False, dynamic=None, epilogue_fusion=True, coordinate_descent_tuning=False,
                         gemm_backends="", triton_cudagraphs=False)
    if config.mode not in AUTOTUNE_MODES:
        config = replace(config, gemm_backends="")
    else:
        config = replace(config, coordinate_descent_tuning=False)  # the mode turns it on already
    if config.mode in CUDAGRAPH_MODES:
        config = replace(config, triton_cudagraphs=False)  # the mode's own
    if config.inductor_cudagraphs:
        config = replace(config, graph_capture=False)  # no capture of a capture
    return config


def points(space: dict[str, tuple]) -> list[CompilerConfig]:
    """Every distinct configuration of ``space`` that changes something, in the space's order (defaults first)."""
    names = list(space)
    seen: dict[str, CompilerConfig] = {}
    for combo in itertools.product(*(space[n] for n in names)):
        config = normalize(CompilerConfig(**dict(zip(names, combo))))
        if not config.is_reference:
            seen.setdefault(config.key(), config)
    return list(seen.values())


def in_space(config: CompilerConfig, space: dict[str, tuple]) -> bool:
    """Whether ``config`` can be made on this target: each of its non-default axes is one of the space's."""
    defaults = CompilerConfig()
    return all(getattr(config, f.name) == getattr(defaults, f.name) or getattr(config, f.name) in space.get(f.name, ())
               for f in fields(CompilerConfig))


def starts(target: Target) -> tuple[CompilerConfig, ...]:
    """The first configurations tried on a problem nothing similar has taught anything about: one probe per axis
    (a compile, and a precision where the inputs allow one), so the search learns early what the tolerance holds."""
    if target.cuda:
        first = [CompilerConfig(mode="max-autotune"), CompilerConfig(mode="default", graph_capture=True)]
        if target.float32_inputs:
            first.append(CompilerConfig(mode="default", graph_capture=True, precision="tf32"))
    else:
        first = [CompilerConfig(mode="default")]
        if target.float32_inputs:
            first.append(CompilerConfig(mode=EAGER, precision=LOW_PRECISIONS[0]))
    return tuple(first)
