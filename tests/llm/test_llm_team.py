"""Searching like a team, end to end on the CPU: one LLM agent (the real client, a scripted server) writes two shape
specialists in two turns; both stay on the problem's frontier; the run composes them into one solution that sends
each shape to its leader, evaluates it like any candidate, and it becomes the best; the export of that composite
loads and passes `kernelfleet eval`. The third turn starts from the member the frontier rule picks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from llm_fleet_helpers import drive, write_config
from llm_scripted_server import ScriptedServer, call, text, tools
from rows_problem import write_rows_problem

from core.config import load_config
from core.fleet.orchestrator import Fleet
from core.report.export import export_best
from core.solution.io import load_solution
from core.store import RunReader

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = "import torch\n\ndef run(x, w):\n    return torch.relu(x * w)\n"
ROWS = (8, 256)

# Slow everywhere: one small op per row.
SEED = '''import torch


def run(x, w, out):
    for i in range(x.shape[0]):
        torch.mul(x[i], w, out=out[i])
    out.relu_()
'''

# Fast on few rows; on many rows a Python loop over chunks of 4 rows, on purpose (still faster than the seed).
FEW_ROWS = '''import torch


def run(x, w, out):
    if x.shape[0] <= 64:
        torch.mul(x, w, out=out)
        out.relu_()
        return
    for i in range(0, x.shape[0], 4):
        torch.mul(x[i:i + 4], w, out=out[i:i + 4])
    out.relu_()
'''

# Far faster than the others on many rows, yet 10 redundant passes there keep it well under T_b; on few rows 80.
MANY_ROWS = '''import torch


def run(x, w, out):
    for _ in range(80 if x.shape[0] <= 64 else 10):
        torch.mul(x, w, out=out)
    torch.mul(x, w, out=out)
    out.relu_()
'''


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("KF_TEST_LLM_KEY", "sk-test-team")
    monkeypatch.setattr("core.llm.client.BACKOFF_BASE_S", 0.05)


def write_problem(root: Path) -> Path:
    folder = write_rows_problem(root / "cpu" / "relu_rows", "relu_rows", "x * w, then ReLU", REFERENCE, rows=ROWS)
    seed = {"name": "seed_loop", "definition": "relu_rows", "author": "tests",
            "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run",
                     "destination_passing_style": True},
            "sources": [{"path": "main.py", "content": SEED}]}
    (folder / "solutions").mkdir()
    (folder / "solutions" / "seed.json").write_text(json.dumps(seed))
    return root


def _brief(request) -> str:
    return request["body"]["messages"][1]["content"]


def test_two_specialists_make_a_composite_that_beats_both_and_exports(tmp_path):
    script = [
        tools(call("set_spec", {"language": "pytorch", "entry_point": "main.py::run",
                                "destination_passing_style": True}),
              call("write_file", {"path": "main.py", "content": FEW_ROWS}),
              call("finish", {"note": "few rows: one vectorised pass"})),
        tools(call("write_file", {"path": "main.py", "content": MANY_ROWS}),
              call("finish", {"note": "many rows: whole-tensor passes"})),
        text("FINISH: nothing more for now"),
    ]

    def composite_done(store) -> bool:
        return len(server.requests) >= 3 and any(a.composite and a.state == "done" for a in store.attempts())

    problems = write_problem(tmp_path / "problems")
    with ScriptedServer(script) as server:
        # Default timing (not quick): medians of many calls, so a busy machine cannot reorder the shapes' leaders.
        config = load_config(write_config(tmp_path / "fleet.toml", llm={"base_url": server.base_url},
                                          evaluation={"timing": "default"}))
        run_dir = drive(Fleet(tmp_path / "run", config, [str(problems)]), composite_done, timeout_s=120)

    with RunReader(run_dir) as reader:
        attempts = [a for a in reader.attempts() if a.state == "done"]
        seed, few, many = [a for a in attempts if not a.composite][:3]
        composite = next(a for a in attempts if a.composite)
        row = reader.problems()[0]
        events = [e.message for e in reader.events(kind="attempt")]
        out = tmp_path / "export"
        (exported,) = export_best(reader, out)
    assert seed.note == "seed" and [few.note, many.note] == ["few rows: one vectorised pass",
                                                             "many rows: whole-tensor passes"]
    assert all(a.passed for a in (seed, few, many, composite)), [(a.id, a.status, a.reason) for a in attempts]
    times = {a.id: a.times_ms for a in (seed, few, many, composite)}
    # Each specialist is the fastest on its own shape, by far: both stay on the frontier, and the seed does not.
    assert [(m.attempt_id, m.leads) for m in row.frontier] == [(few.id, (0,)), (many.id, (1,))], (row.frontier, times)
    # The composite: no agent's, its members as parents (the first as parent_id), the frontier in its note.
    assert composite.agent_id is None and composite.parents == (few.id, many.id) and composite.parent_id == few.id
    assert composite.note == f"composite: attempt {few.id} on workload 0; attempt {many.id} on workload 1"
    assert any(m.startswith(f"attempt {composite.id} by composite: PASSED") for m in events), events
    # It runs each member where it leads: on each shape it is far faster than the member that is slow there,
    # and its geomean speedup beats both members'; it is the problem's best.
    assert composite.times_ms[0] < many.times_ms[0] / 3 and composite.times_ms[1] < few.times_ms[1] / 2, times
    assert composite.speedup > few.speedup and composite.speedup > many.speedup, \
        (composite.speedup, few.speedup, many.speedup)
    assert row.best_attempt_id == composite.id

    # Turn 2 started from the only member; turn 3 from the member leading the workload with the least speedup
    # (T_sol is unknown on the CPU): the many-rows specialist, whose redundant passes keep it under T_b.
    second, third = _brief(server.requests[1]), _brief(server.requests[2])
    assert f"Your workspace holds attempt {few.id} (the current best); it leads workload 0, 1" in second
    start = third[third.find("## Your starting point"):][:600]
    assert f"Your workspace holds attempt {many.id} (not the current best); it leads workload 1" in third, \
        (start, times, [(a.id, a.speedup) for a in (seed, few, many, composite)])
    assert "least speedup" in third and f"- attempt {few.id} leads workload 0" in third
    assert "def run(x, w, out):\n    for _ in range(80" in third  # the workspace holds the specialist's sources

    # The export is the composite as one solution.json, which loads and passes `kernelfleet eval` on the CPU.
    solution = load_solution(exported)
    assert solution.name.startswith("relu_rows_composite_") and {"main.py", f"attempt_{few.id}/main.py",
                                                                 f"attempt_{many.id}/main.py"} <= set(solution.paths)
    env = {**os.environ, "KERNELFLEET_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, "-m", "cli.main", "eval", str(problems / "cpu" / "relu_rows"),
                             "--solution", str(exported), "--device", "cpu", "--quick-timing",
                             "--compile-timeout", "0"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("PASSED 2/2 workloads"), result.stdout
