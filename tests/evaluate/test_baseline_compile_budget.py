"""torch.compile's time is bounded per problem, not only per workload: once a problem's compiles have taken
``compile_timeout_s`` in all, its later workloads are timed eager only, and their reason says why."""

from __future__ import annotations

import json

import anyio
from evaluate_support import QUICK

from core.evaluate import EvaluationPool
from core.evaluate import baseline as tb
from core.problem import load_problem

# Each workload's compile sleeps 1.5 s at least (torch.compile is disabled, so the sleep is the whole compile).
SLOW_COMPILE = f'''import threading
import time
import torch

@torch.no_grad()
def run(x):
    if threading.current_thread().name == {tb.COMPILE_THREAD_NAME!r}:
        time.sleep(1.5)
    return x * 2
'''


def five_workload_problem(root):
    folder = root / "misc" / "slow_compile"
    folder.mkdir(parents=True)
    (folder / "definition.json").write_text(json.dumps({
        "name": "slow_compile", "description": "x * 2, slow to compile.",
        "axes": {"n": {"type": "var"}}, "custom_inputs_entrypoint": None,
        "inputs": {"x": {"shape": ["n"], "dtype": "float32"}},
        "outputs": {"y": {"shape": ["n"], "dtype": "float32"}},
        "reference": SLOW_COMPILE,
    }))
    (folder / "workload.jsonl").write_text("".join(json.dumps(
        {"uuid": f"w{i}", "axes": {"n": 64 << i}, "inputs": {"x": {"type": "random"}},
         "tolerance": {"max_atol": 1e-6, "max_rtol": 1e-6}}) + "\n" for i in range(5)))
    return load_problem(folder)


def test_later_workloads_are_eager_once_the_problems_compile_budget_is_spent(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCH_COMPILE_DISABLE", "1")
    problem = five_workload_problem(tmp_path)

    async def scenario():
        # No machine check: on a loaded machine the CPU probe moves, and a T_b measured once more would spend the
        # compile budget a second time.
        async with EvaluationPool("cpu", spare=False, workload_timeout_s=60, machine_check=False) as pool:
            await pool.wait_ready()
            return await pool.baseline(problem, timing=QUICK, compile_timeout_s=4.0)

    results = anyio.run(scenario)
    assert all(b.ok and b.baseline_ms for b in results)
    # Compiled while the budget lasts (at least 1.5 s each), then at most one compile given the remainder and
    # abandoned, then eager only, saying why.
    compiled = [b for b in results if b.compiled_ms is not None]
    assert compiled == results[:len(compiled)] and 1 <= len(compiled) <= 2, results
    assert all(b.compile_reason == "" and b.compile_seconds >= 1.5 for b in compiled)
    rest = results[len(compiled):]
    if "did not finish within" in rest[0].compile_reason:
        # Abandoned with the budget's last seconds: said so, and not cached as final (a later run tries again).
        assert "of this problem's compile time)" in rest[0].compile_reason and not rest[0].compile_attempted
        rest = rest[1:]
    assert len(rest) >= 2
    for skipped in rest:
        assert skipped.compiled_ms is None and not skipped.compile_attempted, skipped
        assert skipped.compile_reason.startswith("torch.compile skipped: this problem's compiles took"), skipped
        assert skipped.compile_reason.endswith("of the 4 s they may take in all")
