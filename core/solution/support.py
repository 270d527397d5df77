"""Which solutions kernelfleet can run, and how: one :class:`RunKind` per solution.

``parse_solution`` accepts every upstream language (so any upstream file can be read, listed and diffed);
:func:`run_kind` says how kernelfleet runs it, or raises a SpecError naming ``spec.languages`` /
``spec.entry_point`` / ``spec.binding`` when it cannot.

* ``pytorch``, ``triton`` (and ``cute_dsl`` on a machine with a CUDA GPU where ``nvidia-cutlass-dsl`` is
  installed, ``cutile`` where ``cuda-tile`` is installed and the GPU is a Blackwell or newer): a Python entry,
  imported.
* ``cuda_cpp`` with a C/C++/CUDA entry (binding ``torch`` or null, as upstream): a torch extension built with
  ``torch.utils.cpp_extension`` (slow, cached on disk).
* ``cutlass``: built as ``cuda_cpp`` is, either way, with the CUTLASS headers (``core.build.cutlass``) on the
  include path; refused with one line where none are found.
* ``cuda_cpp`` with a ``.py`` entry: kernelfleet's fast path. The ``.cu`` sources are compiled by nvcc to cubins
  through ``core.build`` (about a second instead of a minute), and the Python entry launches them through cupy
  with ``core.solution.runtime``. Upstream requires a C/C++ entry for cuda_cpp, so such a file is a kernelfleet
  extension of the format (``core.solution.io.upstream_deviations`` lists it).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from enum import Enum
from pathlib import Path

from core.build.cutlass import MISSING as CUTLASS_MISSING
from core.build.cutlass import find_cutlass
from core.build.nvcc import gpu_capability as nvcc_gpu_capability
from core.errors import SpecError
from core.solution.schema import CPP_SUFFIXES, Language, Solution

CUTE_DSL_MISSING = "CuTe DSL (nvidia-cutlass-dsl) is not installed in this environment"
CUTE_DSL_NO_GPU = "CuTe DSL needs a CUDA GPU; this machine has none"
CUTILE_MIN_CAPABILITY = (10, 0)  # cuTile compiles for Blackwell (sm_100) and newer only
CUTILE_NO_GPU = "cuTile needs a CUDA GPU of compute capability 10.0 or newer (Blackwell); this machine has none"
CUTILE_MISSING = "cuTile (cuda-tile) is not installed in this environment"

# Languages kernelfleet runs; every other upstream language gets a "not supported yet" error.
_RUNNABLE = {Language.PYTORCH, Language.TRITON, Language.CUTE_DSL, Language.CUTILE, Language.CUDA_CPP,
             Language.CUTLASS}


class RunKind(str, Enum):
    PYTHON = "python"  # pytorch / triton / cute_dsl / cutile: import the entry
    CUDA_FAST = "cuda_fast"  # cuda_cpp + .py entry: nvcc -> cubins, launched through cupy
    TORCH_EXT = "torch_ext"  # cuda_cpp + C++ entry: torch.utils.cpp_extension module


def cute_dsl_available() -> bool:
    return importlib.util.find_spec("cutlass") is not None


def cuda_gpu_present() -> bool:
    """Whether this machine shows a CUDA GPU (the NVIDIA driver's device list; no CUDA library is loaded)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return False
    gpus = Path("/proc/driver/nvidia/gpus")
    try:
        if gpus.is_dir() and any(gpus.iterdir()):
            return True
    except OSError:
        pass
    return Path("/dev/nvidia0").exists()


def cute_dsl_refusal() -> str | None:
    """Why CuTe DSL cannot run here (the device first: installing the package would not help), or None."""
    if not cuda_gpu_present():
        return CUTE_DSL_NO_GPU + ("" if cute_dsl_available() else " (and nvidia-cutlass-dsl is not installed)")
    return None if cute_dsl_available() else CUTE_DSL_MISSING


def cutile_available() -> bool:
    try:
        return importlib.util.find_spec("cuda.tile") is not None
    except ModuleNotFoundError:  # no ``cuda`` package at all
        return False


@functools.lru_cache(maxsize=1)
def gpu_capability() -> tuple[int, int] | None:
    """The first visible GPU's compute capability (no CUDA library loaded here), or None when it cannot be read."""
    try:
        major, minor = (nvcc_gpu_capability() or "").split(".")
        return int(major), int(minor)
    except ValueError:
        return None


def cutile_refusal() -> str | None:
    """Why cuTile cannot run here (the device first: installing the package would not help), or None. A GPU whose
    capability cannot be read is given the benefit of the doubt."""
    if not cuda_gpu_present():
        return CUTILE_NO_GPU
    capability = gpu_capability()
    if capability is not None and capability < CUTILE_MIN_CAPABILITY:
        return (f"cuTile needs a CUDA GPU of compute capability 10.0 or newer (Blackwell); this one's is "
                f"{capability[0]}.{capability[1]}")
    return None if cutile_available() else CUTILE_MISSING


def run_kind(solution: Solution, file: str | Path | None = None, *, check_environment: bool = True) -> RunKind:
    """How kernelfleet runs ``solution``; a SpecError when it cannot (unsupported language, missing CuTe DSL...)."""
    spec = solution.spec
    for i, lang in enumerate(spec.languages):
        if lang not in _RUNNABLE:
            raise SpecError(file, f"spec.languages[{i}]", f"language '{lang.value}' is not supported by kernelfleet yet"
                            f" (supported: {', '.join(sorted(x.value for x in _RUNNABLE))})")
    if spec.is_python:
        if check_environment and Language.CUTE_DSL in spec.languages:
            refusal = cute_dsl_refusal()
            if refusal is not None:
                raise SpecError(file, f"spec.languages[{spec.languages.index(Language.CUTE_DSL)}]", refusal)
        if check_environment and Language.CUTILE in spec.languages:
            refusal = cutile_refusal()
            if refusal is not None:
                raise SpecError(file, f"spec.languages[{spec.languages.index(Language.CUTILE)}]", refusal)
        return RunKind.PYTHON
    # cuda_cpp and cutlass are left: built alike, CUTLASS's headers on the include path where a source includes them.
    if check_environment and Language.CUTLASS in spec.languages and find_cutlass() is None:
        raise SpecError(file, f"spec.languages[{spec.languages.index(Language.CUTLASS)}]", CUTLASS_MISSING)
    if solution.entry_file.endswith(CPP_SUFFIXES):
        return RunKind.TORCH_EXT
    if spec.binding is not None:
        raise SpecError(
            file, "spec.binding",
            f"binding '{spec.binding}' needs a C/C++ entry; the .py-entry fast path takes \"binding\": null",
        )
    if not solution.sources_with_suffix(".cu"):
        raise SpecError(file, "sources", "the cuda_cpp fast path (.py entry) needs at least one .cu source")
    return RunKind.CUDA_FAST


def check_supported(solution: Solution, file: str | Path | None = None) -> None:
    """Raise a SpecError when kernelfleet cannot run ``solution`` here (cheap: no build, no import)."""
    run_kind(solution, file)
