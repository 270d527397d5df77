"""[cluster] ray_address and `kernelfleet run --ray`: checked values, one `error:` line and exit 2 for a missing Ray
package or an unreachable head (before any run folder is made), the address kept with the run for --resume, and
Ray never imported by a run without one."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from cluster_problems import REFERENCE_RELU
from rows_problem import write_rows_problem

from core.config import ConfigError, config_to_dict, parse_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("address", ["", "local", "auto", "10.0.0.7:6379", "gpu-head.lab:6379", "[::1]:6380"])
def test_good_addresses(address):
    cfg = parse_config({"cluster": {"ray_address": address}})
    assert cfg.cluster.ray_address == address
    assert parse_config(json.loads(json.dumps(config_to_dict(cfg)))) == cfg


@pytest.mark.parametrize("address, says", [
    ("gpu-head", "expected \"\" (one host, no Ray), \"local\", \"auto\" or HOST:PORT, got 'gpu-head'"),
    ("gpu-head:0", "got 'gpu-head:0'"),
    ("http://gpu-head:6379", "got 'http://gpu-head:6379'"),
    ("ray://gpu-head:10001", "is a Ray Client address, which kernelfleet does not use"),
])
def test_bad_addresses_are_one_clear_error(address, says):
    with pytest.raises(ConfigError) as info:
        parse_config({"cluster": {"ray_address": address}}, "fleet.toml")
    assert str(info.value).startswith("fleet.toml: cluster.ray_address: ") and says in str(info.value)
    with pytest.raises(ConfigError, match="cluster.ray_address: must be a string"):
        parse_config({"cluster": {"ray_address": 6379}})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(*args: str | Path, hide_ray: Path | None = None) -> subprocess.CompletedProcess:
    env = None
    if hide_ray is not None:  # a Python where `import ray` fails, as where the extra is not installed
        (hide_ray / "ray").mkdir(parents=True, exist_ok=True)
        (hide_ray / "ray" / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
        import os

        env = {**os.environ, "PYTHONPATH": str(hide_ray)}
    return subprocess.run([sys.executable, "-m", "cli.main", "run", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def _one_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


@pytest.mark.slow
def test_ray_missing_is_one_error_naming_the_extra(tmp_path):
    run_dir = tmp_path / "run"
    line = _one_error(_run("--ray", "127.0.0.1:6379", "--headless", "--run-dir", run_dir, hide_ray=tmp_path / "py"))
    assert "install kernelfleet[cluster]" in line
    assert not run_dir.exists()


@pytest.mark.slow
def test_unreachable_head_is_one_error(tmp_path):
    port = _closed_port()
    run_dir = tmp_path / "run"
    line = _one_error(_run("--ray", f"127.0.0.1:{port}", "--headless", "--run-dir", run_dir))
    assert line.startswith(f"error: cannot reach the Ray head at 127.0.0.1:{port}: ")
    assert not run_dir.exists()
    config = tmp_path / "fleet.toml"
    config.write_text(f'[cluster]\nray_address = "127.0.0.1:{port}"\n')
    assert _one_error(_run("--config", config, "--headless", "--run-dir", run_dir)) == line


@pytest.mark.slow
def test_bad_ray_option_and_resume_with_ray_are_errors(tmp_path):
    assert "--ray: expected" in _one_error(_run("--ray", "gpu-head", "--headless", "--run-dir", tmp_path / "r"))
    line = _one_error(_run("--resume", tmp_path / "r", "--ray", "auto", "--headless"))
    assert "its Ray address and budgets too" in line


@pytest.mark.slow
def test_resume_uses_the_stored_ray_address(tmp_path):
    from core.fleet.orchestrator import Fleet

    write_rows_problem(tmp_path / "problems" / "cpu" / "scaled_relu", "scaled_relu", "x", REFERENCE_RELU, rows=(8,))
    config = parse_config({"fleet": {"device": "cpu", "languages": ["pytorch"]},
                           "cluster": {"ray_address": f"127.0.0.1:{_closed_port()}"}})
    fleet = Fleet(tmp_path / "run", config, [str(tmp_path / "problems")])
    fleet.open()  # the run recorded with its config, as a start that stopped at once leaves it
    fleet.store.close()
    line = _one_error(_run("--resume", tmp_path / "run", "--headless", hide_ray=tmp_path / "py"))
    assert "install kernelfleet[cluster]" in line


@pytest.mark.slow
def test_a_run_without_a_ray_address_never_imports_ray():
    script = ("import sys\n"
              "import cli.main, cli.run_cmd, core.fleet.orchestrator, core.cluster, core.cluster.gpu_actor\n"
              "from core.cluster import RayEvaluator\n"
              "RayEvaluator('127.0.0.1:6379', 'cpu', readable=['/tmp'])\n"
              "print('ray' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]
