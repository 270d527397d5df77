"""A killed owner (kill -9 of the orchestrator or of ``kernelfleet eval``) leaves no worker process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

OWNER = """
import anyio, os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "evaluate"))
from evaluate_support import python_solution
from core.evaluate.evaluate import evaluate_solution
from core.evaluate.pool import EvaluationPool
from core.problem import load_problem

HANG = "def run(x, weight, eps, out):\\n    while True:\\n        pass\\n"

async def main():
    pool = EvaluationPool("cpu", spare=True, workload_timeout_s=600)
    await pool.wait_ready(include_spares=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(evaluate_solution, pool, load_problem(sys.argv[1]), python_solution(HANG))
        await anyio.sleep(3)  # the candidate is spinning, deaf to its socket
        print(os.getpid(), flush=True)
        await anyio.sleep(600)

anyio.run(main)
"""


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, stack = set(), [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.add(child)
            stack.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_busy_workers_die_within_two_seconds_of_a_kill_9_of_their_owner(rmsnorm_problem):
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(rmsnorm_problem.path)], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        pid = int(owner.stdout.readline())
        workers = _descendants(pid)
        assert len(workers) >= 3, workers  # judge, candidate, spare (and what they started)
        os.kill(pid, signal.SIGKILL)
        owner.wait(timeout=10)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.05)
        assert not [w for w in workers if _alive(w)], "workers outlived their owner"
    finally:
        if owner.poll() is None:
            owner.kill()
