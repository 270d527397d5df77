"""The run store on a real SQLite file: migrations, WAL, attempts, events, controls from another process, the
read-only reader, transactions and field checks."""

import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from core.store import ControlError, LlmCall, RunReader, RunStore, StoreError, submit_control
from core.store.schema import DB_NAME, MIGRATIONS

ROOT = Path(__file__).resolve().parents[2]

SOLUTION = {"name": "s", "definition": "p", "author": "tests",
            "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run"},
            "sources": [{"path": "main.py", "content": "def run(x):\n    return x\n"}]}


@pytest.fixture
def store(tmp_path):
    s = RunStore(tmp_path / "run", create=True)
    yield s
    s.close()


def _user_version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()


def _problem(store: RunStore, key: str = "norm/p1") -> int:
    subset, name = key.split("/")
    return store.add_problem(key, name, subset, f"/problems/{key}")


# ---------------------------------------------------------------- opening and migrations


def test_fresh_file_is_migrated_to_the_newest_version(tmp_path):
    store = RunStore(tmp_path / "run", create=True)
    try:
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        tables = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"run", "problems", "agents", "attempts", "events", "controls", "metrics"} <= tables
    finally:
        store.close()
    assert _user_version(tmp_path / "run" / DB_NAME) == len(MIGRATIONS)


def test_reopening_is_a_no_op_and_keeps_rows(tmp_path):
    store = RunStore(tmp_path / "run", create=True)
    pid = _problem(store)
    store.close()
    again = RunStore(tmp_path / "run")
    try:
        assert again.conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        assert [p.id for p in again.problems()] == [pid]
        assert again.add_problem("norm/p1", "p1", "norm", "/elsewhere") == pid  # already there: same id
    finally:
        again.close()


def test_missing_run_without_create_is_a_store_error(tmp_path):
    with pytest.raises(StoreError, match="no run here"):
        RunStore(tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()


def test_a_file_from_a_newer_version_is_refused(tmp_path):
    RunStore(tmp_path / "run", create=True).close()
    path = tmp_path / "run" / DB_NAME
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError) as info:
        RunStore(tmp_path / "run")
    message = str(info.value)
    assert f"version {len(MIGRATIONS) + 1}" in message and "newer" in message and str(tmp_path / "run") in message
    with pytest.raises(ValueError, match="store version"):
        RunReader(tmp_path / "run")


def test_wal_mode_is_on(store, tmp_path):
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
    with RunReader(tmp_path / "run") as reader:
        assert reader.conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"


# ---------------------------------------------------------------- attempts


def test_begin_and_finish_attempt_round_trip(store):
    pid = _problem(store)
    agent = store.add_agent("tuner-1", "tuner")
    aid = store.begin_attempt(pid, agent, SOLUTION, language="pytorch", diff="--- a\n+++ b\n",
                              tunables={"BLOCK": 128}, note="first", workloads=[0, 2], content_hash="abc")
    pending = store.attempt(aid)
    assert pending.state == "pending" and pending.status is None and pending.finished_at is None
    assert pending.solution == SOLUTION and pending.tunables == {"BLOCK": 128} and pending.note == "first"
    assert pending.workloads == (0, 2) and pending.full is False
    assert pending.content_hash == "abc" and pending.agent_id == agent
    assert [a.id for a in store.attempts(state="pending")] == [aid]

    assert store.finish_attempt(aid, status="PASSED", verdict={"status": "PASSED"}, build={"ok": True},
                                times_ms={0: 1.5, 2: 2.5}, speedup=1.8, sol=0.6, gpu_seconds=3.0)
    done = store.attempt(aid)
    assert done.state == "done" and done.passed and done.finished_at is not None
    assert done.times_ms == {0: 1.5, 2: 2.5} and all(isinstance(k, int) for k in done.times_ms)
    assert done.speedup == 1.8 and done.sol == 0.6 and done.gpu_seconds == 3.0
    assert done.verdict == {"status": "PASSED"} and done.build == {"ok": True}
    assert store.attempts(state="pending") == []

    # a second finish changes nothing
    assert store.finish_attempt(aid, status="RUNTIME_ERROR", reason="late", speedup=0.1, sol=0.01) is False
    assert store.attempt(aid) == done


def test_attempt_for_every_workload_has_no_workload_list(store):
    pid = _problem(store)
    aid = store.begin_attempt(pid, None, SOLUTION, language="pytorch")
    row = store.attempt(aid)
    assert row.workloads is None and row.full is True and row.agent_id is None
    assert store.finish_attempt(aid, status="COMPILE_ERROR", reason="x" * 5000)
    row = store.attempt(aid)
    assert not row.passed and len(row.reason) == 2000 and row.times_ms == {} and row.speedup is None


