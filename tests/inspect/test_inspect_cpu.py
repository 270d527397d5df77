"""The instruments' process on the CPU device: a hanging candidate is stopped at the tool's timeout with its whole
process group, a raising one is reported in one line, and the pool's device is free again afterwards."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio
import pytest

from core.evaluate.pool import EvaluationPool
from core.inspect.service import Inspector
from core.problem import load_problems
from core.solution.io import parse_solution
from core.solution.prepare import prepare

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "llm"))
from llm_fleet_helpers import GOOD_MAIN, write_problem  # noqa: E402

pytestmark = pytest.mark.slow

HANGING = '''import time


def run(x, w, out):
    while True:
        time.sleep(1)
'''
RAISING = '''def run(x, w, out):
    raise ValueError("no kernel for this shape")
'''


def _solution(problem, main: str):
    return parse_solution({"name": "c", "definition": problem.name, "author": "t",
                           "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"],
                                    "entry_point": "main.py::run", "destination_passing_style": True},
                           "sources": [{"path": "main.py", "content": main}]})


def test_hanging_and_raising_candidates_under_the_profiler(tmp_path):
    write_problem(tmp_path / "problems")
    problem = load_problems([str(tmp_path / "problems")]).problems[0]

    async def main():
        async with EvaluationPool("cpu", spare=False, readable=[str(tmp_path)]) as pool:
            # 8 s stops the hanging one; the others have the time a loaded machine may take to import torch.
            results = {}
            for name, source, limit in (("hanging", HANGING, 8), ("raising", RAISING, 60), ("good", GOOD_MAIN, 60)):
                prepared = await prepare(_solution(problem, source))
                started = time.monotonic()
                inspector = Inspector(pool.run_confined, device="cpu", timeout_s=limit)
                results[name] = (await inspector.profile(problem, prepared, 0), time.monotonic() - started)
            return results, pool.usage

    results, usage = anyio.run(main)
    hanging, seconds = results["hanging"]
    assert "the torch profiler did not finish within 8 s; stopped" in hanging.text and seconds < 20
    raising, _ = results["raising"]
    assert "the candidate failed: ValueError: no kernel for this shape (main.py:2)" in raising.text
    good, _ = results["good"]
    assert "aten::mul" in good.text  # the device was given back after the hang
    assert usage.busy_s >= 8


@pytest.mark.skipif(not __import__("core.evaluate.sandbox", fromlist=["x"]).confinement().confined,
                    reason="this machine allows no confinement")
def test_a_hostile_candidate_under_an_instrument_finds_no_secret_and_writes_nothing_outside(tmp_path, monkeypatch):
    from hostile_candidate import findings, hostile_report, hostile_source

    canary = "sk-canary-instrument-0123456789"
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text(f"export KF_INSTRUMENT_WORD={canary}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KF_INSTRUMENT_WORD", canary)
    from core.secrets import take_secrets

    take_secrets(["KF_INSTRUMENT_WORD"])  # as Fleet.open does with the run's key
    outside = tmp_path / "outside"
    outside.mkdir()
    write_problem(tmp_path / "problems")
    problem = load_problems([str(tmp_path / "problems")]).problems[0]
    source = hostile_source(canary, str(home), [str(outside / "escaped"), str(home / "escaped")], "x, w, out")

    async def main():
        async with EvaluationPool("cpu", spare=False, readable=[str(tmp_path / "problems")]) as pool:
            prepared = await prepare(_solution(problem, source))
            return await Inspector(pool.run_confined, device="cpu", timeout_s=60).profile(problem, prepared, 0)

    result = anyio.run(main)
    report = hostile_report(result.text)
    assert report["nfound"] == 0 and report["written"] == [] and report["home"] == [], findings(report)
    assert report["n"] <= 4  # its own PID namespace: the launcher's init, the instrument, itself
    assert not (outside / "escaped").exists() and not (home / "escaped").exists()
