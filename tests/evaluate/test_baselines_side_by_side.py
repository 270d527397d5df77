"""Problems' T_b measured side by side on one device (core.evaluate.pool: several baseline processes per device):
their torch.compile runs at the same time in separate processes, which is what lets a run prepare the next
problems while the device times others."""

from __future__ import annotations

import json

import anyio
import pytest
from evaluate_support import QUICK

from core.evaluate import EvaluationPool
from core.evaluate import baseline as tb
from core.evaluate.pool import MAX_BASELINERS, baseliners_for
from core.problem import load_problem

# The compile's first call logs when it ran and in which process, and takes 2 s (the stand-in for a long compile).
SLOW_COMPILE = '''import os
import threading
import time
import torch

_slept = False

@torch.no_grad()
def run(x):
    global _slept
    if threading.current_thread().name == COMPILE_THREAD and not _slept:
        _slept = True
        began = time.time()
        time.sleep(2.0)
        with open(LOG, "a") as log:
            log.write(f"{os.getpid()} {began} {time.time()}\\n")
    return x * 2
'''


def slow_problem(root, name: str, log):
    folder = root / "misc" / name
    folder.mkdir(parents=True)
    reference = f"LOG = {str(log)!r}\nCOMPILE_THREAD = {tb.COMPILE_THREAD_NAME!r}\n" + SLOW_COMPILE
    (folder / "definition.json").write_text(json.dumps({
        "name": name, "description": "x * 2, its compile slow", "axes": {"n": {"type": "var"}},
        "inputs": {"x": {"shape": ["n"], "dtype": "float32"}}, "outputs": {"y": {"shape": ["n"], "dtype": "float32"}},
        "reference": reference}))
    (folder / "workload.jsonl").write_text(json.dumps(
        {"uuid": f"{name}0", "axes": {"n": 64}, "inputs": {"x": {"type": "random"}},
         "tolerance": {"max_atol": 1e-6, "max_rtol": 1e-6}}) + "\n")
    return load_problem(folder)


@pytest.mark.slow
def test_two_problems_compile_side_by_side_on_one_device(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCH_COMPILE_DISABLE", "1")  # compile calls run eagerly: the 2 s sleep is the whole compile
    log = tmp_path / "compiles.log"
    problems = [slow_problem(tmp_path, name, log) for name in ("first", "second")]

    async def scenario():
        # No machine check: a load that moves the probe would measure a T_b once more, a third compile.
        async with EvaluationPool("cpu", spare=False, workload_timeout_s=60, baseliners_per_device=2,
                                  machine_check=False) as pool:
            assert pool.baselines_at_once == 2
            # Both baseline processes started, as after a run's first problems: the first T_b's machine probe
            # starts one of them early, and a cold start of the other (seconds) would otherwise decide the overlap.
            for slot in pool._slots:
                for baseliner in slot.baseliners:
                    await baseliner.worker().wait_ready()
            results = {}

            async def measure(problem):
                results[problem.name] = await pool.baseline(problem, [0], timing=QUICK, compile_timeout_s=60)

            async with anyio.create_task_group() as tg:
                for problem in problems:
                    tg.start_soon(measure, problem)
            return results

    results = anyio.run(scenario)
    assert all(r[0].ok for r in results.values()), results
    spans = [line.split() for line in log.read_text().splitlines()]
    assert len(spans) == 2 and spans[0][0] != spans[1][0]  # two processes
    (_, a0, a1), (_, b0, b1) = [(pid, float(t0), float(t1)) for pid, t0, t1 in spans]
    assert max(a0, b0) < min(a1, b1), spans  # the two compiles overlapped


def test_how_many_baselines_a_device_measures_side_by_side():
    assert baseliners_for("cpu", 1, 64) == 1  # a compile beside a timing would share its cores
    assert baseliners_for("cuda", 1, 14) == MAX_BASELINERS == 4  # the H200 box: 16 cores, 2 kept for timing
    assert baseliners_for("cuda", 8, 112) == 4 and baseliners_for("cuda", 8, 24) == 1
    assert baseliners_for("cuda", 1, 1) == 1