def test_attempts_filters_and_limit_gives_the_newest_in_order(store):
    p1, p2 = _problem(store, "norm/p1"), _problem(store, "gemm/p2")
    a1, a2 = store.add_agent("a1", "tuner"), store.add_agent("a2", "llm", "model-x")
    ids = []
    for i in range(6):
        ids.append(store.begin_attempt(p1 if i % 2 == 0 else p2, a1 if i < 3 else a2, SOLUTION, language="pytorch"))
    store.finish_attempt(ids[0], status="PASSED")
    store.finish_attempt(ids[1], status="PASSED")

    assert [a.id for a in store.attempts()] == ids
    assert [a.id for a in store.attempts(problem_id=p1)] == [ids[0], ids[2], ids[4]]
    assert [a.id for a in store.attempts(agent_id=a2)] == ids[3:]
    assert [a.id for a in store.attempts(problem_id=p2, agent_id=a2)] == [ids[3], ids[5]]
    assert [a.id for a in store.attempts(state="done")] == ids[:2]
    assert [a.id for a in store.attempts(state="pending", problem_id=p1)] == [ids[2], ids[4]]
    assert [a.id for a in store.attempts(since_id=ids[3])] == ids[4:]
    assert [a.id for a in store.attempts(limit=3)] == ids[3:]
    assert [a.id for a in store.attempts(problem_id=p1, limit=2)] == [ids[2], ids[4]]
    assert [a.id for a in store.attempts(limit=100)] == ids
    assert store.attempts(limit=0) == []
    assert store.attempt_count() == 2
    assert store.attempt(9999) is None


def test_totals_count_finished_attempts_and_every_model_call(store):
    pid = _problem(store)
    agent = store.add_agent("llm-1", "llm")
    a = store.begin_attempt(pid, None, SOLUTION, language="pytorch")
    store.begin_attempt(pid, None, SOLUTION, language="pytorch")
    store.finish_attempt(a, status="PASSED", gpu_seconds=2.5)
    store.add_llm_call(agent, pid, LlmCall("tool_calls", 90, 10, dollars=1.0, latency_s=0.5, detail="evaluate"))
    store.add_llm_call(agent, pid, LlmCall("garbage", 40, 10, tokens_estimated=True, dollars=0.25))
    store.add_llm_call(agent, pid, LlmCall("retry", detail="HTTP 500: boom; retry 1/3"))
    assert store.totals() == {"attempts": 1, "tokens": 150, "dollars": 1.25, "gpu_seconds": 2.5}
    assert store.attempts_begun() == store.attempts_begun(pid) == 2


def test_a_model_call_moves_its_problem_and_agent_totals_at_once(store, tmp_path):
    pid = _problem(store)
    agent = store.add_agent("llm-1", "llm")
    store.problems(), store.agents()  # cached rows: the writer must re-read the ones a call changed
    call_id = store.add_llm_call(agent, pid, LlmCall("answer", 1000, 200, dollars=0.5, latency_s=1.5,
                                                     detail="x" * 1000))
    assert store.problem(pid).tokens == 1200 and store.problems()[0].dollars == 0.5
    assert store.agents()[0].tokens == 1200 and store.agent(agent).dollars == 0.5
    with RunReader(tmp_path / "run") as reader:
        (row,) = reader.llm_calls()
        assert row.id == call_id and (row.agent_id, row.problem_id) == (agent, pid) and row.ts > 0
        assert row.call == LlmCall("answer", 1000, 200, False, 0.5, 1.5, "x" * 300)
        assert reader.llm_spent() == (1200, 0.5)
    store.add_llm_call(agent, pid, LlmCall("error", detail="HTTP 503"))
    assert [c.call.outcome for c in store.llm_calls(since_id=call_id)] == ["error"]
    assert [c.id for c in store.llm_calls(limit=1)] == [call_id + 1]
    assert store.llm_calls(problem_id=pid + 1) == []


def test_attempts_with_content_are_the_finished_ones(store):
    pid = _problem(store)
    a = store.begin_attempt(pid, None, SOLUTION, language="pytorch", content_hash="h1")
    store.begin_attempt(pid, None, SOLUTION, language="pytorch", content_hash="h1")  # pending
    store.begin_attempt(pid, None, SOLUTION, language="pytorch", content_hash="h2")
    store.finish_attempt(a, status="PASSED")
    assert [x.id for x in store.attempts_with_content(pid, "h1")] == [a]
    assert store.attempts_with_content(pid, "h3") == []


