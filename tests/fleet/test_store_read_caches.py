"""What the run's one writer serves from memory on the recording path (core.store.writer): finished attempts
once read, and each problem's passing times extended as attempts finish. Each is checked against a fresh read of
the same file by another connection (RunReader) after the changes that could make it stale: results in and out of
order, another GPU model's times and a change of its T_b, an attempt's gain and re-verification, and a rolled-back
transaction."""

from __future__ import annotations

import pytest

from core.fleet.record import record_result
from core.fleet.scoring import AttemptFigures
from core.store import RunReader, RunStore

SOLUTION = {"name": "s", "definition": "p", "author": "tests",
            "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run"},
            "sources": [{"path": "main.py", "content": "def run(x):\n    return x\n"}]}
OTHER_MODEL = "Other GPU"


@pytest.fixture
def store(tmp_path):
    s = RunStore(tmp_path / "run", create=True)
    yield s
    s.close()


def _problem(store: RunStore) -> int:
    pid = store.add_problem("norm/p1", "p1", "norm", "/problems/norm/p1")
    store.set_problem_workloads(pid, [{"index": i, "axes": "", "t_b_ms": 2.0, "baseline_method": "eager"}
                                      for i in (0, 1)], "H200")
    return pid


def _verdict(status: str, spreads: tuple[float, float] = (0.02, 0.04)) -> dict:
    return {"status": status, "reason": "", "seconds": 1.0, "protections": [],
            "workloads": [{"index": i, "status": status, "reason": "", "phase_s": {},
                           "timing": {"median_ms": 1.0, "spread": s, "calls": 10, "method": "t"}}
                          for i, s in enumerate(spreads)]}


def _finish(store: RunStore, attempt_id: int, ms: tuple[float, float], *, status: str = "PASSED",
            model: str = "H200", spreads: tuple[float, float] = (0.02, 0.04)) -> None:
    store.finish_attempt(attempt_id, status=status, verdict=_verdict(status, spreads),
                         times_ms={0: ms[0], 1: ms[1]} if status == "PASSED" else {},
                         speedup=2.0 / ms[0] if status == "PASSED" else None, device_model=model)


def _fresh(store: RunStore, query):
    with RunReader(store.run_dir) as reader:
        return query(reader)


def test_passing_times_from_memory_match_a_fresh_read_as_attempts_finish(store):
    pid = _problem(store)
    ids = [store.begin_attempt(pid, None, SOLUTION, language="pytorch") for _ in range(3)]
    _finish(store, ids[0], (1.5, 3.0))
    assert store.passing_times(pid) == _fresh(store, lambda r: r.passing_times(pid))  # read once, kept from here
    late = store.begin_attempt(pid, None, SOLUTION, language="pytorch")
    composite = store.begin_attempt(pid, None, SOLUTION, language="pytorch", parents=[ids[0], ids[1]])
    failed = store.begin_attempt(pid, None, SOLUTION, language="pytorch")
    _finish(store, ids[2], (1.2, 2.5), spreads=(0.11, 0.0))
    _finish(store, composite, (1.0, 2.0))
    _finish(store, failed, (0, 0), status="INCORRECT_NUMERICAL")
    _finish(store, ids[1], (1.4, 2.8))  # finishes after later ones: still listed in id order
    assert store.passing_times(pid) == _fresh(store, lambda r: r.passing_times(pid))
    store.set_model_workloads(pid, OTHER_MODEL, [{"index": 0, "axes": "", "t_b_ms": 4.0, "baseline_method": "e"},
                                                 {"index": 1, "axes": "", "t_b_ms": 8.0, "baseline_method": "e"}])
    _finish(store, late, (3.0, 6.0), model=OTHER_MODEL)
    kept = store.passing_times(pid)
    assert kept == _fresh(store, lambda r: r.passing_times(pid))
    assert [t.attempt_id for t in kept] == [ids[0], ids[1], ids[2], late, composite]
    by_id = {t.attempt_id: t for t in kept}
    assert by_id[late].times_ms == {0: 1.5, 1: 1.5}  # scaled by T_b(H200) / T_b(other): 2/4 and 2/8
    assert by_id[composite].composite and not by_id[ids[2]].composite
    assert by_id[ids[2]].spreads == {0: 0.11, 1: 0.0}

    # The other model's T_b measured again: its times are scaled anew.
    store.set_model_workloads(pid, OTHER_MODEL, [{"index": 0, "axes": "", "t_b_ms": 2.0, "baseline_method": "e"},
                                                 {"index": 1, "axes": "", "t_b_ms": 2.0, "baseline_method": "e"}])
    kept = store.passing_times(pid)
    assert {t.attempt_id: t for t in kept}[late].times_ms == {0: 3.0, 1: 6.0}
    assert kept == _fresh(store, lambda r: r.passing_times(pid))
    # The problem's own T_b measured again: every other model's times are scaled anew against it.
    store.set_problem_workloads(pid, [{"index": i, "axes": "", "t_b_ms": 4.0, "baseline_method": "eager"}
                                      for i in (0, 1)], "H200")
    kept = store.passing_times(pid)
    assert {t.attempt_id: t for t in kept}[late].times_ms == {0: 6.0, 1: 12.0}
    assert kept == _fresh(store, lambda r: r.passing_times(pid))


