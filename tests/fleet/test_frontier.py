"""The per-workload frontier, the starting-point rule and composites: the pure functions, the store keeping the
frontier with each result, and a composite's entry really dispatching by shape (loaded here, as the loader tests
load candidates)."""

from __future__ import annotations

import json

import anyio
import pytest
import torch
from rows_problem import write_rows_problem

from core.fleet.composite import CompositeError, compose, input_shape_key, member_folder, shape_routes
from core.fleet.frontier import choose_start, compute_frontier
from core.fleet.record import record_result
from core.fleet.scoring import AttemptFigures
from core.problem.load import load_problem
from core.solution.io import parse_solution, solution_to_dict
from core.solution.loader import load_entry, materialize, unload
from core.solution.prepare import prepare
from core.solution.tunables import TUNABLES_FILE, TUNABLES_MODULE_FILE
from core.store import RunReader, RunStore
from core.store.model import FrontierMember, PassingTimes, WorkloadInfo


def timed(attempt_id, times, full=True, speedup=None, composite=False, spreads=None):
    return PassingTimes(attempt_id, dict(times), full, speedup, composite, dict(spreads or {}))


# ---------------------------------------------------------------- the frontier


def test_two_specialists_each_lead_their_workload_and_the_slow_seed_is_left_out():
    attempts = [timed(1, {0: 40.0, 1: 8000.0}), timed(2, {0: 4.0, 1: 400.0}), timed(3, {0: 80.0, 1: 100.0})]
    frontier = compute_frontier(attempts)
    assert [(m.attempt_id, m.leads, m.lead_ms) for m in frontier] == [(2, (0,), (4.0,)), (3, (1,), (100.0,))]


def test_variants_within_the_tolerance_do_not_split_the_frontier():
    # 3 is 1% faster on workload 0 and 2 is 2% faster on workload 1: one of them holds both (the closer overall).
    attempts = [timed(2, {0: 10.1, 1: 20.0}), timed(3, {0: 10.0, 1: 20.4})]
    assert [(m.attempt_id, m.leads) for m in compute_frontier(attempts)] == [(2, (0, 1))]
    # Past the tolerance, the faster one leads its workload.
    attempts = [timed(2, {0: 10.5, 1: 20.0}), timed(3, {0: 10.0, 1: 21.0})]
    assert [(m.attempt_id, m.leads) for m in compute_frontier(attempts, tolerance=0.03)] == [(3, (0,)), (2, (1,))]


def test_a_lead_inside_the_timings_spread_does_not_split_the_frontier():
    # 3 is 7% faster on workload 0 (5 us), but that timing spreads 10% (the H200's small workloads do).
    noisy = [timed(2, {0: 5.35, 1: 143.6}, spreads={0: 0.02, 1: 0.01}), timed(3, {0: 5.0, 1: 150.0},
                                                                            spreads={0: 0.10, 1: 0.01})]
    assert [(m.attempt_id, m.leads) for m in compute_frontier(noisy)] == [(2, (0, 1))]
    # The same times measured tightly: a real lead, and two members.
    tight = [timed(2, {0: 5.35, 1: 143.6}, spreads={0: 0.01, 1: 0.01}), timed(3, {0: 5.0, 1: 150.0},
                                                                            spreads={0: 0.01, 1: 0.01})]
    assert [(m.attempt_id, m.leads) for m in compute_frontier(tight)] == [(3, (0,)), (2, (1,))]


def test_a_partial_attempt_leads_the_workloads_it_covered_and_composites_never_count():
    attempts = [timed(1, {0: 10.0, 1: 10.0, 2: 10.0}, speedup=1.0), timed(2, {2: 5.0}, full=False),
                timed(3, {0: 1.0, 1: 1.0, 2: 1.0}, composite=True)]
    frontier = compute_frontier(attempts)
    assert [(m.attempt_id, m.leads, m.full, m.speedup) for m in frontier] == [(1, (0, 1), True, 1.0),
                                                                              (2, (2,), False, None)]
    assert compute_frontier([]) == ()


def test_the_frontier_is_kept_in_the_store_with_each_passing_result(tmp_path):
    store = RunStore(tmp_path / "run", create=True)
    pid = store.add_problem("cpu/p", "p", "cpu", "/p")

    def result(times, status="PASSED"):
        aid = store.begin_attempt(pid, None, {"sources": []}, language="pytorch")
        record_result(store, aid, status=status, reason="", verdict=None, build=None,
                      figures=AttemptFigures(times, 1.0 if status == "PASSED" else None, None, 0.1),
                      plateau_min_gain=0.01)
        return aid

    first = result({0: 4.0, 1: 400.0})
    assert [(m.attempt_id, m.leads) for m in store.problem(pid).frontier] == [(first, (0, 1))]
    result({0: 1.0, 1: 1.0}, status="INCORRECT_NUMERICAL")  # a failed attempt is no member
    second = result({0: 80.0, 1: 100.0})
    store.close()
    with RunReader(tmp_path / "run") as reader:
        assert [(m.attempt_id, m.leads, m.lead_ms) for m in reader.problem(pid).frontier] == [
            (first, (0,), (4.0,)), (second, (1,), (100.0,))]
        assert reader.attempt(second).parents == () and not reader.attempt(second).composite


