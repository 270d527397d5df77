"""A problem none of whose workloads can run on the run's machine (here: every workload over the CPU's size cap) is
known at the start: marked "unrunnable" with why, never prepared (no T_b, no seed), never given an agent, left out
of the preparation count; the other problems run and the run ends by itself. A real CPU run."""

from __future__ import annotations

import anyio
import pytest
from fleet_problems import REFERENCES, write_config, write_problems
from rows_problem import write_rows_problem

from core.config import load_config
from core.fleet.orchestrator import Fleet
from core.store import RunReader

pytestmark = pytest.mark.slow


def test_a_problem_that_cannot_run_here_is_never_prepared_or_assigned(tmp_path):
    write_problems(tmp_path / "problems", names=("scaled_relu",))
    description, reference = REFERENCES["row_rmsnorm"]
    # 131072 rows of 64 floats in and out: 64 MiB, over the CPU's 16 MiB cap, on its only workload.
    write_rows_problem(tmp_path / "problems" / "cpu" / "huge_rmsnorm", "huge_rmsnorm", description, reference,
                       rows=(1 << 17,))
    config = load_config(write_config(tmp_path / "fleet.toml", budgets={"run_wall_s": 240}))
    fleet = Fleet(tmp_path / "run", config, [str(tmp_path / "problems")])
    assert anyio.run(fleet.run) == "finished", fleet.stop_reason

    with RunReader(tmp_path / "run") as reader:
        rows = {p.name: p for p in reader.problems()}
        huge, relu = rows["huge_rmsnorm"], rows["scaled_relu"]
        assert huge.status == "unrunnable" and huge.attempts == 0 and not huge.workloads
        assert reader.attempts(huge.id) == []  # not even a seed
        assert relu.attempts >= 4 and relu.best_speedup
        events = reader.events(limit=10_000)
        said = [e.message for e in events if e.problem_id == huge.id]
        assert any(m.startswith("unrunnable: no workload can run here (skipped on the cpu: over 16 MiB")
                   for m in said), said
        assert not any(e.agent_id is not None for e in events if e.problem_id == huge.id)
        assert not any("preparing" in m for m in said)
        lines = [e.message for e in events]
        assert not any(m.startswith("prepared ") and "/2 problems" in m for m in lines), lines
