"""A run over 50 generated problems on the CPU, as a run over SOL-ExecBench's 235 is on a GPU: some problems lack
their safetensors blobs, some are too large for the CPU; two LLM agents driven by the scripted OpenAI-compatible
server hand in a correct candidate on every turn. No turn is ever spent on a problem that cannot run, the agents
start on the first prepared problems while the rest are still prepared, the run stops within its wall budget, and
a second run on the same problems takes every T_b from the cache instead of measuring it again."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest
from rows_problem import write_rows_problem

from core.config import load_config
from core.evaluate.local import LocalEvaluator
from core.fleet.orchestrator import Fleet
from core.store import RunReader

pytestmark = pytest.mark.slow

RUNNABLE, MISSING_BLOBS, TOO_LARGE = 44, 3, 3
WALL_S, SECOND_WALL_S = 25.0, 10.0  # the second run only needs to prepare from the cache
REFERENCE = "import torch\n\ndef run(x, w):\n    return torch.relu(x * w)\n"
GOOD_MAIN = "import torch\n\n\ndef run(x, w, out):\n    torch.mul(x, w, out=out)\n    out.relu_()\n"
KEY_ENV = "KF_MANY_PROBLEMS_KEY"


def write_many(root: Path) -> dict[str, str]:
    """The problems under ``root``: name -> what it is ("runnable", "missing blobs", "too large")."""
    kinds = {}
    for n in range(RUNNABLE):  # distinct contents: each its own cache entry
        write_rows_problem(root / "gen" / f"relu_{n:02d}", f"relu_{n:02d}", "x * w, then ReLU", REFERENCE,
                           rows=(16 + n,))
        kinds[f"relu_{n:02d}"] = "runnable"
    for n in range(MISSING_BLOBS):
        folder = write_rows_problem(root / "gen" / f"blobless_{n}", f"blobless_{n}", "x * w, then ReLU", REFERENCE,
                                    rows=(32,))
        workload = json.loads((folder / "workload.jsonl").read_text())
        workload["inputs"]["x"] = {"type": "safetensors", "path": "blobs/x.safetensors", "tensor_key": "x"}
        (folder / "workload.jsonl").write_text(json.dumps(workload) + "\n")
        kinds[f"blobless_{n}"] = "missing blobs"
    for n in range(TOO_LARGE):  # 131072 rows of 64 floats in and out: 64 MiB, over the CPU's 16 MiB cap
        write_rows_problem(root / "gen" / f"huge_{n}", f"huge_{n}", "x * w, then ReLU", REFERENCE,
                           rows=((1 << 17) + n,))
        kinds[f"huge_{n}"] = "too large"
    return kinds


def write_config(path: Path, base_url: str, wall_s: float) -> Path:
    sections = {
        "llm": {"base_url": base_url, "model": "scripted-model", "api_key_env": KEY_ENV, "timeout_s": 10.0,
                "max_retries": 2, "context_tokens": 32768},
        "fleet": {"device": "cpu", "tuner_agents": 0, "llm_agents": 2, "languages": ["pytorch"]},
        "gpus": {"spare": False, "workload_timeout_s": 60.0},
        "planner": {"tick_s": 0.2, "plateau_attempts": 2},
        "evaluation": {"rounds": 1, "timing": "quick", "compile_baseline": False, "verify_rounds": 2},
        "budgets": {"run_wall_s": wall_s},
    }
    path.write_text("\n".join(f"[{section}]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in values.items())
                              for section, values in sections.items()) + "\n")
    return path


def run_once(run_dir: Path, config_path: Path, problems: Path) -> tuple[str, float]:
    # Without the machine-state probe: on a loaded test machine it could (rightly) measure a T_b once more.
    fleet = Fleet(run_dir, load_config(config_path), [str(problems)],
                  evaluator_factory=lambda _: LocalEvaluator("cpu", spare=False, workload_timeout_s=60,
                                                             readable=[str(problems)], machine_check=False))
    began = time.monotonic()
    state = anyio.run(fleet.run)
    return state, time.monotonic() - began


def test_fifty_problems_agents_never_parked_and_a_second_run_measures_nothing(tmp_path, monkeypatch):
    from llm_scripted_server import ScriptedServer, call, tools

    monkeypatch.setenv(KEY_ENV, "sk-many-problems")
    kinds = write_many(tmp_path / "problems")
    hand_in = tools(call("set_spec", {"language": "pytorch", "entry_point": "main.py::run"}),
                    call("write_file", {"path": "main.py", "content": GOOD_MAIN}),
                    call("finish", {"note": "the reference, destination-passing"}))
    with ScriptedServer([], forever=hand_in) as server:
        config_path = write_config(tmp_path / "fleet.toml", server.base_url, WALL_S)
        state, took_s = run_once(tmp_path / "run1", config_path, tmp_path / "problems")
        first_request = server.requests[0]["at"] if server.requests else None
        second = write_config(tmp_path / "second.toml", server.base_url, SECOND_WALL_S)
        _, took2_s = run_once(tmp_path / "run2", second, tmp_path / "problems")
    assert state in ("stopped", "finished")
    assert took_s < WALL_S + 30, f"the run took {took_s:.0f} s for a {WALL_S:.0f} s budget"
    assert took2_s < SECOND_WALL_S + 30

    with RunReader(tmp_path / "run1") as reader:
        rows = {p.name: p for p in reader.problems()}
        events = reader.events(limit=100_000)
        attempts = reader.attempts()
    unrunnable = {name for name, kind in kinds.items() if kind != "runnable"}
    assert {name for name, row in rows.items() if row.status == "unrunnable"} == unrunnable
    blocked_ids = {rows[name].id for name in unrunnable}
    # No turn, no attempt, no assignment on a problem that cannot run.
    assert not [a for a in attempts if a.problem_id in blocked_ids]
    assert not [e for e in events if e.problem_id in blocked_ids and e.agent_id is not None]
    assert not [e for e in events if e.problem_id in blocked_ids and "preparing" in e.message]  # nor prepared
    assert all(not rows[name].workloads for name in unrunnable)
    said = {e.problem_id: e.message for e in events if e.message.startswith("unrunnable:")}
    assert all("safetensors" in said[rows[f"blobless_{n}"].id] or "blob" in said[rows[f"blobless_{n}"].id]
               for n in range(MISSING_BLOBS)), said
    assert all("over 16 MiB" in said[rows[f"huge_{n}"].id] for n in range(TOO_LARGE)), said

    # The agents started on the first prepared problems while others were still being prepared.
    agent_done = sorted(a.created_at for a in attempts if a.agent_id is not None)
    assert agent_done, "no agent attempt at all"
    measured = sorted(e.ts for e in events if e.message.startswith("baseline "))
    assert len(measured) >= 10
    assert agent_done[0] < measured[-1], "the first agent attempt waited for the whole preparation"
    assert first_request is not None
    prepared_logs = [e.message for e in events if e.message.startswith("prepared ") and " left (" in e.message]
    assert prepared_logs, "no preparation estimate per subset was logged"
    # The unrunnable problems are not in the count: it is of the runnable ones.
    assert all(f"/{RUNNABLE} problems" in m for m in prepared_logs), prepared_logs[:3]

    # A second run of the same problems measures no T_b again: every prepared problem's baseline came from the cache.
    with RunReader(tmp_path / "run2") as reader:
        lines = [e.message for e in reader.events(limit=100_000) if e.message.startswith("baseline ")]
        prepared_first = {row.key for row in rows.values() if row.workloads}
        keys = {p.id: p.key for p in reader.problems()}
        by_problem = {keys[e.problem_id]: e.message for e in reader.events(limit=100_000)
                      if e.message.startswith("baseline ") and e.problem_id is not None}
    assert lines
    again = {key: line for key, line in by_problem.items() if key in prepared_first
             and not line.startswith("baseline from the cache for")}
    assert not again, again
