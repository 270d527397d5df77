"""The core never imports UI code: importing every core module pulls in neither textual nor rich."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import core

ROOT = Path(__file__).resolve().parents[1]


def _imported(modules: list[str], forbidden: tuple[str, ...]) -> str:
    """The modules in or under the ``forbidden`` packages that importing ``modules`` pulls in, in a fresh
    interpreter; empty when none."""
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"leaked = sorted(m for m in sys.modules if any(m == f or m.startswith(f + '.') for f in {forbidden!r}))\n"
        "print(','.join(leaked))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_core_imports_no_ui_libraries():
    modules = sorted(m.name for m in pkgutil.walk_packages(core.__path__, prefix="core."))
    assert "core.problem.load" in modules and "core.build.service" in modules
    assert _imported(modules, ("textual", "rich")) == ""


def test_the_evaluator_side_never_imports_the_run():
    """Data flows one way: the evaluation machinery (and the cluster backend behind the same seam) knows nothing of
    the fleet, the planner, the agents or the store that use it."""
    packages = ("core.evaluate", "core.build", "core.solution", "core.problem", "core.roofline")
    modules = sorted(m.name for m in pkgutil.walk_packages(core.__path__, prefix="core.")
                     if m.name.startswith(packages))
    assert "core.evaluate.evaluator" in modules and "core.evaluate.local" in modules
    up = ("core.fleet", "core.planner", "core.llm", "core.store", "core.cluster", "core.report", "cli", "tui")
    assert _imported(modules, up) == ""


def test_processes_that_start_workers_do_so_before_importing_torch():
    """`kernelfleet eval` and `run` start their evaluation workers (which import torch themselves) before they
    need torch: importing torch first (seconds) would hold up the workers' own start."""
    starters = ["cli.eval_cmd", "cli.run_cmd", "core.evaluate.local", "core.evaluate.pool", "core.fleet.orchestrator",
                "core.evaluate.timing_policy"]
    assert _imported(starters, ("torch",)) == ""
