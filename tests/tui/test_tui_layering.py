"""The watcher imports only the store, the reports and the config: never the build or evaluation machinery, the
fleet or torch (it must start fast on any box, GPU or not)."""

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
