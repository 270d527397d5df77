"""The agent's eyes: what the brief says per workload (the bound, the best time and who holds it), the languages a
run allows (refused in the tools and in the Workbench, nothing recorded), the ``attempt`` and ``note`` tools,
the best solutions of similar problems and the notes board of an op family, on real stores and real CPU fleet
runs with the scripted OpenAI-compatible server."""

from __future__ import annotations

import sqlite3
from dataclasses import asdict

import anyio
import pytest
from llm_fleet_helpers import GOOD_MAIN, REFERENCE, agent_attempts, run_fleet, write_config, write_problem
from llm_scripted_server import ScriptedServer, call, tools
from rows_problem import write_rows_problem

from core.config import load_config
from core.errors import SpecError
from core.fleet.agent import AgentIdentity
from core.fleet.facts import RunFacts
from core.fleet.orchestrator import Fleet
from core.fleet.record import record_result
from core.fleet.scoring import AttemptFigures
from core.fleet.similar import reference_calls, similarity
from core.fleet.workbench import Workbench, content_hash
from core.llm.brief import offers_similar, problem_brief, workload_bests
from core.llm.tools import Toolbox, Workspace
from core.problem import load_problems
from core.roofline.problem_sol import speed_of_light
from core.solution.io import parse_solution, solution_to_dict
from core.store import RunReader, RunStore
from core.store.model import AttemptRow, ProblemRow, WorkloadInfo
from core.store.schema import DB_NAME, MIGRATIONS

SECRET = "sk-test-knowledge-SECRET-0123456789"

