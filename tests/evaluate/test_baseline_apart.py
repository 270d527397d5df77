"""T_b measured beside candidates. torch.compile (seconds to minutes of CPU) runs in the slot's baseline process
without holding the device, so a candidate submitted meanwhile is evaluated at once; making the inputs and the
timing are GPU work, and hold the device like a candidate's job."""

from __future__ import annotations

import json
import time

import anyio
from evaluate_support import HONEST_RETURNING, QUICK, python_solution

from core.evaluate import EvaluationPool
from core.evaluate import baseline as tb
from core.evaluate.evaluate import evaluate_solution
from core.problem import load_problem

SLOW_COMPILE = '''import pathlib
import threading
import time
import torch

_slept = False

@torch.no_grad()
def run(x):
    global _slept
    if threading.current_thread().name == COMPILE_THREAD and not _slept:
        _slept = True
        pathlib.Path(MARKER).touch()
        time.sleep(4.0)  # stands in for a long torch.compile: only the compile's first calls run in this thread
    return x * 2
'''

SLOW_FIRST_CALL = '''import pathlib
import time
import torch

_calls = 0

@torch.no_grad()
def run(x):
    global _calls
    _calls += 1
    if _calls == 1:
        pathlib.Path(MARKER).touch()
        time.sleep(4.0)  # the first run of the reference, on the first input set, while the inputs are made
    return x * 2
'''


def slow_problem(root, reference: str):
    """The problem, and the file its reference touches when its slow call begins."""
    marker = root / "slow-call-began"
    reference = f"MARKER = {str(marker)!r}\nCOMPILE_THREAD = {tb.COMPILE_THREAD_NAME!r}\n" + reference
    folder = root / "misc" / "slow"
    folder.mkdir(parents=True)
    (folder / "definition.json").write_text(json.dumps({
        "name": "slow", "description": "x * 2, slow once.",
        "axes": {"n": {"type": "var"}}, "custom_inputs_entrypoint": None,
        "inputs": {"x": {"shape": ["n"], "dtype": "float32"}},
        "outputs": {"y": {"shape": ["n"], "dtype": "float32"}},
        "reference": reference,
    }))
    (folder / "workload.jsonl").write_text(json.dumps(
        {"uuid": "s0", "axes": {"n": 64}, "inputs": {"x": {"type": "random"}},
         "tolerance": {"max_atol": 1e-6, "max_rtol": 1e-6}}) + "\n")
    return load_problem(folder), marker


def baseline_beside_a_candidate(slow, marker, rmsnorm_problem, compile_timeout_s: float) -> dict[str, float]:
    """Seconds from the start of the reference's slow call until the baseline and the candidate (submitted then)
    finished."""
    finished: dict[str, float] = {}

    async def scenario():
        async with EvaluationPool("cpu", spare=False, workload_timeout_s=60) as pool:
            await pool.wait_ready()
            began: list[float] = []

            async def baseline():
                result = await pool.baseline(slow, [0], timing=QUICK, compile_timeout_s=compile_timeout_s)
                finished["baseline"] = time.monotonic() - began[0]
                assert result[0].ok, result[0].error

            async def candidate():
                with anyio.fail_after(60):
                    while not marker.exists():
                        await anyio.sleep(0.02)
                began.append(time.monotonic())
                verdict = await evaluate_solution(pool, rmsnorm_problem, python_solution(HONEST_RETURNING, dps=False),
                                                  workloads=(0,), rounds=1, timing=QUICK)
                finished["candidate"] = time.monotonic() - began[0]
                assert verdict.status.value == "PASSED", verdict.reason

            async with anyio.create_task_group() as tg:
                tg.start_soon(baseline)
                tg.start_soon(candidate)
            # The baseline's GPU work held the device like a candidate's: it counts as busy time.
            assert pool.usage.busy_fraction() is not None

    anyio.run(scenario)
    return finished


def test_a_candidate_is_evaluated_while_a_baseline_compiles(tmp_path, monkeypatch, rmsnorm_problem):
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCH_COMPILE_DISABLE", "1")  # compile calls run eagerly: the 4 s sleep is the whole compile
    finished = baseline_beside_a_candidate(*slow_problem(tmp_path, SLOW_COMPILE), rmsnorm_problem, 60.0)
    assert finished["candidate"] < 3.0 < finished["baseline"], finished


def test_a_candidate_waits_while_a_baseline_makes_its_inputs(tmp_path, monkeypatch, rmsnorm_problem):
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache"))
    finished = baseline_beside_a_candidate(*slow_problem(tmp_path, SLOW_FIRST_CALL), rmsnorm_problem, 0.0)
    assert finished["candidate"] > 3.5, finished