def test_a_finished_attempt_is_served_as_it_now_stands(store):
    pid = _problem(store)
    attempt_id = store.begin_attempt(pid, None, SOLUTION, language="pytorch")
    assert store.attempt(attempt_id).state == "pending"
    _finish(store, attempt_id, (1.0, 2.0))
    assert store.attempt(attempt_id) == _fresh(store, lambda r: r.attempt(attempt_id))
    assert store.attempt(attempt_id) is store.attempt(attempt_id)  # decoded once
    store.set_attempt_gain(attempt_id, 0.25)
    assert store.attempt(attempt_id).gain == 0.25
    store.set_attempt_verified(attempt_id, "passed: 10 rounds")
    served = store.attempt(attempt_id)
    assert (served.gain, served.verified) == (0.25, "passed: 10 rounds")
    assert served == _fresh(store, lambda r: r.attempt(attempt_id))


def test_a_rolled_back_result_leaves_nothing_in_memory(store):
    pid = _problem(store)
    first = store.begin_attempt(pid, None, SOLUTION, language="pytorch")
    _finish(store, first, (1.0, 2.0))
    before = store.passing_times(pid)
    second = store.begin_attempt(pid, None, SOLUTION, language="pytorch")
    with pytest.raises(RuntimeError):
        with store.transaction():
            _finish(store, second, (0.5, 1.0))
            assert store.attempt(second).state == "done" and len(store.passing_times(pid)) == 2
            raise RuntimeError("killed mid-record")
    assert store.attempt(second).state == "pending"
    assert store.passing_times(pid) == before == _fresh(store, lambda r: r.passing_times(pid))


def test_recording_returns_the_attempt_as_stored_and_refuses_one_not_pending(store):
    pid = _problem(store)
    agent = store.add_agent("tuner-1", "tuner")
    attempt_id = store.begin_attempt(pid, agent, SOLUTION, language="pytorch", note="seed")
    figures = AttemptFigures({0: 1.0, 1: 2.0}, 2.0, None, 1.5)
    recorded = record_result(store, attempt_id, status="PASSED", reason="", verdict=_verdict("PASSED"), build=None,
                             figures=figures, plateau_min_gain=0.01)
    assert recorded.new_best and recorded.attempt == _fresh(store, lambda r: r.attempt(attempt_id))
    row = store.problem(pid)
    assert (row.best_attempt_id, row.seed_attempt_id, row.attempts) == (attempt_id, attempt_id, 1)
    assert [m.attempt_id for m in row.frontier] == [attempt_id]
    assert store.agent(agent).attempts == 1
    with pytest.raises(ValueError, match="not pending"):
        record_result(store, attempt_id, status="PASSED", reason="", verdict=_verdict("PASSED"), build=None,
                      figures=figures, plateau_min_gain=0.01)
    assert store.problem(pid).attempts == 1 and store.agent(agent).attempts == 1
    assert _fresh(store, lambda r: (r.problem(pid).attempts, r.agent(agent).attempts)) == (1, 1)
