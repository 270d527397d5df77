"""Finding nvcc, choosing the target architecture and spelling the compile command."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

ARCH_ENV = "KERNELFLEET_CUDA_ARCH"
# Our H200; used when there is neither a GPU to ask nor an override.
DEFAULT_ARCH = "sm_90a"
BASE_FLAGS = ("-cubin", "-O3", "--use_fast_math", "-std=c++17", "-lineinfo", "-Xptxas", "-v")

_ARCH = re.compile(r"sm_(?P<number>\d+[af]?)")
_CAPABILITY = re.compile(r"(?P<major>\d+)\.(?P<minor>\d+)")
_DEFINE_NAME = re.compile(r"[A-Za-z_]\w*")
# wgmma, setmaxnreg and tcgen05 exist only on the architecture-specific targets of these capabilities.
_ARCH_SPECIFIC = {"9.0": "sm_90a", "10.0": "sm_100a"}


def find_nvcc() -> Path | None:
    """``$CUDA_HOME/bin/nvcc`` when CUDA_HOME names a toolkit that has one, else nvcc on PATH."""
    cuda_home = os.environ.get("CUDA_HOME")
    if cuda_home:
        candidate = Path(cuda_home) / "bin" / "nvcc"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    on_path = shutil.which("nvcc")
    return Path(on_path) if on_path else None


@functools.cache
def nvcc_version(nvcc: Path) -> str:
    """The release and build lines of ``nvcc --version``, e.g. ``...release 13.0, V13.0.88; Build cuda_13.0...``."""
    completed = subprocess.run(
        [str(nvcc), "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    lines = [line.strip() for line in completed.stdout.splitlines() if line.strip()]
    return "; ".join(lines[-2:])


def detect_arch(arch: str | None = None) -> str:
    """The target: ``arch`` if given, else ``$KERNELFLEET_CUDA_ARCH``, else the GPU in use, else ``sm_90a``."""
    chosen = arch or os.environ.get(ARCH_ENV) or gpu_arch() or DEFAULT_ARCH
    if not _ARCH.fullmatch(chosen):
        raise ValueError(f"unsupported CUDA arch {chosen!r}: expected sm_<number>[a|f], e.g. sm_90a")
    return chosen


def arch_for_capability(capability: str) -> str | None:
    """``"9.0"`` -> ``"sm_90a"``, ``"8.6"`` -> ``"sm_86"``; None for anything that is not ``MAJOR.MINOR``."""
    capability = capability.strip()
    match = _CAPABILITY.fullmatch(capability)
    if match is None:
        return None
    return _ARCH_SPECIFIC.get(capability, f"sm_{match['major']}{match['minor']}")


def gpu_capability() -> str | None:
    """The first visible GPU's compute capability (``"9.0"``) as nvidia-smi gives it; None without a GPU."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    command = [smi, "--query-gpu=compute_cap", "--format=csv,noheader"]
    first_visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if first_visible.isdigit():
        command.append(f"--id={first_visible}")
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = completed.stdout.split()
    if completed.returncode != 0 or not lines:
        return None
    return lines[0]


@functools.cache
def gpu_arch() -> str | None:
    """The target for the first visible GPU, asked of nvidia-smi once per process; None without a GPU."""
    capability = gpu_capability()
    return None if capability is None else arch_for_capability(capability)


def gencode_flags(arch: str) -> tuple[str, ...]:
    """``sm_90a`` -> ``("-gencode=arch=compute_90a,code=sm_90a",)``."""
    match = _ARCH.fullmatch(arch)
    if match is None:
        raise ValueError(f"unsupported CUDA arch {arch!r}: expected sm_<number>[a|f], e.g. sm_90a")
    return (f"-gencode=arch=compute_{match['number']},code={arch}",)


def define_flags(defines: Mapping[str, str | int | float]) -> tuple[str, ...]:
    """``{"BLOCK": 128}`` -> ``("-DBLOCK=128",)``, sorted by name so equal mappings give equal commands."""
    flags = []
    for name in sorted(defines):
        if not _DEFINE_NAME.fullmatch(name):
            raise ValueError(f"define name {name!r} is not a C identifier")
        value = defines[name]
        # C has no True/False; str(True) would define the macro as an undeclared identifier.
        rendered = str(int(value)) if isinstance(value, bool) else str(value)
        flags.append(f"-D{name}={rendered}")
    return tuple(flags)


def compile_flags(
    arch: str, defines: Mapping[str, str | int | float], extra_flags: Sequence[str]
) -> tuple[str, ...]:
    """Every flag of the command except the paths: what, together with the sources, decides the output."""
    return (*BASE_FLAGS, *gencode_flags(arch), *define_flags(defines), *extra_flags)


def nvcc_command(
    nvcc: Path, flags: Sequence[str], *, include_dir: Path, output: Path, source: str
) -> list[str]:
    # The candidate's folder first, as upstream's build lists it ahead of CUTLASS's include folders.
    return [str(nvcc), f"-I{include_dir}", *flags, "-o", str(output), source]
