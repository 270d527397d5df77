"""The watcher imports only the store, the reports and the config: never the build or evaluation machinery, the
fleet or torch (it must start fast on any box, GPU or not). Its model modules import no Textual, and core never
imports the UI."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("core.evaluate", "core.build", "core.fleet", "torch")


def test_tui_imports_no_build_or_evaluation_machinery():
    script = (
        "import sys, pkgutil, importlib, tui, tui.app\n"
        "for m in pkgutil.walk_packages(tui.__path__, prefix='tui.'):\n"
        "    importlib.import_module(m.name)\n"
        "import cli.watch_cmd\n"
        f"bad = sorted(m for m in sys.modules if any(m == f or m.startswith(f + '.') for f in {FORBIDDEN!r}))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def _model_modules() -> list[str]:
    """tui's Textual-free modules: the shared ones and every area folder's model.py."""
    shared = ["tui.snapshot", "tui.formatting", "tui.controls"]
    areas = sorted(f"tui.{p.parent.name}.model" for p in (ROOT / "tui").glob("*/model.py"))
    return shared + areas


def test_the_model_modules_import_no_textual():
    modules = _model_modules()
    assert {"tui.problems.model", "tui.detail.model", "tui.diff.model"} <= set(modules)
    script = (
        "import sys, importlib\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(','.join(sorted({m.split('.')[0] for m in sys.modules} & {'textual', 'rich'})))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_core_never_imports_the_ui():
    offenders = []
    for path in sorted((ROOT / "core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n == "tui" or n.startswith("tui.")]
    assert offenders == []
