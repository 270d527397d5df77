"""The devices' kernel time beside their busy fraction, from the pool's account to the run's metric samples (the
store's columns, an older store upgraded) and on to `kernelfleet report` (text, --json, HTML)."""

import json
import sqlite3
import types

import pytest

from cli.main import main
from core.evaluate.kernel_time import KernelTimeSampler
from core.evaluate.usage import PoolUsage
from core.fleet.metrics import record_metrics
from core.report.figures import busy_fraction, kernel_fraction
from core.store import RunReader, RunStore
from core.store.schema import DB_NAME, MIGRATIONS

HELD = {"time": 0.3, "run": 0.25, "check": 0.2, "between": 0.16}


def _run(run_dir, device: str) -> RunStore:
    store = RunStore(run_dir, create=True)
    store.init_run({"fleet": "test"}, ["problems/"], device, [0], "cpu" if device == "cpu" else "NVIDIA H200")
    store.add_problem("norm/p_a", "p_a", "norm", "problems/norm/p_a")
    return store


def _sample(store: RunStore, **pool) -> None:
    store.add_metric(fleet_mean_sol=None, geomean_speedup=None, queue_wait_s=0.5, attempts=1, tokens=0, dollars=0.0,
                     active_problems=1, **pool)


def test_kernel_time_and_held_shares_round_trip_through_the_store(tmp_path):
    store = _run(tmp_path / "run", "cuda")
    _sample(store, gpu_busy=0.91, gpu_kernel=0.52, gpu_kernel_note="NVML utilization samples", gpu_held=HELD)
    _sample(store, gpu_busy=None)
    store.close()
    with RunReader(tmp_path / "run") as reader:
        first, last = reader.metrics()
    assert (first.gpu_busy, first.gpu_kernel, first.gpu_kernel_note) == (0.91, 0.52, "NVML utilization samples")
    assert first.gpu_held == HELD
    assert (last.gpu_kernel, last.gpu_kernel_note, last.gpu_held) == (None, "", {})
    # Shown from the same sample as the busy fraction: the latest that has one.
    assert busy_fraction([first, last]) == 0.91 and kernel_fraction([first, last]) == 0.52


def test_an_older_store_upgrades_with_its_samples_unmeasured(tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    with sqlite3.connect(folder / DB_NAME) as conn:
        for number, script in enumerate(MIGRATIONS[:9], start=1):
            conn.executescript("BEGIN;" + script + f";PRAGMA user_version = {number};COMMIT;")
        conn.execute("INSERT INTO run (id, created_at, config_json, problem_paths_json, device, gpus_json, state) "
                     "VALUES (1, 0, '{}', '[]', 'cuda', '[0]', 'stopped')")
        conn.execute("INSERT INTO metrics (ts, gpu_busy, attempts, tokens, dollars, active_problems) "
                     "VALUES (1, 0.875, 3, 0, 0, 1)")
    RunStore(folder).close()  # the writer upgrades it
    with RunReader(folder) as reader:
        (sample,) = reader.metrics()
    assert (sample.gpu_busy, sample.gpu_kernel, sample.gpu_kernel_note, sample.gpu_held) == (0.875, None, "", {})
    assert main(["report", str(folder)]) == 0


def _report(run_dir, tmp_path, capsys, monkeypatch) -> tuple[str, dict, str]:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["report", str(run_dir)]) == 0
    text = capsys.readouterr().out
    page = tmp_path / "report.html"
    assert main(["report", str(run_dir), "--json", "--html", str(page)]) == 0
    return text, json.loads(capsys.readouterr().out), page.read_text()


def test_a_cpu_runs_report_says_kernel_time_is_not_measured_and_where_held_time_went(tmp_path, capsys, monkeypatch):
    usage = PoolUsage(devices=1)
    assert KernelTimeSampler.start(usage, "cpu", []) is None
    usage.demand_changed(+1, 0.0)
    usage.demand_changed(-1, 10.0)
    usage.busy_s, usage.jobs, usage.queue_wait_s = 9.0, 2, 1.0
    usage.held_in(0, "run", 0.0, 4.0)
    usage.held_in(0, "time", 4.0, 7.0)
    usage.job_ended(0)
    store = _run(tmp_path / "run", "cpu")
    record_metrics(types.SimpleNamespace(store=store, usage=lambda: usage))
    store.close()
    text, data, page = _report(tmp_path / "run", tmp_path, capsys, monkeypatch)
    assert "CPU busy while work waited: 90%, mean queue wait 0.5 s (since the last start)" in text
    assert "CPU kernel time: not measured (no NVML: the pool runs on the CPU)" in text
    assert "CPU held by: correctness rounds 40%, timing 30%, between calls 20%" in text
    assert "GPU" not in text
    assert data["pool"] == {"busy": 0.9, "kernels": None, "kernel_note": "no NVML: the pool runs on the CPU",
                            "held_but_idle": None, "held_by": pytest.approx({"run": 0.4, "time": 0.3, "between": 0.2}),
                            "mean_queue_wait_s": 0.5, "at": data["pool"]["at"]}
    assert "CPU kernel time: not measured (no NVML: the pool runs on the CPU)" in page
    assert "CPU held by: correctness rounds 40%" in page


def test_a_gpu_runs_report_shows_kernels_running_beside_busy(tmp_path, capsys, monkeypatch):
    store = _run(tmp_path / "run", "cuda")
    _sample(store, gpu_busy=0.91, gpu_kernel=0.52, gpu_kernel_note="NVML utilization samples", gpu_held=HELD)
    store.close()
    text, data, page = _report(tmp_path / "run", tmp_path, capsys, monkeypatch)
    line = "GPU kernels running while work waited: 52% (NVML utilization samples), held but idle 39%"
    assert line in text and line in page
    assert "GPU held by: timing 30%, correctness rounds 25%, judge's check 20%, between calls 16%" in text
    assert "judge&#x27;s check 20%" in page or "judge&#39;s check 20%" in page
    assert data["pool"]["kernels"] == 0.52 and data["pool"]["held_but_idle"] == pytest.approx(0.39)
    assert data["pool"]["held_by"] == HELD
