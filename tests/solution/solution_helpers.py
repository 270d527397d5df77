"""Shared helpers of the solution tests (imported by name: this folder is on sys.path under pytest)."""

import shutil
from pathlib import Path

import anyio
import pytest

from core.build.nvcc import find_nvcc
from core.solution.io import parse_solution

EXAMPLES = Path(__file__).parent / "examples"
PYTORCH_EXAMPLE = EXAMPLES / "pytorch_rmsnorm.json"
FAST_EXAMPLE = EXAMPLES / "cuda_fast_rmsnorm.json"

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")


def _cpp_extension_toolchain() -> bool:
    try:
        from torch.utils.cpp_extension import is_ninja_available
    except ImportError:
        return False
    return is_ninja_available() and shutil.which("c++") is not None


needs_cpp_toolchain = pytest.mark.skipif(not _cpp_extension_toolchain(), reason="needs ninja and a C++ compiler")


def run_async(fn, *args, **kwargs):
    async def call():
        return await fn(*args, **kwargs)

    return anyio.run(call)


def base_dict() -> dict:
    """A small valid pytorch solution, as decoded JSON."""
    return {
        "name": "add_one",
        "definition": "add",
        "author": "tests",
        "spec": {
            "languages": ["pytorch"],
            "target_hardware": ["LOCAL"],
            "entry_point": "main.py::run",
        },
        "sources": [
            {"path": "main.py", "content": "def run(x):\n    return x + 1\n"},
            {"path": "helpers.py", "content": "ONE = 1\n"},
        ],
    }


def make_solution(sources: dict, *, languages=("pytorch",), entry="main.py::run", binding=None,
                  compile_options=None, name="candidate", dps=True):
    data = {
        "name": name,
        "definition": "test",
        "author": "tests",
        "spec": {
            "languages": list(languages),
            "target_hardware": ["LOCAL"],
            "entry_point": entry,
            "destination_passing_style": dps,
            "binding": binding,
            "compile_options": compile_options,
        },
        "sources": [{"path": p, "content": c} for p, c in sources.items()],
    }
    return parse_solution(data, "test.json")
