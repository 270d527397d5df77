"""Faults of the machine under a real `kernelfleet run`: a full disk, a store on a read-only filesystem, the run
folder deleted. Each ends the run with one `error:` line and exit 2, loses nothing recorded, and `--resume` continues once
the fault is gone. The disk faults need a small tmpfs, which only a process allowed to mount can make (skipped
elsewhere)."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import uuid

import pytest

from fleet_problems import write_config, write_problems
from fleet_runner import ROOT, read, start_run, wait_for

from core.store import RunReader

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs at tmp_path/disk, unmounted after the test."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip() or mounted.returncode})")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.fixture
def endless_run(tmp_path):
    """Problems and a config one tuner cannot exhaust: a run goes on until it is stopped or fails."""
    write_problems(tmp_path / "problems", chunks=tuple(range(1, 257)))
    config = write_config(tmp_path / "fleet.toml", fleet={"tuner_agents": 1}, tuner={"trials_per_problem": 40},
                          evaluation={"verify_rounds": 0})
    return tmp_path / "problems", config


def _done_ids(reader: RunReader) -> set[int]:
    return {a.id for a in reader.attempts(state="done")}


def _start(tmp_path, endless_run, run_dir, log_name="run.log"):
    problems, config = endless_run
    log = tmp_path / log_name
    proc = start_run(problems, "--config", config, "--run-dir", run_dir, log=log)
    wait_for(lambda: proc.poll() is not None or len(read(run_dir, _done_ids) or ()) >= 2, 180, "two attempts")
    assert proc.poll() is None, log.read_text()[-3000:]
    return proc, log


def _ends_with_one_error_line(proc, log, *fragments: str) -> str:
    try:
        assert proc.wait(timeout=120) == 2, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = log.read_text()
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in text, text[-3000:]
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def _resume_goes_on(tmp_path, run_dir, before: set[int]) -> None:
    """`--resume` continues the run: every attempt recorded before is there, and a new one is recorded."""
    log = tmp_path / f"resume-{uuid.uuid4().hex[:6]}.log"
    proc = start_run("--resume", run_dir, log=log)
    try:
        wait_for(lambda: proc.poll() is not None or len(read(run_dir, _done_ids) or ()) > len(before) + 1, 180,
                 "new attempts after --resume")
        assert proc.poll() is None, log.read_text()[-3000:]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    with RunReader(run_dir) as reader:
        assert before <= _done_ids(reader), "an attempt recorded before the fault is gone"
        assert reader.run_info().state == "stopped"
        for row in reader.problems():
            assert row.attempts == len(reader.attempts(row.id, state="done")), row.key


def test_a_full_disk_ends_the_run_with_one_line_and_resume_continues_once_space_is_back(tmp_path, small_disk,
                                                                                          endless_run):
    run_dir = small_disk / "run"
    proc, log = _start(tmp_path, endless_run, run_dir)
    filler = small_disk / "filler"
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M"], capture_output=True)  # ends at ENOSPC
    _ends_with_one_error_line(proc, log, f"error: {run_dir}: the disk is full", "free space, then",
                              f"kernelfleet run --resume {run_dir}")
    before = read(run_dir, _done_ids)
    assert len(before) >= 2
    filler.unlink()
    _resume_goes_on(tmp_path, run_dir, before)


def test_a_store_on_a_read_only_filesystem_is_refused_with_one_line_read_as_it_is_and_left_untouched(
        tmp_path, small_disk, endless_run):
    run_dir = small_disk / "run"
    proc, log = _start(tmp_path, endless_run, run_dir)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    store = run_dir / "run.sqlite"
    digest = hashlib.sha256(store.read_bytes()).hexdigest()
    report = subprocess.run([sys.executable, "-m", "cli.main", "report", str(run_dir)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0 and "Problems" in report.stdout, report.stderr
    refused = subprocess.run([sys.executable, "-m", "cli.main", "run", "--resume", str(run_dir), "--headless"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith(f"error: {run_dir}: on a read-only filesystem"), refused.stderr
    assert hashlib.sha256(store.read_bytes()).hexdigest() == digest
    before = read(run_dir, _done_ids)
    subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    _resume_goes_on(tmp_path, run_dir, before)


def test_a_run_folder_deleted_during_the_run_is_written_back_whole(tmp_path, endless_run):
    run_dir = tmp_path / "run"
    proc, log = _start(tmp_path, endless_run, run_dir)
    seen = read(run_dir, _done_ids)
    shutil.rmtree(run_dir)
    _ends_with_one_error_line(proc, log, f"error: {run_dir}: the run folder was deleted or replaced during the run",
                              f"written back to {run_dir / 'run.sqlite'}", "--resume")
    with RunReader(run_dir) as reader:
        written_back = _done_ids(reader)
    assert seen <= written_back
    _resume_goes_on(tmp_path, run_dir, written_back)
