"""A new agent kind is one module (``replay_kind``) and one registry line: registered here, with nothing of the
engine touched, a real short CPU run gives its agent turns and records its attempts as that kind's."""

from __future__ import annotations

import json
from dataclasses import replace

import anyio
import pytest
import replay_kind
from fleet_problems import write_config, write_problems

from core.config import load_config
from core.fleet import kinds
from core.fleet.orchestrator import Fleet
from core.store import RunReader


@pytest.fixture
def replay_registered():
    kinds.register(replay_kind.KIND)  # the one registry line
    yield
    kinds.unregister(replay_kind.KIND.name)


@pytest.mark.slow
def test_a_registered_kind_runs_in_a_real_fleet_and_its_attempts_are_its_own(tmp_path, replay_registered):
    write_problems(tmp_path / "problems", names=("scaled_relu",))
    config = load_config(write_config(tmp_path / "fleet.toml", budgets={"run_wall_s": 240}))
    # The config's check asks for a tuner or LLM agent (core.config knows those two); this run has neither.
    config = replace(config, fleet=replace(config.fleet, tuner_agents=0, llm_agents=0))
    fleet = Fleet(tmp_path / "run", config, [str(tmp_path / "problems")])
    assert "replay" in fleet.kinds
    state = anyio.run(fleet.run)
    assert state == "finished", fleet.stop_reason

    with RunReader(tmp_path / "run") as reader:
        agents = {a.name: a for a in reader.agents()}
        assert set(agents) == {"replay-1"}, agents  # no tuner, and no LLM agent: the config asks for none
        replay = agents["replay-1"]
        assert (replay.kind, replay.model, replay.profile) == ("replay", "replayed scaled_relu", "")
        mine = [a for a in reader.attempts() if a.agent_id == replay.id]
        assert len(mine) == 1, mine  # replayed once: its second turn found the same content and was done
        attempt = mine[0]
        assert attempt.state == "done" and attempt.passed and attempt.note == replay_kind.NOTE
        solution = attempt.solution if isinstance(attempt.solution, dict) else json.loads(attempt.solution)
        tunables = next(s["content"] for s in solution["sources"] if s["path"] == "tunables.json")
        assert json.loads(tunables)["values"]["CHUNK"] == replay_kind.CHUNK
        seed = next(a for a in reader.attempts() if a.note == "seed")
        assert attempt.parent_id == seed.id and seed.agent_id is None
        logs = [e.message for e in reader.events(kind="log") if e.agent_id == replay.id]
        assert f"replayed: attempt {attempt.id} PASSED" in logs, logs