def test_an_older_store_keeps_what_its_attempts_were_billed(tmp_path):
    """Version 1 billed tokens to attempts; the upgrade turns them into call records, so the run's totals and
    budgets still count them after a resume (the problem and agent rows already did)."""
    path = tmp_path / DB_NAME
    conn = sqlite3.connect(path)
    conn.executescript("BEGIN;" + MIGRATIONS[0] + ";PRAGMA user_version = 1;COMMIT;")
    conn.execute("INSERT INTO problems (key, name, subset, path, tokens, dollars) VALUES ('a/b', 'b', 'a', '/p', "
                 "300, 0.75)")
    for tokens, dollars in ((100, 0.25), (200, 0.5), (0, 0.0)):
        conn.execute("INSERT INTO attempts (problem_id, state, created_at, language, solution_json, tokens, "
                     "dollars) VALUES (1, 'done', 1.0, 'pytorch', '{}', ?, ?)", (tokens, dollars))
    conn.commit()
    conn.close()
    store = RunStore(tmp_path)  # migrates to the newest version
    try:
        calls = [c.call for c in store.llm_calls()]
        assert [(c.tokens, c.dollars) for c in calls] == [(100, 0.25), (200, 0.5)]
        assert store.totals()["tokens"] == 300 and store.totals()["dollars"] == 0.75
        assert store.problem(1).tokens == 300  # not counted twice
        assert store.attempt(1).content_hash == ""
    finally:
        store.close()


# ---------------------------------------------------------------- events and metrics


def test_events_limit_since_and_filters(store):
    pid = _problem(store)
    agent = store.add_agent("a1", "tuner")
    ids = [store.add_event("log", f"message {i}", agent_id=agent if i % 2 else None,
                           problem_id=pid if i >= 5 else None) for i in range(10)]
    assert [e.message for e in store.events()] == [f"message {i}" for i in range(10)]
    assert [e.id for e in store.events(limit=3)] == ids[7:]  # the newest three, oldest first
    assert [e.id for e in store.events(since_id=ids[6])] == ids[7:]
    assert [e.id for e in store.events(since_id=ids[2], limit=2)] == ids[8:]
    assert [e.id for e in store.events(agent_id=agent)] == ids[1::2]
    assert [e.id for e in store.events(problem_id=pid, limit=2)] == ids[8:]
    store.add_event("decision", "picked")
    assert [e.message for e in store.events(kind="decision")] == ["picked"]
    assert store.events(since_id=10_000) == []


def test_metrics_since(store):
    store.add_metric(fleet_mean_sol=0.4, geomean_speedup=1.1, gpu_busy=0.5, queue_wait_s=0.0, attempts=1,
                     tokens=10, dollars=0.1, active_problems=2)
    first = store.metrics()
    assert len(first) == 1 and first[0].fleet_mean_sol == 0.4 and first[0].active_problems == 2
    store.add_metric(fleet_mean_sol=None, geomean_speedup=None, gpu_busy=None, queue_wait_s=None, attempts=2,
                     tokens=20, dollars=0.2, active_problems=1)
    assert [m.attempts for m in store.metrics()] == [1, 2]
    assert [m.attempts for m in store.metrics(since_ts=first[0].ts)] in ([2], [])  # same-tick clocks may tie
    assert store.metrics(since_ts=1e12) == []


# ---------------------------------------------------------------- controls


def _running(store) -> None:
    store.init_run({}, [], "cpu", [])
    store.set_run_state("running", owner=f"{socket.gethostname()}:{os.getpid()}")


