"""`kernelfleet problems check` as a user runs it: a real subprocess, its output and exit status."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("KERNELFLEET_SOL_EXECBENCH", ROOT.parent / "shared" / "sol-execbench")) / "benchmark"


def kernelfleet(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "cli.main", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "COLUMNS": "120"})


def test_valid_and_invalid_problems(make_problem, tmp_path):
    make_problem(name="good")
    make_problem(name="bad", mutate_definition=lambda d: d["inputs"]["x"].update(dtype="float12"))
    result = kernelfleet("problems", "check", tmp_path)
    assert result.returncode == 1
    bad = tmp_path / "norm" / "bad" / "definition.json"
    assert f"error: {bad}: inputs.x.dtype: unknown dtype 'float12'" in result.stderr
    assert result.stdout.strip().splitlines()[-1] == "1 problems loaded, 3 workloads runnable, 0 unavailable"


def test_run_reference_on_cpu(make_problem, tmp_path):
    make_problem(name="good")
    result = kernelfleet("problems", "check", tmp_path, "--run-reference", "--device", "cpu", "--strict")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "references on cpu: 1 of 1 ran and matched the definition" in result.stdout


def test_run_reference_shape_mismatch_fails(make_problem, tmp_path):
    make_problem(name="wrong", mutate_definition=lambda d: d["outputs"]["out"].update(shape=["tokens"]))
    result = kernelfleet("problems", "check", tmp_path, "--run-reference")
    assert result.returncode == 1
    assert "norm/wrong: output shape/dtype mismatch: out: shape [4, 64], expected [4]" in result.stdout


def test_missing_path_is_one_clear_error(tmp_path):
    result = kernelfleet("problems", "check", tmp_path / "nope")
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {tmp_path / 'nope'}: no such file or directory"


def test_our_problem_set_loads_and_every_reference_runs_on_cpu():
    result = kernelfleet("problems", "check", ROOT / "problems", "--run-reference", "--device", "cpu", "--strict")
    assert result.returncode == 0, result.stdout + result.stderr
    loaded = int(result.stdout.strip().splitlines()[-1].split()[0])
    assert loaded >= 16
    assert f"references on cpu: {loaded} of {loaded} ran" in result.stdout


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared SOL-ExecBench data is not beside this checkout")
def test_all_235_shared_problems_load():
    result = kernelfleet("problems", "check", SHARED)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "235 problems loaded, 3653 workloads runnable, 304 unavailable"
    assert "unavailable in FlashInfer-Bench: 304 workloads, safetensors blob not found" in result.stdout


def test_folder_without_problems_is_an_error(tmp_path):
    result = kernelfleet("problems", "check", tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: {tmp_path}: not a problem folder (nor a folder of them): "
                                     "no definition.json in it or beneath it")
