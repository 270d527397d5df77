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
from core.evaluate.baseline import from_reply, request_for
from core.evaluate.baseline.machine import PROBE_MARGIN, MachineState, moved, state_moved
from core.evaluate.baseline.record import WorkloadBaseline
from core.evaluate.worker import Judge
from core.fleet.baselines import _info, machine_outcome

pytestmark = pytest.mark.slow


def _pool_baseline(problem) -> WorkloadBaseline:
    async def scenario():
        async with EvaluationPool("cpu", spare=False, workload_timeout_s=60) as pool:
            return (await pool.baseline(problem, [0], timing=QUICK, compile_timeout_s=0.0))[0]

    return anyio.run(scenario)


def _cached_entry(cache_root) -> tuple:
    [path] = (cache_root / "baseline").glob("*.json")
    return path, json.loads(path.read_text())


def _keep_as_cached(result: WorkloadBaseline, problem) -> None:
    """Cache ``result`` as the judge caches a T_b timed in a steady state, under the key the judge looks up."""
    import torch

    from core.evaluate.baseline.cache import baseline_key, problem_content_hash
    from core.evaluate.baseline.measure import device_name

    name = device_name(torch.device("cpu"))
    meta = {"problem": problem.name, "content_sha256": problem_content_hash(problem.path), "device_name": name,
            "torch_version": torch.__version__}
    BaselineCache().store(baseline_key(problem.path, name, torch.__version__), result, meta)


def _ask(judge: Judge, problem, machine_now: dict | None) -> WorkloadBaseline:
    """One T_b from a real judge in this process, as the pool asks for it with this start's state."""
    request = request_for(problem, 0, timing=QUICK, compile_timeout_s=0.0, machine_now=machine_now)
    return from_reply(problem, 0, judge.handle(request))


def test_the_pool_probes_the_start_before_its_first_t_b_and_keeps_both_states(tmp_path, monkeypatch,
                                                                             rmsnorm_problem):
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache"))
    first = _pool_baseline(rmsnorm_problem)
    assert first.ok and not first.cached, first.error
    then, now = MachineState.from_dict(first.machine), MachineState.from_dict(first.machine_now)
    assert then is not None and now is not None and then.probe_ms > 0 and now.probe_ms > 0
    assert then.device == now.device == "cpu" and then.cores >= 1
    assert now.taken_at <= then.taken_at  # the start's probe comes before the measurement
    assert first.machine_start == first.machine_now


def test_a_cached_t_b_is_measured_again_when_this_start_moved_from_the_one_that_cached_it(tmp_path, monkeypatch,
                                                                                         rmsnorm_problem):
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache"))
    judge = Judge("cpu")
    first = _ask(judge, rmsnorm_problem, None)  # a start that kept no state: cached with its measurement's
    assert first.ok and not first.cached and first.machine is not None and first.machine_start is None
    same = {**first.machine, "taken_at": first.machine["taken_at"] + 60}
    again = _ask(judge, rmsnorm_problem, same)
    assert again.cached and again.remeasured == "" and again.baseline_ms == first.baseline_ms
    assert again.machine_now == same

    slower = {**first.machine, "probe_ms": first.machine["probe_ms"] * 1000, "load_1m": 9.5}
    moved_again = _ask(judge, rmsnorm_problem, slower)
    assert not moved_again.cached and moved_again.ok
    assert moved_again.remeasured.startswith("the machine's probe moved"), moved_again.remeasured
    assert "(+" in moved_again.remeasured and "→ 9.5)" in moved_again.remeasured  # slower now, and busier
    # Measured now on this machine, against a start a thousand times slower: flagged, and not kept for later.
    assert state_moved(moved_again).startswith("the machine's probe moved")
    assert _ask(judge, rmsnorm_problem, same).baseline_ms == first.baseline_ms  # the cache still holds the first

    # A figure cached before states were kept has nothing to compare: it stands.
    path, data = _cached_entry(tmp_path / "cache")
    del data["workloads"]["0"]["machine"]
    path.write_text(json.dumps(data))
    assert _ask(judge, rmsnorm_problem, slower).cached


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


def test_a_t_b_timed_in_another_state_than_its_start_is_not_cached(tmp_path, monkeypatch):
    import torch

    from core.evaluate.baseline.judge import _finished

    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache"))
    measured = WorkloadBaseline(0, uuid="u0", baseline_ms=0.5, eager_ms=0.5, method="eager", eager_spread=0.01)
    far = MachineState(1e-6, 0.0, 2, 0.0, "cpu")  # a start a million times faster than this machine now
    reply = _finished(measured, "k-apart", {}, torch.device("cpu"), far, "")
    flagged = WorkloadBaseline.from_dict(reply.baseline)
    assert flagged.ok and flagged.machine["device"] == "cpu" and flagged.machine_now["probe_ms"] == 1e-6
    assert BaselineCache().read("k-apart") == {}  # used in its run, flagged, never kept
    reply = _finished(measured, "k-same", {}, torch.device("cpu"), None, "")
    assert BaselineCache().read("k-same")["workloads"]["0"]["machine"]["device"] == "cpu"


def test_a_stale_cached_t_b_measured_twice_still_says_why_it_was_not_the_cached_one(tmp_path, monkeypatch,
                                                                                   rmsnorm_problem):
    # Seen on a loaded CI machine: the cached T_b was stale (this start's probe had moved), the new figure was
    # taken in another state than the start's too and measured once more, without a cache lookup, so the run said
    # neither why T_b was not the cached one nor that it was measured again.
    from core.evaluate.baseline import machine

    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache"))
    first = _pool_baseline(rmsnorm_problem)
    assert first.ok and not first.cached
    if not list((tmp_path / "cache" / "baseline").glob("*.json")):
        _keep_as_cached(first, rmsnorm_problem)  # a busy machine's load moved while it was timed: left uncached
    path, data = _cached_entry(tmp_path / "cache")
    for state in ("machine", "machine_start"):  # cached on a machine a thousand times slower
        data["workloads"]["0"][state] = {**data["workloads"]["0"][state], "probe_ms": first.machine["probe_ms"] * 1000}
    path.write_text(json.dumps(data))
    measured = []

    def moved_once(result):  # the first new figure stands in another state than its start; the next does not
        measured.append(result.remeasured)
        return "moved: by the test" if len(measured) == 1 else ""

    monkeypatch.setattr(machine, "state_moved", moved_once)
    again = _pool_baseline(rmsnorm_problem)
    assert len(measured) == 1 and measured[0].startswith("the machine's probe moved")
    assert not again.cached and again.ok
    assert again.remeasured.startswith("the machine's probe moved"), again.remeasured
