"""What this machine offers the kernel languages, and the refusals of those that need more than it has.

Nothing here imports a kernel library or loads CUDA: packages are found (``importlib.util.find_spec``), the GPU is
seen in the NVIDIA driver's device list and its capability asked of nvidia-smi.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

CUTE_DSL_MISSING = "CuTe DSL (nvidia-cutlass-dsl) is not installed in this environment"
CUTE_DSL_NO_GPU = "CuTe DSL needs a CUDA GPU; this machine has none"
CUTILE_MIN_CAPABILITY = (10, 0)  # cuTile compiles for Blackwell (sm_100) and newer only
CUTILE_NO_GPU = "cuTile needs a CUDA GPU of compute capability 10.0 or newer (Blackwell); this machine has none"
CUTILE_MISSING = "cuTile (cuda-tile) is not installed in this environment"


def module_available(name: str) -> bool:
    """Whether the module ``name`` (dotted names too) could be imported; it is not imported."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


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


@functools.lru_cache(maxsize=1)
def gpu_capability() -> tuple[int, int] | None:
    """The first visible GPU's compute capability, or None when it cannot be read."""
    from core.build.nvcc import gpu_capability as smi_capability

    try:
        major, minor = (smi_capability() or "").split(".")
        return int(major), int(minor)
    except ValueError:
        return None


def cute_dsl_available() -> bool:
    return module_available("cutlass")


def cutile_available() -> bool:
    return module_available("cuda.tile")


def cute_dsl_refusal() -> str | None:
    """Why CuTe DSL cannot run here (the device first: installing the package would not help), or None."""
    if not cuda_gpu_present():
        return CUTE_DSL_NO_GPU + ("" if cute_dsl_available() else " (and nvidia-cutlass-dsl is not installed)")
    return None if cute_dsl_available() else CUTE_DSL_MISSING


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


def cutlass_refusal() -> str | None:
    """Why CUTLASS C++ cannot be built here (its headers are nowhere to be found), or None."""
    from core.build.cutlass import MISSING, find_cutlass

    return MISSING if find_cutlass() is None else None
