"""Host backends are a registry (core.evaluate.hosts): a new one is one module (tests/support/host_backend_example.py)
plus one ``register`` line, and a run whose config names it evaluates every attempt through it; a name no backend
has is one config error."""

from __future__ import annotations

import tomllib

import anyio
import pytest
from fleet_problems import write_config, write_problems
from host_backend_example import NODE

from core.config import ConfigError, load_config, parse_config
from core.evaluate import hosts
from core.fleet.orchestrator import Fleet
from core.store import RunReader


@pytest.fixture
def example_backend():
    hosts.register(hosts.HostBackend("example", "host_backend_example:from_options"))
    yield
    hosts._BACKENDS.pop("example")


def test_the_defaults_pick_local_or_ray_by_the_clusters_address():
    assert hosts.backend_named("").name == "local"
    assert hosts.backend_named("", "auto").name == "ray"
    assert not hosts.backend_named("ray", "auto").local_devices
    with pytest.raises(ValueError, match="'nope' is not a host backend; known: local, ray"):
        hosts.backend_named("nope")
    with pytest.raises(ValueError, match="needs \\[cluster\\] ray_address"):
        hosts.backend_named("ray")


def test_the_config_refuses_a_backend_nobody_registered():
    with pytest.raises(ConfigError, match="cluster.backend: 'example' is not a host backend"):
        parse_config(tomllib.loads('[cluster]\nbackend = "example"\n'), "fleet.toml")


@pytest.mark.slow
def test_a_run_evaluates_through_the_backend_its_config_names(tmp_path, example_backend):
    write_problems(tmp_path / "problems", names=("scaled_relu",))
    config = load_config(write_config(tmp_path / "fleet.toml", fleet={"tuner_agents": 1},
                                      cluster={"backend": "example"}, budgets={"run_wall_s": 240}))
    fleet = Fleet(tmp_path / "run", config, [str(tmp_path / "problems")])
    assert anyio.run(fleet.run) == "finished", fleet.stop_reason
    with RunReader(tmp_path / "run") as reader:
        attempts = reader.attempts(state="done")
        assert len(attempts) >= 4 and {a.node for a in attempts} == {NODE}, [(a.id, a.node) for a in attempts]
