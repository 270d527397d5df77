"""The run's lock (core.store.lock): one holder at a time, who holds it, and a dead holder's lock taken over."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from core.store.lock import LOCK_NAME, STALE_AFTER_S, RunLock, RunLocked, holder


def test_a_second_holder_is_refused_with_who_holds_it_until_the_first_lets_go(tmp_path):
    first = RunLock.acquire(tmp_path, command="kernelfleet run --headless")
    try:
        found = holder(tmp_path)
        assert found is not None and found.pid == os.getpid() and found.host == socket.gethostname()
        assert found.command == "kernelfleet run --headless"
        with pytest.raises(RunLocked) as refused:
            RunLock.acquire(tmp_path)
        line = str(refused.value)
        assert f"pid {os.getpid()} on {socket.gethostname()}" in line and "`kernelfleet run --headless`" in line
        assert "\n" not in line
    finally:
        first.release()
    assert holder(tmp_path) is None
    with RunLock.acquire(tmp_path) as second:
        assert holder(tmp_path).started_at >= found.started_at
    assert second.path.read_text() == ""  # released: the file names nobody


def test_the_lock_of_a_process_killed_with_sigkill_is_taken_over(tmp_path):
    script = ("import sys, time\nfrom core.store.lock import RunLock\n"
              f"lock = RunLock.acquire({str(tmp_path)!r}, command='holder')\nprint('held', flush=True)\ntime.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        assert child.stdout.readline().strip() == "held"
        assert holder(tmp_path).pid == child.pid
        with pytest.raises(RunLocked, match=f"pid {child.pid} on"):
            RunLock.acquire(tmp_path)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        assert holder(tmp_path) is None  # the file still names the dead process; nobody holds the lock
        with RunLock.acquire(tmp_path) as taken:
            assert json.loads(taken.path.read_text())["pid"] == os.getpid()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _leave_record(folder, host: str, age_s: float) -> None:
    path = folder / LOCK_NAME
    path.write_text(json.dumps({"pid": 424242, "host": host, "started_at": time.time() - 3600, "command": "run"}))
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))


def test_a_live_holder_on_another_host_is_refused_while_its_heartbeat_is_fresh(tmp_path):
    # A network filesystem that does not share flocks between hosts: the file's heartbeat is all there is.
    _leave_record(tmp_path, "gpu-node-7", age_s=3.0)
    assert holder(tmp_path).host == "gpu-node-7"
    with pytest.raises(RunLocked) as refused:
        RunLock.acquire(tmp_path)
    assert "pid 424242 on gpu-node-7" in str(refused.value) and "heartbeat was 3 s ago" in str(refused.value)
    _leave_record(tmp_path, "gpu-node-7", age_s=STALE_AFTER_S + 30)
    assert holder(tmp_path) is None
    RunLock.acquire(tmp_path).release()


def test_a_dead_holder_named_on_this_host_is_taken_over_at_once(tmp_path):
    _leave_record(tmp_path, socket.gethostname(), age_s=1.0)
    assert holder(tmp_path) is None  # no process holds the flock
    with RunLock.acquire(tmp_path):
        assert holder(tmp_path).pid == os.getpid()


def test_looking_never_creates_the_lock_file(tmp_path):
    assert holder(tmp_path) is None and holder(tmp_path / "missing") is None
    assert not (tmp_path / LOCK_NAME).exists() and not (tmp_path / "missing").exists()


def test_a_folder_that_cannot_hold_the_lock_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunLocked) as refused:
        RunLock.acquire(tmp_path / "file" / "run")
    assert "cannot create the run folder (Not a directory)" in str(refused.value) and "\n" not in str(refused.value)
