"""Which solutions kernelfleet can run, and how: one :class:`RunKind` per solution.

``parse_solution`` accepts every upstream language (so any upstream file can be read, listed and diffed);
:func:`run_kind` says how kernelfleet runs it, or raises a SpecError naming ``spec.languages`` /
``spec.entry_point`` / ``spec.binding`` when it cannot.

What each language is (its toolchain, what it needs on the machine and the refusal when that is missing) is the
registry's (``core.languages``); this module turns it into a run kind.

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

from enum import Enum
from pathlib import Path

from core.errors import SpecError
from core.languages import language, names
from core.languages.machine import (  # noqa: F401  (re-exported: where callers have always found them)
    CUTE_DSL_MISSING,
    CUTE_DSL_NO_GPU,
    CUTILE_MIN_CAPABILITY,
    CUTILE_MISSING,
    CUTILE_NO_GPU,
    cuda_gpu_present,
    cute_dsl_available,
    cute_dsl_refusal,
    cutile_available,
    cutile_refusal,
    gpu_capability,
)
from core.solution.schema import CPP_SUFFIXES, Solution


class RunKind(str, Enum):
    PYTHON = "python"  # a Python-toolchain language (pytorch, triton, cute_dsl, cutile...): import the entry
    CUDA_FAST = "cuda_fast"  # an nvcc language + .py entry: nvcc -> cubins, launched through cupy
    TORCH_EXT = "torch_ext"  # an nvcc language + C++ entry: torch.utils.cpp_extension module


def run_kind(solution: Solution, file: str | Path | None = None, *, check_environment: bool = True) -> RunKind:
    """How kernelfleet runs ``solution``; a SpecError when it cannot (unsupported language, missing CuTe DSL...)."""
    spec = solution.spec
    entries = [language(lang.value) for lang in spec.languages]
    for i, entry in enumerate(entries):
        if not entry.runs:
            raise SpecError(file, f"spec.languages[{i}]", f"language '{entry.name}' is not supported by kernelfleet yet"
                            f" (supported: {', '.join(sorted(names(runs=True)))})")
    if check_environment:
        for i, entry in enumerate(entries):
            refusal = entry.refusal_here()
            if refusal is not None:
                raise SpecError(file, f"spec.languages[{i}]", refusal)
    if spec.is_python:
        return RunKind.PYTHON
    # The nvcc languages (cuda_cpp, cutlass...) are built alike, CUTLASS's headers on the include path where a source
    # includes them.
    if solution.entry_file.endswith(CPP_SUFFIXES):
        return RunKind.TORCH_EXT
    if spec.binding is not None:
        raise SpecError(
            file, "spec.binding",
            f"binding '{spec.binding}' needs a C/C++ entry; the .py-entry fast path takes \"binding\": null",
        )
    if not solution.sources_with_suffix(".cu"):
        raise SpecError(file, "sources", f"the {entries[0].name} fast path (.py entry) needs at least one .cu source")
    return RunKind.CUDA_FAST


def check_supported(solution: Solution, file: str | Path | None = None) -> None:
    """Raise a SpecError when kernelfleet cannot run ``solution`` here (cheap: no build, no import)."""
    run_kind(solution, file)
