"""The machine's state beside each T_b (core.evaluate.baseline.machine): a probe at this start and at measurement,
recorded with the cached T_b; a cached T_b whose probe moved beyond the margin is measured again; a T_b that stands
in another state than the start's is flagged in the problem's workloads."""

from __future__ import annotations

import json

import anyio
import pytest
from evaluate_support import QUICK

from core.evaluate import EvaluationPool
from core.evaluate.baseline import BaselineCache
from core.evaluate.baseline.machine import PROBE_MARGIN, MachineState, moved
from core.evaluate.baseline.record import WorkloadBaseline
from core.fleet.baselines import _info, machine_outcome

pytestmark = pytest.mark.slow


def _baseline(problem) -> WorkloadBaseline:
    async def scenario():
        async with EvaluationPool("cpu", spare=False, workload_timeout_s=60) as pool:
            return (await pool.baseline(problem, [0], timing=QUICK, compile_timeout_s=0.0))[0]

    return anyio.run(scenario)


def _cached_entry(cache_root) -> tuple:
    [path] = (cache_root / "baseline").glob("*.json")
    return path, json.loads(path.read_text())


def test_a_cached_t_b_is_measured_again_when_the_machine_probe_moved(tmp_path, monkeypatch, rmsnorm_problem):
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache"))
    first = _baseline(rmsnorm_problem)
    assert first.ok and not first.cached, first.error
    then, now = MachineState.from_dict(first.machine), MachineState.from_dict(first.machine_now)
    assert then is not None and now is not None and then.probe_ms > 0 and now.probe_ms > 0
    assert then.cores >= 1 and now.taken_at <= then.taken_at  # the start's probe comes before the measurement
    path, data = _cached_entry(tmp_path / "cache")
    entry = data["workloads"]["0"]
    assert entry["machine"]["probe_ms"] == then.probe_ms and entry["machine_now"] is None
    assert entry["machine_start"] == first.machine_now  # the state of the start that measured it

    # A figure cached before states were recorded has nothing to compare: it stands.
    del entry["machine"], entry["machine_start"]
    path.write_text(json.dumps(data))
    again = _baseline(rmsnorm_problem)
    assert again.cached and again.remeasured == "" and again.baseline_ms == first.baseline_ms

    # As if cached by a start on a machine a thousand times faster than it is now: measured again, the new state kept.
    entry["machine"] = first.machine
    entry["machine_start"] = {**first.machine_now, "probe_ms": now.probe_ms / 1000}
    path.write_text(json.dumps(data))
    moved_again = _baseline(rmsnorm_problem)
    assert not moved_again.cached and moved_again.ok
    assert moved_again.remeasured.startswith("the machine's probe moved"), moved_again.remeasured
    assert "(+" in moved_again.remeasured  # slower now than when cached
    _, data = _cached_entry(tmp_path / "cache")
    assert data["workloads"]["0"]["machine_start"]["probe_ms"] > now.probe_ms / 100


def _state(probe_ms: float, load: float = 0.5) -> dict:
    return MachineState(probe_ms, load, 2, 1.0, "cuda").to_dict()


def test_moved_beyond_the_device_kinds_margin_only():
    margin = PROBE_MARGIN["cuda"]
    gpu = MachineState(1.0, 0.2, 2, 0.0, "cuda")
    assert moved(gpu, MachineState(1.0 + margin * 0.9, 3.0, 2, 0.0, "cuda")) == ""
    assert moved(gpu, MachineState(1.0 - margin * 0.9, 0.0, 2, 0.0, "cuda")) == ""
    assert moved(gpu, MachineState(2.0, 4.0, 2, 0.0, "cuda")) == \
        "the machine's probe moved 1 → 2 ms (+100%; load 0.2 → 4.0)"
    assert moved(gpu, MachineState(0.5, 0.1, 2, 0.0, "cuda")).startswith("the machine's probe moved 1 → 0.5 ms (-50%")
    cpu = MachineState(1.0, 0.2, 2, 0.0, "cpu")  # a CPU's probe is noisier: a wider margin
    assert PROBE_MARGIN["cpu"] > margin
    assert moved(cpu, MachineState(1.0 + PROBE_MARGIN["cpu"] * 0.9, 3.0, 2, 0.0, "cpu")) == ""
    assert moved(cpu, MachineState(7.0, 6.0, 2, 0.0, "cpu")).startswith("the machine's probe moved 1 → 7 ms (+600%")
    assert "cpu device" in moved(cpu, gpu)
    assert moved(None, gpu) == "" and moved(gpu, None) == ""


def test_a_t_b_taken_in_another_state_is_flagged_in_the_problem_workloads(rmsnorm_problem):
    class Sol:
        t_sol_ms = {0: 0.001}
        bound = {0: "memory"}

    same = WorkloadBaseline(0, baseline_ms=0.5, machine=_state(1.0), machine_now=_state(1.1))
    apart = WorkloadBaseline(0, baseline_ms=0.5, machine=_state(1.0, 0.1), machine_now=_state(3.0, 6.0),
                             remeasured="")
    assert _info(rmsnorm_problem, same, Sol).state_moved == ""
    info = _info(rmsnorm_problem, apart, Sol)
    assert info.probe_ms == 1.0 and info.run_probe_ms == 3.0 and info.run_load_1m == 6.0
    assert info.state_moved == "the machine's probe moved 1 → 3 ms (+200%; load 0.1 → 6.0)"
    assert "T_b of workload 0 taken in another machine state" in machine_outcome([same, apart])
    assert machine_outcome([same]) == ""
