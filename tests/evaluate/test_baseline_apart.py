"""T_b measured beside candidates: the untimed half (inputs, the reference's first run, torch.compile) runs in the
slot's baseline process without holding the device, so a candidate submitted meanwhile is evaluated at once."""

from __future__ import annotations

import json
import time

import anyio
from evaluate_support import HONEST_RETURNING, QUICK, python_solution

from core.evaluate import EvaluationPool
from core.evaluate.evaluate import evaluate_solution
from core.problem import load_problem

SLOW_FIRST_CALL = '''import time
import torch

_calls = 0

@torch.no_grad()
def run(x):
    global _calls
    _calls += 1
    if _calls == 1:
        time.sleep(4.0)  # stands in for a long torch.compile: it happens once, before any timing
    return x * 2
'''


def slow_problem(root):
    folder = root / "misc" / "slow_first_call"
    folder.mkdir(parents=True)
    (folder / "definition.json").write_text(json.dumps({
        "name": "slow_first_call", "description": "x * 2, whose first call takes 4 s.",
        "axes": {"n": {"type": "var"}}, "custom_inputs_entrypoint": None,
        "inputs": {"x": {"shape": ["n"], "dtype": "float32"}},
        "outputs": {"y": {"shape": ["n"], "dtype": "float32"}},
        "reference": SLOW_FIRST_CALL,
    }))
    (folder / "workload.jsonl").write_text(json.dumps(
        {"uuid": "s0", "axes": {"n": 64}, "inputs": {"x": {"type": "random"}},
         "tolerance": {"max_atol": 1e-6, "max_rtol": 1e-6}}) + "\n")
    return load_problem(folder)


def test_a_candidate_is_evaluated_while_a_baseline_prepares(tmp_path, monkeypatch, rmsnorm_problem):
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache"))
    slow = slow_problem(tmp_path)
    finished: dict[str, float] = {}

    async def scenario():
        async with EvaluationPool("cpu", spare=False, workload_timeout_s=60) as pool:
            await pool.wait_ready()

            async def baseline():
                result = await pool.baseline(slow, [0], timing=QUICK, compile_timeout_s=0)
                finished["baseline"] = time.monotonic()
                assert result[0].ok, result[0].error

            async def candidate():
                await anyio.sleep(0.5)  # the baseline asked first
                verdict = await evaluate_solution(pool, rmsnorm_problem, python_solution(HONEST_RETURNING, dps=False),
                                                  workloads=(0,), rounds=1, timing=QUICK)
                finished["candidate"] = time.monotonic()
                assert verdict.status.value == "PASSED", verdict.reason

            async with anyio.create_task_group() as tg:
                tg.start_soon(baseline)
                tg.start_soon(candidate)
            # The baseline's timing held the device like a candidate's: it counts as busy time.
            assert pool.usage.busy_fraction() is not None

    anyio.run(scenario)
    assert finished["candidate"] < finished["baseline"] - 1.0