def test_the_stored_frontier_reads_each_timings_spread_from_the_verdict(tmp_path):
    store = RunStore(tmp_path / "run", create=True)
    pid = store.add_problem("cpu/p", "p", "cpu", "/p")

    def result(times, spreads):
        aid = store.begin_attempt(pid, None, {"sources": []}, language="pytorch")
        verdict = {"status": "PASSED", "workloads": [
            {"index": i, "status": "PASSED", "timing": {"median_ms": ms, "spread": spreads[i], "calls": 100,
                                                          "method": "cuda events"}} for i, ms in times.items()]}
        record_result(store, aid, status="PASSED", reason="", verdict=verdict, build=None,
                      figures=AttemptFigures(times, 1.0, None, 0.1), plateau_min_gain=0.01)
        return aid

    first = result({0: 5.35, 1: 143.6}, {0: 0.02, 1: 0.01})
    noisy = result({0: 5.0, 1: 150.0}, {0: 0.10, 1: 0.01})
    assert store.passing_times(pid)[1].spreads == {0: 0.10, 1: 0.01}
    assert [(m.attempt_id, m.leads) for m in store.problem(pid).frontier] == [(first, (0, 1))]
    tight = result({0: 4.0, 1: 150.0}, {0: 0.01, 1: 0.01})
    assert noisy not in {m.attempt_id for m in store.problem(pid).frontier}
    assert [(m.attempt_id, m.leads) for m in store.problem(pid).frontier] == [(tight, (0,)), (first, (1,))]
    store.close()


# ---------------------------------------------------------------- the starting point


def member(attempt_id, leads, lead_ms, speedup=1.0):
    return FrontierMember(attempt_id, tuple(leads), tuple(lead_ms), speedup, True)


def test_the_start_is_the_member_leading_the_workload_furthest_from_t_sol():
    frontier = [member(2, [0], [4.0]), member(3, [1], [100.0])]
    workloads = [WorkloadInfo(0, "rows=8", t_b_ms=5.0, t_sol_ms=0.5), WorkloadInfo(1, "rows=1024", 40.0, 50.0)]
    choice = choose_start(frontier, workloads, best_attempt_id=9)
    assert (choice.attempt_id, choice.leads) == (2, (0,))  # 8x T_sol beats 2x T_sol
    assert "workload 0 (rows=8)" in choice.reason and "8x T_sol" in choice.reason


def test_without_t_sol_the_start_is_the_member_with_the_least_speedup_over_t_b():
    frontier = [member(2, [0], [4.0]), member(3, [1], [100.0])]
    workloads = [WorkloadInfo(0, "rows=8", t_b_ms=5.0), WorkloadInfo(1, "rows=1024", t_b_ms=40.0)]
    choice = choose_start(frontier, workloads, best_attempt_id=2)
    assert (choice.attempt_id, choice.leads) == (3, (1,))
    assert "least speedup" in choice.reason and "0.4x over T_b" in choice.reason


def test_one_member_or_no_bounds_fall_back_to_what_there_is():
    workloads = [WorkloadInfo(0, "rows=8"), WorkloadInfo(1, "rows=1024")]
    only = choose_start([member(4, [0, 1], [1.0, 2.0])], workloads, best_attempt_id=4)
    assert (only.attempt_id, only.leads) == (4, (0, 1)) and "no other member" in only.reason
    unbounded = choose_start([member(2, [0], [4.0]), member(3, [1], [9.0])], workloads, best_attempt_id=3)
    assert (unbounded.attempt_id, unbounded.leads) == (3, (1,)) and "current best" in unbounded.reason
    assert choose_start([], workloads, best_attempt_id=None) is None


# ---------------------------------------------------------------- composites

REFERENCE = "import torch\n\ndef run(x, w):\n    return torch.relu(x * w)\n"


@pytest.fixture
def problem(tmp_path):
    return load_problem(write_rows_problem(tmp_path / "cpu" / "relu", "relu", "relu", REFERENCE, rows=(8, 256)))