TRITON_SPEC = {"languages": ["triton"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run",
               "dependencies": [], "destination_passing_style": True, "binding": None, "compile_options": None}


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("KF_TEST_LLM_KEY", SECRET)
    monkeypatch.setattr("core.llm.client.BACKOFF_BASE_S", 0.05)


def _solution(main: str = GOOD_MAIN, spec: dict | None = None, name: str = "s"):
    return parse_solution({"name": name, "definition": "scaled_relu", "author": "tests",
                           "spec": spec or {**TRITON_SPEC, "languages": ["pytorch"]},
                           "sources": [{"path": "main.py", "content": main}]}, "solution.json")


def _attempt(i: int, status: str, *, agent: int | None = 7, times: dict | None = None, verdict: dict | None = None,
             speedup: float | None = None, note: str = "", problem_id: int = 1) -> AttemptRow:
    return AttemptRow(i, problem_id, agent, None, "done", 0.0, 1.0, "pytorch", {}, "", {}, note, None, None, verdict,
                      status, "", times_ms=times or {}, speedup=speedup)


def _row(workloads: tuple[WorkloadInfo, ...], **changes) -> ProblemRow:
    base = ProblemRow(1, "cpu/scaled_relu", "scaled_relu", "cpu", "/p", "", 0, False, False, "active", None, None,
                      None, 1, 1.0, None, 3, 0, 0, 0, 0.0, 0.0, 0.0, None, workloads)
    return ProblemRow(**{**asdict(base), "workloads": workloads, **changes})


# ---------------------------------------------------------------- the brief per workload


def test_brief_names_the_bound_how_t_b_was_measured_and_the_best_time_with_its_holder(tmp_path):
    problem = load_problems([str(write_problem(tmp_path))]).problems[0]
    row = _row((WorkloadInfo(0, "rows=64", 0.02, 0.0004, "eager", 0.02, 0.03, "", "cuda events", "floor"),
                WorkloadInfo(1, "rows=256", 0.05, 0.001, "torch.compile", 0.08, 0.05, "", "cuda events", "memory")))
    verdict_only = {"workloads": [{"index": 0, "status": "PASSED", "timing": {"median_ms": 0.009}},
                                  {"index": 1, "status": "PASSED", "timing": {"median_ms": 0.04}}]}
    history = [
        _attempt(1, "PASSED", agent=None, times={0: 0.02, 1: 0.05}, speedup=1.0, note="seed"),
        _attempt(2, "PASSED", times={0: 0.011, 1: 0.03}, speedup=1.7),
        _attempt(3, "INCORRECT_NUMERICAL", times={0: 0.001}),  # faster, but wrong: never a best time
        _attempt(4, "PASSED", agent=8, verdict=verdict_only),  # times from the verdict
    ]
    assert workload_bests(history) == {0: (0.009, 4), 1: (0.03, 2)}
    brief = problem_brief(problem, row, history[1], history, agent_id=7)
    assert "not known yet" not in brief
    assert "| 0 | 64 | 0.02 e | 0.0004 | lat | 0.009 #4 | 2.22x |" in brief
    assert "| 1 | 256 | 0.05 c | 0.001 | mem | 0.03 #2 | 1.67x |" in brief
    # Each listed attempt carries its times per workload; the best is marked.
    assert "- 2 by you: PASSED 1.7x [pytorch; ms per workload 0: 0.011, 1: 0.03; the current best]" in brief
    assert "- 4 by agent 8: PASSED [pytorch; ms per workload 0: 0.009, 1: 0.04]" in brief
    assert "with the `attempt` tool" in brief


def test_the_best_is_listed_even_when_older_than_the_recent_attempts(tmp_path):
    problem = load_problems([str(write_problem(tmp_path))]).problems[0]
    row = _row((WorkloadInfo(0, "rows=64", 0.02), WorkloadInfo(1, "rows=256", 0.05)))
    history = [_attempt(1, "PASSED", times={0: 0.01, 1: 0.02}, speedup=2.0)]
    history += [_attempt(i, "RUNTIME_ERROR") for i in range(2, 12)]
    brief = problem_brief(problem, row, history[0], history, max_notes=3)
    listed = [line for line in brief.splitlines() if line.startswith("- ") and " by " in line]
    assert [line.split(" by ")[0] for line in listed] == ["- 1", "- 9", "- 10", "- 11"]
    assert "| 0 | 64 | 0.02 | - | - | 0.01 #1 | 2x |" in brief


def test_the_sol_model_says_which_term_bounds_each_workload(tmp_path):
    folder = write_rows_problem(tmp_path / "cpu" / "big", "big", "relu", REFERENCE, rows=(64, 1 << 21))
    problem = load_problems([str(folder)]).problems[0]
    sol = speed_of_light(problem, [0, 1], "cuda", "NVIDIA H200")
    assert sol.bound == {0: "floor", 1: "memory"} and set(sol.t_sol_ms) == {0, 1}
    assert speed_of_light(problem, [0, 1], "cpu", "").bound == {}
    # Stored with the workload; a store written before the field existed still loads (bound unknown).
    store = RunStore(tmp_path / "run", create=True)
    try:
        pid = store.add_problem("cpu/big", "big", "cpu", str(folder))
        store.set_problem_workloads(pid, [asdict(WorkloadInfo(0, "rows=64", 0.01, 0.0004, bound="floor")),
                                          {"index": 1, "axes": "rows=2097152", "t_b_ms": 1.0}])
        assert [w.bound for w in store.problem(pid).workloads] == ["floor", ""]
    finally:
        store.close()


def test_similar_problems_are_offered_when_the_problem_is_new_or_stalling():
    seed_only = [_attempt(1, "PASSED", agent=None)]
    worked = seed_only + [_attempt(2, "PASSED")]
    assert offers_similar(_row(()), seed_only, 12)
    assert not offers_similar(_row(()), worked, 12)
    assert offers_similar(_row((), since_improvement=6), worked, 12)
    assert offers_similar(_row((), status="plateaued"), worked, None)
    relu = reference_calls(REFERENCE)
    assert relu == frozenset({"relu"})
    assert similarity(relu, reference_calls("import torch\ndef run(x):\n    return x.relu().sum()\n")) == 0.5
    assert reference_calls("def run(:") == frozenset()


# ---------------------------------------------------------------- the store


def test_an_older_store_opens_and_gains_the_notes_board(tmp_path):
    path = tmp_path / DB_NAME
    conn = sqlite3.connect(path)
    conn.executescript("BEGIN;" + MIGRATIONS[0] + ";" + MIGRATIONS[1] + ";PRAGMA user_version = 2;COMMIT;")
    conn.execute("INSERT INTO problems (key, name, subset, path) VALUES ('norm/a', 'a', 'norm', '/p')")
    conn.execute("INSERT INTO agents (name, kind, updated_at) VALUES ('llm-1', 'llm', 0)")
    conn.commit()
    assert "notes" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    store = RunStore(tmp_path)
    try:
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        store.redact = lambda text: text.replace("hunter2", "[redacted]")
        store.add_note("norm", "x" * 600, agent_id=1, problem_id=1)
        store.add_note("norm", "two-pass variance was slower; hunter2", agent_id=1, problem_id=1)
        store.add_note("gemm", "other family")
        notes = store.notes("norm")
        assert [len(n.text) for n in notes][0] == 500
        assert notes[1].text == "two-pass variance was slower; [redacted]"
        assert (notes[1].agent_name, notes[1].problem_key, notes[1].family) == ("llm-1", "norm/a", "norm")
        assert [n.text for n in store.notes("norm", limit=1)] == [notes[1].text]
        assert [n.family for n in store.notes()] == ["norm", "norm", "gemm"]
        assert store.notes("gemm")[0].agent_name == "" and store.notes("gemm")[0].agent_id is None
    finally:
        store.close()
    with RunReader(tmp_path) as reader:
        assert len(reader.notes("norm")) == 2


# ---------------------------------------------------------------- a real Fleet's Workbench, no run


def _open_fleet(tmp_path, problems: list[tuple[str, str, str]], languages=("pytorch",)) -> Fleet:
    root = tmp_path / "problems"
    for subset, name, reference in problems:
        write_rows_problem(root / subset / name, name, name, reference, rows=(64, 256))
    config = load_config(write_config(tmp_path / "fleet.toml", fleet={"languages": list(languages)}))
    fleet = Fleet(tmp_path / "run", config, [str(root)])
    fleet.open()
    return fleet


def _bench(fleet: Fleet, key: str, agent: str = "llm-1") -> Workbench:
    problem_id = next(pid for pid, k in fleet._keys.items() if k == key)
    agent_id = next(a.id for a in fleet.store.agents() if a.name == agent)
    return Workbench(fleet.bench_services(), AgentIdentity(agent_id, agent, "llm"), fleet.problems[problem_id],
                     problem_id, lambda: False)


def _record(fleet: Fleet, bench: Workbench, main: str, *, speedup: float, note: str = "") -> int:
    """A passing full attempt of ``bench``'s problem, recorded as the orchestrator records one."""
    as_dict = solution_to_dict(_solution(main))
    attempt_id = fleet.store.begin_attempt(bench.problem_id, bench.agent.id, as_dict, language="pytorch",
                                           note=note, content_hash=content_hash(as_dict))
    verdict = {"status": "PASSED", "workloads": [{"index": 0, "status": "PASSED", "timing": {"median_ms": 0.01}}]}
    record_result(fleet.store, attempt_id, status="PASSED", reason="", verdict=verdict, build=None,
                  figures=AttemptFigures({0: 0.01}, speedup, 0.7, 0.1), plateau_min_gain=0.01)
    return attempt_id


def test_the_workbench_refuses_a_language_the_run_does_not_allow_and_records_nothing(tmp_path):
    fleet = _open_fleet(tmp_path, [("cpu", "scaled_relu", REFERENCE)])
    try:
        bench = _bench(fleet, "cpu/scaled_relu")
        triton = _solution(spec=TRITON_SPEC)
        with pytest.raises(SpecError, match="language 'triton' is not allowed in this run; allowed: pytorch"):
            anyio.run(lambda: bench.evaluate(triton))
        with pytest.raises(SpecError, match="allowed: pytorch"):
            anyio.run(lambda: bench.build(triton))
        assert fleet.store.attempts() == [] and fleet.store.attempts_begun() == 0
        # Before a run gathered its facts, the Workbench still says what it knows: the device and the languages.
        assert bench.facts() == RunFacts(device="cpu", languages=("pytorch",))
    finally:
        fleet.store.close()


def test_notes_and_the_best_of_similar_problems_reach_another_problems_brief(tmp_path):
    other_reference = "import torch\n\ndef run(x, w):\n    return torch.softmax(x @ torch.diag(w), dim=-1)\n"
    cumsum_reference = "import torch\n\ndef run(x, w):\n    return torch.relu(x * w).cumsum(-1)\n"
    fleet = _open_fleet(tmp_path, [("cpu", "relu_a", REFERENCE), ("misc", "relu_b", REFERENCE),
                                   ("misc", "relu_c", cumsum_reference), ("misc", "softmax_d", other_reference)])
    try:
        a, b = _bench(fleet, "cpu/relu_a"), _bench(fleet, "misc/relu_b")
        c, d = _bench(fleet, "misc/relu_c"), _bench(fleet, "misc/softmax_d")
        fleet.store.set_problem_workloads(a.problem_id, [asdict(WorkloadInfo(0, "rows=64", 0.02)),
                                                         asdict(WorkloadInfo(1, "rows=256", 0.05))])
        slower = _record(fleet, a, GOOD_MAIN.replace("out.relu_()", "out.clamp_(min=0)"), speedup=1.2)
        best = _record(fleet, a, GOOD_MAIN, speedup=1.5, note="in place")
        assert fleet.store.problem(a.problem_id).best_attempt_id == best
        a.add_note("mul with out= then relu_ in place: no temporaries")

        # b shares a's op family (elementwise, from what both references call; not their folder); c only half of a's
        # reference operations (its cumsum makes it a reduction); d neither.
        assert [(n.agent_name, n.problem_key, n.text) for n in b.family_notes()] == [
            ("llm-1", "cpu/relu_a", "mul with out= then relu_ in place: no temporaries")]
        assert c.family_notes() == [] and d.family_notes() == []
        assert [(s.problem_key, s.attempt_id, s.speedup, s.why) for s in b.similar_bests()] == [
            ("cpu/relu_a", best, 1.5, "same op family elementwise")]
        assert [(s.problem_key, s.why) for s in c.similar_bests()] == [
            ("cpu/relu_a", "similar reference operations (0.50)")]
        assert d.similar_bests() == []

        # The attempt tool reads the best of a similar problem, never another of its attempts.
        toolbox = Toolbox(b, Workspace(), author="llm-1")
        read = anyio.run(lambda: toolbox.call("attempt", {"id": best}))
        assert read.failure is None
        assert read.text.startswith(f"attempt {best} by agent {a.agent.id}, language pytorch, of the similar "
                                    "problem cpu/relu_a (its best)")
        assert "note: in place" in read.text and f"attempt {best}: PASSED, speedup 1.5x" in read.text
        assert "out.relu_()" in read.text and "0 | rows=64 | PASSED | 0.01 ms | 0.02 ms | - | " in read.text
        refused = anyio.run(lambda: toolbox.call("attempt", {"id": slower}))
        assert refused.failure and f"no attempt {slower} to read" in refused.text
        assert anyio.run(lambda: Toolbox(d, Workspace(), author="x").call("attempt", {"id": best})).failure

        # The brief of b (opening a problem no agent worked on yet) lists both.
        brief = problem_brief(b.problem, b.row(), None, b.attempts(), facts=b.facts(), similar=b.similar_bests(),
                              notes=b.family_notes(), plateau_attempts=12)
        assert "## Best solutions of similar problems in this run" in brief
        assert f"- cpu/relu_a (same op family elementwise): attempt {best}, pytorch, speedup 1.5x, SOL 0.7" in brief
        assert "## Notes board of the op family elementwise (newest last)" in brief
        assert "- llm-1 on cpu/relu_a: mul with out= then relu_ in place: no temporaries" in brief
        assert "languages this run allows: pytorch" in brief
        brief_d = problem_brief(d.problem, d.row(), None, d.attempts(), notes=d.family_notes(),
                                similar=d.similar_bests())
        assert "no temporaries" not in brief_d and "similar problems" not in brief_d and "(no notes yet)" in brief_d
    finally:
        fleet.store.close()


# ---------------------------------------------------------------- real fleet runs


def _tool_results(server, request: int) -> list[str]:
    """The tool results the model got back with the request of index ``request`` (those of the answer before)."""
    messages = server.requests[request]["body"]["messages"]
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    return [m["content"] for m in messages[last + 1:] if m["role"] == "tool"]


def test_a_language_the_run_does_not_allow_is_refused_and_never_recorded(tmp_path):
    script = [
        tools(call("set_spec", {"language": "triton", "entry_point": "main.py::run"})),
        tools(call("write_file", {"path": "solution.json", "content": '{"spec": {"languages": ["triton"], '
                                                                      '"entry_point": "main.py::run"}}'}),
              call("write_file", {"path": "main.py", "content": GOOD_MAIN}), call("evaluate"), call("build")),
        tools(call("set_spec", {"language": "pytorch", "entry_point": "main.py::run"}), call("evaluate")),
    ]
    with ScriptedServer(script) as server:
        run_dir = run_fleet(tmp_path, server.base_url, lambda s: len(agent_attempts(s)) >= 1)
        (set_spec,) = _tool_results(server, 1)
        assert set_spec == "error: language 'triton' is not allowed in this run; allowed: pytorch"
        spec_file, main, evaluate, build = _tool_results(server, 2)
        assert spec_file.startswith("solution.json: spec set") and main.startswith("wrote main.py")
        assert evaluate == build == "error: language 'triton' is not allowed in this run; allowed: pytorch"
        # The brief said which languages the run allows, and that the device is the CPU.
        brief = server.requests[0]["body"]["messages"][1]["content"]
        assert "- languages this run allows: pytorch" in brief and "- device: the CPU (" in brief
    with RunReader(run_dir) as reader:
        attempts = reader.attempts()
        assert [a.language for a in attempts] == ["pytorch", "pytorch"]  # the seed, then the pytorch candidate
        assert attempts[1].status == "PASSED" and attempts[1].agent_id is not None
        assert not any("triton" in str(a.solution.get("spec")) for a in attempts)
        assert any("malformed tool call: set_spec: language 'triton'" in e.message for e in reader.events(kind="log"))


def test_the_attempt_and_note_tools_in_a_run(tmp_path):
    long_note = "vectorised loads did not help at 64 columns; " * 20
    script = [
        tools(call("attempt", {"id": 1}), call("attempt", {"id": 1, "path": "main.py"}),
              call("attempt", {"id": 99}), call("attempt", {"id": "1"})),
        tools(call("set_spec", {"language": "pytorch", "entry_point": "main.py::run"}),
              call("write_file", {"path": "main.py", "content": GOOD_MAIN}), call("evaluate")),
        tools(call("attempt", {"id": 2}), call("note", {"text": long_note}), call("note", {"text": "relu_ in place"}),
              call("note", {"text": "out= avoids a temporary"}), call("note", {"text": "one too many"})),
        tools(call("finish", {"note": "done"})),
    ]
    with ScriptedServer(script) as server:
        run_dir = run_fleet(tmp_path, server.base_url, lambda s: len(server.requests) >= 5 and len(s.notes()) == 3)
        seed, seed_main, missing, bad_id = _tool_results(server, 1)
        assert seed.startswith("attempt 1 by the seed, language pytorch")
        assert "attempt 1: PASSED" in seed and "workload | axes | status" in seed and "torch.relu(x * w)" in seed
        assert seed_main.startswith("attempt 1, main.py:\n```python path=main.py\n") and REFERENCE.strip() in seed_main
        assert missing.startswith("error: no attempt 99 to read") and bad_id == "error: id must be an attempt number"
        own, cut, second, third, refused = _tool_results(server, 3)
        assert own.startswith("attempt 2 by agent 1, language pytorch, parent attempt 1")
        assert "diff to its parent:" in own and "+    out.relu_()" in own and "attempt 2: PASSED" in own
        assert cut == "noted on the board of your op family (cut to 500 characters)"
        assert second == third == "noted on the board of your op family"
        assert refused == "error: at most 3 notes a turn"
        # The next turn's brief shows the board, the agent's own notes included.
        brief = server.requests[4]["body"]["messages"][1]["content"]
        assert "## Notes board of the op family elementwise (newest last)" in brief
        assert "- llm-1 on cpu/scaled_relu: relu_ in place" in brief
    with RunReader(run_dir) as reader:
        notes = reader.notes("elementwise")
        assert [len(n.text) for n in notes] == [500, len("relu_ in place"), len("out= avoids a temporary")]
        assert {(n.agent_name, n.problem_key) for n in notes} == {("llm-1", "cpu/scaled_relu")}
        assert SECRET not in "".join(n.text for n in notes)