def test_controls_from_another_process_reach_the_open_writer(store, tmp_path):
    run_dir = tmp_path / "run"
    _running(store)
    script = ("import sys\n"
              "from core.store import submit_control\n"
              "print(submit_control(sys.argv[1], 'set_priority', 'norm/p1', 5))\n"
              "print(submit_control(sys.argv[1], 'stop_run'))\n")
    done = subprocess.run([sys.executable, "-c", script, str(run_dir)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    ids = [int(x) for x in done.stdout.split()]

    pending = store.controls(pending_only=True)
    assert [c.id for c in pending] == ids
    assert (pending[0].command, pending[0].target, pending[0].value) == ("set_priority", "norm/p1", "5")
    assert (pending[1].command, pending[1].target, pending[1].value) == ("stop_run", "", "")
    assert all(c.applied_at is None and c.result == "" for c in pending)

    store.mark_control_applied(ids[0], "priority 5")
    assert [c.id for c in store.controls(pending_only=True)] == [ids[1]]
    applied = store.controls()[0]
    assert applied.applied_at is not None and applied.result == "priority 5"
    assert len(store.controls()) == 2


def test_submit_control_in_this_process_lands_at_once(store, tmp_path):
    # the writer holds no transaction between calls, so a control is written at once
    _running(store)
    cid = submit_control(tmp_path / "run", "bump_priority", 3, -1)
    assert store.controls()[-1].id == cid and store.controls()[-1].value == "-1" and store.controls()[-1].target == "3"


@pytest.mark.parametrize("command, target, value, message", [
    ("explode", "x", None, "unknown control 'explode'"),
    ("set_priority", "norm/p1", None, "needs an integer value"),
    ("bump_priority", "norm/p1", None, "needs an integer value"),
    ("pause_problem", "", None, "needs a problem"),
    ("pause_agent", None, None, "needs a agent"),
])
def test_submit_control_rejects_bad_commands(store, tmp_path, command, target, value, message):
    with pytest.raises(ControlError, match=message):
        submit_control(tmp_path / "run", command, target, value)
    assert store.controls() == []


def test_submit_control_needs_a_run(tmp_path):
    with pytest.raises(ControlError, match="no run here"):
        submit_control(tmp_path / "missing", "stop_run")
    assert not (tmp_path / "missing").exists()
    assert isinstance(ControlError("x"), ValueError)


# ---------------------------------------------------------------- the reader


def test_reader_is_read_only_and_sees_committed_rows_while_the_writer_is_open(store, tmp_path):
    run_dir = tmp_path / "run"
    store.init_run({"budget": 3}, ["/problems/norm/p1"], "cuda", [0, 1], "H200")
    pid = _problem(store)
    with RunReader(run_dir) as reader:
        assert reader.run_info().config == {"budget": 3} and reader.run_info().gpus == (0, 1)
        assert [p.key for p in reader.problems()] == ["norm/p1"]
        with pytest.raises(sqlite3.OperationalError):
            reader.conn.execute("INSERT INTO events (ts, kind, message) VALUES (0, 'log', 'x')")
        with pytest.raises(sqlite3.OperationalError):
            reader.conn.execute("UPDATE problems SET priority = 9")
        assert not reader.conn.in_transaction  # a refused write leaves no transaction pinning an old snapshot

        # rows committed after the reader opened are visible to its next query
        aid = store.begin_attempt(pid, None, SOLUTION, language="pytorch")
        store.finish_attempt(aid, status="PASSED", times_ms={1: 0.5}, speedup=2.0, sol=0.7)
        store.update_problem(pid, best_attempt_id=aid, best_speedup=2.0, best_sol=0.7, status="active")
        store.set_run_state("running")
        assert reader.attempt(aid).times_ms == {1: 0.5}
        assert reader.problem(pid).best_speedup == 2.0 and reader.problem_by_key("norm/p1").status == "active"
        assert reader.run_info().state == "running"

        # an open transaction is invisible to the reader until it commits
        with store.transaction():
            store.add_event("log", "inside")
            assert reader.events() == []
        assert [e.message for e in reader.events()] == ["inside"]
    assert store.problem(pid).priority == 0


def test_reader_after_the_writer_closed(tmp_path):
    store = RunStore(tmp_path / "run", create=True)
    _problem(store)
    store.close()
    with RunReader(tmp_path / "run") as reader:
        assert [p.key for p in reader.problems()] == ["norm/p1"]


def test_reader_of_a_missing_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="no run here"):
        RunReader(tmp_path / "missing")


# ---------------------------------------------------------------- transactions and field checks


def test_transaction_rolls_back_on_exception(store):
    pid = _problem(store)
    with pytest.raises(RuntimeError, match="boom"):
        with store.transaction():
            store.update_problem(pid, priority=7, status="active")
            store.add_event("log", "lost")
            raise RuntimeError("boom")
    assert store.problem(pid).priority == 0 and store.problem(pid).status == "waiting"
    assert store.events() == []
    assert not store.conn.in_transaction

    with store.transaction():
        store.update_problem(pid, priority=3)
        store.add_event("log", "kept")
    assert store.problem(pid).priority == 3 and [e.message for e in store.events()] == ["kept"]
    assert not store.conn.in_transaction


def test_update_problem_with_an_unknown_field_is_refused(store):
    pid = _problem(store)
    with pytest.raises(StoreError, match="no such field.*colour"):
        store.update_problem(pid, colour="red", priority=2)
    assert store.problem(pid).priority == 0
    with pytest.raises(StoreError, match="no such field"):
        store.update_problem(pid, key="other/key")
    store.update_problem(pid)  # nothing to change: fine
    store.update_problem(pid, paused=True, pinned=True, best_sol=0.5)
    row = store.problem(pid)
    assert row.paused is True and row.pinned is True and row.best_sol == 0.5


def test_update_agent_checks_fields_and_stamps_time(store):
    agent = store.add_agent("a1", "llm", "m")
    before = store.agent(agent).updated_at
    store.update_agent(agent, state="working", tokens=5)
    row = store.agent(agent)
    assert row.state == "working" and row.tokens == 5 and row.updated_at >= before
    with pytest.raises(StoreError, match="no such field"):
        store.update_agent(agent, name="other")
    assert store.add_agent("a1", "tuner") == agent


def test_problem_workloads_round_trip(store):
    pid = store.add_problem("norm/p1", "p1", "norm", "/p", op="rmsnorm",
                            workloads=[{"index": 0, "axes": "M=1", "t_b_ms": 1.0}])
    row = store.problem(pid)
    assert row.op == "rmsnorm" and row.workloads[0].t_b_ms == 1.0 and row.workloads[0].t_sol_ms is None
    store.set_problem_workloads(pid, [{"index": 0, "axes": "M=1", "t_b_ms": 1.0, "t_sol_ms": 0.2,
                                       "baseline_method": "eager"}])
    assert store.problem(pid).workloads[0].t_sol_ms == 0.2


def test_reader_of_a_run_dir_with_uri_characters_in_its_name(tmp_path):
    run_dir = tmp_path / "run #1?mode=rw&x=%20"
    store = RunStore(run_dir, create=True)
    try:
        _problem(store)
        with RunReader(run_dir) as reader:
            assert [p.key for p in reader.problems()] == ["norm/p1"]
            with pytest.raises(sqlite3.OperationalError):
                reader.conn.execute("DELETE FROM problems")
    finally:
        store.close()


def test_the_writer_keeps_its_rows_in_memory_and_in_step_with_the_file(tmp_path):
    store = RunStore(tmp_path, create=True)
    store.init_run({}, [], "cpu", [])
    first = store.add_problem("a/one", "one", "a", "/x")
    agent = store.add_agent("tuner-1", "tuner")
    assert [p.priority for p in store.problems()] == [0]
    store.update_problem(first, priority=3)
    store.update_agent(agent, state="working")
    assert [p.priority for p in store.problems()] == [3] and store.agents()[0].state == "working"
    second = store.add_problem("a/two", "two", "a", "/y")
    assert [p.id for p in store.problems()] == [first, second]
    try:
        with store.transaction():
            store.update_problem(first, priority=9)
            raise RuntimeError("abandon")
    except RuntimeError:
        pass
    assert store.problems()[0].priority == 3  # the rolled-back change is not served from memory
    with RunReader(tmp_path) as reader:
        assert [(p.id, p.priority) for p in reader.problems()] == [(p.id, p.priority) for p in store.problems()]
    store.close()


def test_a_control_to_a_run_nothing_would_apply_it_to_is_refused_with_the_way_out(store, tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(ControlError, match="the run never started"):
        submit_control(run_dir, "stop_run")
    store.init_run({}, [], "cpu", [])
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that was an orchestrator's and is no process now
    store.set_run_state("running", owner=f"{socket.gethostname()}:{gone.pid}")
    with pytest.raises(ControlError, match=rf"orchestrator \(pid {gone.pid}\) is gone.*--resume {run_dir}"):
        submit_control(run_dir, "pause_problem", "norm/p1")
    store.set_run_state("running", owner=f"{socket.gethostname()}:{os.getpid()}")
    assert submit_control(run_dir, "pause_problem", "norm/p1") > 0
    store.set_run_state("running", owner="another-host:1")  # cannot be checked from here: accepted
    assert submit_control(run_dir, "pause_problem", "norm/p1") > 0
    store.set_run_state("stopped")
    with pytest.raises(ControlError, match="the run is stopped, so nothing would apply the control; continue it"):
        submit_control(run_dir, "stop_run")
    assert len(store.controls()) == 2