def pytorch_member(tag: int, *, tunables: dict | None = None) -> dict:
    """A DPS member that writes ``tag`` (times SCALE, from its tunables, when it has them) into every element;
    each member has a sibling module of the same name, so a collision would show as the wrong tag."""
    scale = "from kernelfleet_tunables import SCALE\n" if tunables else "SCALE = 1\n"
    sources = [{"path": "main.py", "content": f"from helpers import tag\n{scale}\n\ndef run(x, w, out):\n"
                                              "    out.fill_(tag() * SCALE)\n"},
               {"path": "helpers.py", "content": f"def tag():\n    return {tag}\n"}]
    if tunables:
        sources.append({"path": TUNABLES_FILE, "content": json.dumps(tunables)})
    return {"name": f"m{tag}", "definition": "relu", "author": "test",
            "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run",
                     "destination_passing_style": True},
            "sources": sources}


def cuda_member() -> dict:
    return {"name": "k", "definition": "relu", "author": "test",
            "spec": {"languages": ["cuda_cpp"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run",
                     "destination_passing_style": True, "binding": None},
            "sources": [{"path": "main.py", "content": "from core.solution.runtime import load_module\n"
                                                       "from kernelfleet_tunables import BLOCK\n\n"
                                                       "_k = load_module('relu.cu')\n\ndef run(x, w, out):\n"
                                                       "    pass\n"},
                        {"path": "relu.cu", "content": "#ifndef BLOCK\n#define BLOCK 64\n#endif\n"
                                                       "extern \"C\" __global__ void relu() {}\n"},
                        {"path": TUNABLES_FILE, "content": json.dumps({"space": {"BLOCK": [64, 128]},
                                                                       "values": {"BLOCK": 128}})}]}


def test_the_composite_entry_sends_each_shape_to_its_leader_and_unknown_shapes_to_the_fallback(problem, tmp_path):
    frontier = [member(5, [0], [1.0]), member(7, [1], [1.0])]
    solutions = {5: pytorch_member(1, tunables={"space": {"SCALE": [3, 4]}, "values": {"SCALE": 3}}),
                 7: pytorch_member(2)}
    composite = compose(problem, frontier, solutions, fallback_id=7)
    assert input_shape_key(problem, 0) == ((8, 64), (64,))
    assert shape_routes(problem, frontier, 7) == {((8, 64), (64,)): 5, ((256, 64), (64,)): 7}
    paths = set(composite.paths)
    assert {"main.py", "attempt_5/main.py", "attempt_5/helpers.py", f"attempt_5/{TUNABLES_MODULE_FILE}",
            "attempt_7/main.py", "attempt_7/helpers.py"} == paths  # no tunables.json: attempt 5's values are baked
    assert composite.spec.languages[0].value == "pytorch" and composite.spec.destination_passing_style
    # What the store keeps and the export writes loads again as the same solution.
    assert parse_solution(json.loads(json.dumps(solution_to_dict(composite)))) == composite

    prepared = anyio.run(prepare, composite)
    folder = materialize(prepared, tmp_path / "materialized")
    entry = load_entry(folder, composite)
    try:
        calls = {}
        for rows in (8, 256, 5):
            x, w, out = torch.randn(rows, 64), torch.randn(64), torch.empty(rows, 64)
            entry(x, w, out)
            calls[rows] = out.unique().tolist()
    finally:
        unload(folder)
    assert calls == {8: [3.0], 256: [2.0], 5: [2.0]}  # attempt 5 (tag 1 x SCALE 3), attempt 7, the fallback


def test_a_cuda_member_makes_a_cuda_cpp_composite_with_its_tunables_baked_into_its_sources(problem):
    composite = compose(problem, [member(5, [0], [1.0]), member(7, [1], [1.0])],
                        {5: cuda_member(), 7: pytorch_member(2)}, fallback_id=5)
    assert [lang.value for lang in composite.spec.languages] == ["cuda_cpp"]
    assert composite.entry_file == "main.py" and composite.spec.binding is None
    cu = composite.source(f"{member_folder(5)}/relu.cu").content
    assert "#define BLOCK 128\n" in cu and cu.index("#define BLOCK 128") < cu.index("#ifndef BLOCK")
    assert "BLOCK = 128" in composite.source(f"{member_folder(5)}/{TUNABLES_MODULE_FILE}").content
    assert composite.source(TUNABLES_FILE) is None


def test_members_that_cannot_be_composed_are_refused_with_the_reason(problem):
    frontier = [member(5, [0], [1.0]), member(7, [1], [1.0])]
    extension = {**cuda_member(), "spec": {**cuda_member()["spec"], "entry_point": "relu.cu::run"}}
    with pytest.raises(CompositeError, match="C\\+\\+ entry"):
        compose(problem, frontier, {5: extension, 7: pytorch_member(2)}, fallback_id=7)
    value_returning = pytorch_member(1)
    value_returning["spec"] = {**value_returning["spec"], "destination_passing_style": False}
    with pytest.raises(CompositeError, match="destination passing style"):
        compose(problem, frontier, {5: value_returning, 7: pytorch_member(2)}, fallback_id=7)
    with pytest.raises(CompositeError, match="at least two"):
        compose(problem, frontier[:1], {5: pytorch_member(1)}, fallback_id=5)
