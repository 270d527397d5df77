"""Speedups counted against a T_b taken in another machine state (core.evaluate.baseline.machine) are flagged by
`kernelfleet report`, in text at 80 columns and in --json; a run whose T_b all stand in its start's state says
nothing of it."""

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from core.store import RunStore
from core.store.model import WorkloadInfo

ROOT = Path(__file__).resolve().parents[2]
MOVED = "the machine's probe moved 0.8 → 3.1 ms (+288%; load 0.3 → 7.9)"


def _store(run_dir: Path, moved: str) -> Path:
    store = RunStore(run_dir, create=True)
    store.init_run({}, ["/problems"], "cpu", [], "")
    for key in ("moe/001_topk_softmax_routing_qwen3_30b_a3b", "norm/001_rmsnorm_llama3_1_8b"):
        subset, name = key.split("/")
        pid = store.add_problem(key, name, subset, f"/problems/{key}")
        flagged = moved if key.startswith("moe") else ""
        store.set_problem_workloads(pid, [asdict(WorkloadInfo(i, "tokens=64", t_b_ms=1.0, probe_ms=0.8,
                                                              load_1m=0.3, run_probe_ms=3.1 if flagged else 0.8,
                                                              run_load_1m=7.9, state_moved=flagged))
                                          for i in range(3)])
        seed = store.begin_attempt(pid, None, {"name": "seed", "definition": name, "author": "t", "spec": {},
                                               "sources": []}, language="pytorch")
        store.finish_attempt(seed, status="PASSED", speedup=0.14, gpu_seconds=1.0)
        store.update_problem(pid, status="active", attempts=1, seed_attempt_id=seed, seed_speedup=0.14,
                             best_attempt_id=seed, best_speedup=0.14)
    store.set_run_state("stopped")
    store.close()
    return run_dir


def _report(run_dir: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "cli.main", "report", str(run_dir), *args], cwd=ROOT,
                          env={**os.environ, "COLUMNS": "80"}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_t_b_taken_in_another_machine_state_is_flagged_in_text_and_json(tmp_path):
    run_dir = _store(tmp_path / "run", MOVED)
    text = _report(run_dir)
    flat = " ".join(text.split())
    assert "Speedups not comparable (T_b taken in another machine state than the run's start):" in flat
    assert f"moe/001_topk_softmax_routing_qwen3_30b_a3b: workloads 0, 1, 2 ({MOVED})" in flat
    assert "norm/001_rmsnorm_llama3_1_8b: workloads" not in flat  # its T_b stands in the start's state
    assert max(len(line) for line in text.splitlines()) <= 80
    document = json.loads(_report(run_dir, "--json"))
    assert document["state_moved"] == {"moe/001_topk_softmax_routing_qwen3_30b_a3b": [
        {"workload": i, "reason": MOVED} for i in range(3)]}


def test_a_run_in_one_state_says_nothing_of_it(tmp_path):
    run_dir = _store(tmp_path / "run", "")
    assert "not comparable" not in _report(run_dir)
    assert json.loads(_report(run_dir, "--json"))["state_moved"] == {}
