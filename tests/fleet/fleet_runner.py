"""Starting `kernelfleet run` as a real separate process on the CPU device, and waiting on its store."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from core.store import RunReader

ROOT = Path(__file__).resolve().parents[2]


def start_run(*args: str | Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "cli.main", "run", *map(str, args), "--headless"], cwd=ROOT,
                            env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def read(run_dir: Path, query):
    """Run ``query(reader)`` on a fresh read-only connection (None while the store does not exist yet)."""
    try:
        with RunReader(run_dir) as reader:
            return query(reader)
    except (FileNotFoundError, ValueError):
        return None
