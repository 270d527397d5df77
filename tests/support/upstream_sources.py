"""NVIDIA's SOL-ExecBench sources, for the tests that check kernelfleet against them: under
$KERNELFLEET_SOL_EXECBENCH, else ../shared/sol-execbench beside the checkout (where CI has them)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOL_EXECBENCH = Path(os.environ.get("KERNELFLEET_SOL_EXECBENCH", ROOT.parent / "shared" / "sol-execbench"))
UPSTREAM_SRC = SOL_EXECBENCH / "upstream" / "src"


def upstream_available() -> bool:
    """Whether upstream's package and pydantic (its models need it) can be imported here."""
    return (UPSTREAM_SRC / "sol_execbench").is_dir() and importlib.util.find_spec("pydantic") is not None


def upstream_module(name: str) -> ModuleType:
    """A module of upstream's package (``sol_execbench.core.data.trace``), or a clean skip where it is absent."""
    if not (UPSTREAM_SRC / "sol_execbench").is_dir():
        pytest.skip(f"upstream SOL-ExecBench sources are not at {UPSTREAM_SRC}")
    pytest.importorskip("pydantic")
    if str(UPSTREAM_SRC) not in sys.path:
        sys.path.insert(0, str(UPSTREAM_SRC))
    return importlib.import_module(name)
