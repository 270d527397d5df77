"""`kernelfleet cache export/import/show`: T_b measured by a real CPU pool and T_sol counted for an H200 go into one
file; on an empty cache, the import makes the next T_b a cache hit (nothing measured) and the T_sol a lookup; a
file that is not a bundle, or is tampered with, gets one `error:` line and exit 2, and changes nothing."""

from __future__ import annotations

import gzip
import json

import anyio
import pytest
from rows_problem import write_rows_problem

from cli.main import main
from core.evaluate.pool import EvaluationPool
from core.evaluate.timing_policy import QUICK_TIMING
from core.problem import load_problems
from core.roofline.sol_cache import SolCache, cached_sol, counted_sol, sol_key

REFERENCE = "import torch\n\ndef run(x, w):\n    return torch.relu(x * w)\n"
GPU = "NVIDIA H200"


def measure(problem):
    async def go():
        async with EvaluationPool("cpu", spare=False, workload_timeout_s=60, machine_check=False) as pool:
            return await pool.baseline(problem, timing=QUICK_TIMING, compile_timeout_s=0.0)
    return anyio.run(go)


@pytest.fixture
def problem(tmp_path):
    folder = write_rows_problem(tmp_path / "problems" / "relu", "relu", "x * w, then ReLU", REFERENCE,
                                # Rows enough that a busy machine's noise cannot make one T_b distrusted (32 rows
                                # once came out too erratic or out of line on a loaded CI machine).
                                rows=(512, 2048))
    return load_problems([str(folder)]).problems[0]


@pytest.mark.slow
def test_export_then_import_into_an_empty_cache_measures_nothing(tmp_path, monkeypatch, capsys, problem):
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache-a"))
    first = measure(problem)
    assert [b.ok for b in first] == [True, True] and not any(b.cached for b in first), \
        [(b.error, b.unreliable) for b in first]
    sol = counted_sol(problem, [0, 1], "cuda", GPU)
    assert set(sol.t_sol_ms) == {0, 1}

    bundle = tmp_path / "h200.kfm"
    assert main(["cache", "export", str(bundle)]) == 0
    said = capsys.readouterr().out
    assert "T_b of 2 workloads (1 problem-GPU pairs), T_sol of 2 workloads (1)" in said, said

    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache-b"))
    assert cached_sol(problem, [0, 1], "cuda", GPU) is None
    assert main(["cache", "import", str(bundle)]) == 0
    assert "imported T_b of 2 workloads" in capsys.readouterr().out
    again = measure(problem)
    assert all(b.cached for b in again)
    assert [b.baseline_ms for b in again] == [b.baseline_ms for b in first]
    assert cached_sol(problem, [0, 1], "cuda", GPU).t_sol_ms == sol.t_sol_ms

    assert main(["cache", "show"]) == 0
    shown = capsys.readouterr().out
    assert "cpu: T_b of 2 workloads, T_sol of 0" in shown and f"{GPU}: T_b of 0 workloads, T_sol of 2" in shown
    # A second import adds nothing: what is here is kept.
    assert main(["cache", "import", str(bundle)]) == 0
    assert "imported T_b of 0 workloads (0 problem-GPU pairs), T_sol of 0 workloads (0)" in capsys.readouterr().out


def test_export_of_one_gpu_model_only(tmp_path, monkeypatch, capsys, problem):
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache"))
    counted_sol(problem, [0, 1], "cuda", GPU)
    counted_sol(problem, [0], "cuda", "NVIDIA H100 80GB HBM3")
    assert main(["cache", "export", str(tmp_path / "b.kfm"), "--device", GPU]) == 0
    assert "T_sol of 2 workloads (1); 1 files skipped" in capsys.readouterr().out
    with gzip.open(tmp_path / "b.kfm", "rt") as handle:
        data = json.load(handle)
    assert [d["device_name"] for d in data["sol"].values()] == [GPU]


def test_a_changed_counting_code_is_a_miss(tmp_path, monkeypatch, problem):
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache"))
    counted_sol(problem, [0, 1], "cuda", GPU)
    assert cached_sol(problem, [0, 1], "cuda", GPU) is not None
    assert cached_sol(problem, [0, 1], "cuda", "NVIDIA H100 80GB HBM3") is None
    import core.roofline.sol_cache as sol_cache

    monkeypatch.setattr(sol_cache, "counting_code_hash", lambda: "another counting")
    assert cached_sol(problem, [0, 1], "cuda", GPU) is None


def bundle_file(path, data, compress=True):
    text = json.dumps(data)
    if compress:
        with gzip.open(path, "wt") as handle:
            handle.write(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("make, said", [
    (lambda p: p / "missing.kfm", "no such file"),
    (lambda p: p, "is a directory"),
    (lambda p: bundle_file(p / "plain.json", {"format": "kernelfleet-measurements-1"}, compress=False),
     "not a measurements file"),
    (lambda p: bundle_file(p / "other.kfm", {"format": "something else"}), "not a kernelfleet measurements file"),
    (lambda p: bundle_file(p / "nokey.kfm", {"format": "kernelfleet-measurements-1", "baseline": {"abc": {}},
                                             "sol": {}}), "the key is not a sha256"),
    (lambda p: bundle_file(p / "swapped.kfm", {"format": "kernelfleet-measurements-1", "baseline": {},
                                               "sol": {"a" * 64: {"key": "b" * 64, "workloads": {}}}}),
     "not a cache file of this key"),
    (lambda p: bundle_file(p / "badsol.kfm", {"format": "kernelfleet-measurements-1", "baseline": {},
                                              "sol": {"a" * 64: {"key": "a" * 64, "format": 1,
                                                                 "workloads": {"0": {"t_sol_ms": "fast"}}}}}),
     "t_sol_ms is not a number"),
])
def test_a_bad_file_is_one_error_line_and_changes_nothing(tmp_path, monkeypatch, capsys, make, said):
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["cache", "import", str(make(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and said in err, err
    assert not SolCache().keys() and not (tmp_path / "cache" / "baseline").exists()


def test_an_entry_of_an_older_format_is_skipped(tmp_path, monkeypatch, capsys, problem):
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path / "cache"))
    key = sol_key(problem.path, "cuda", GPU)
    path = bundle_file(tmp_path / "old.kfm", {"format": "kernelfleet-measurements-1", "baseline": {},
                                              "sol": {key: {"key": key, "format": 0, "workloads": {"0": {}}}}})
    assert main(["cache", "import", str(path)]) == 0
    assert "1 files skipped" in capsys.readouterr().out
    assert cached_sol(problem, [0], "cuda", GPU) is None
