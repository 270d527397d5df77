"""Steering commands any process may write into a run's store; the orchestrator applies them within one tick."""

from __future__ import annotations

import socket
import sqlite3
import time
from pathlib import Path

from core.store.lock import LOCK_NAME, alive, holder
from core.store.schema import DB_NAME

# command -> what its target is ("problem": a problem key or id, "agent": an agent name or id, "": none) and
# whether it takes an integer value.
COMMANDS: dict[str, tuple[str, bool]] = {
    "pause_problem": ("problem", False),
    "resume_problem": ("problem", False),
    "set_priority": ("problem", True),
    "bump_priority": ("problem", True),  # value: the change, e.g. +1 or -1
    "pin_problem": ("problem", False),
    "unpin_problem": ("problem", False),
    "pause_agent": ("agent", False),
    "resume_agent": ("agent", False),
    "stop_run": ("", False),
}


class ControlError(ValueError):
    pass


def submit_control(run_dir: str | Path, command: str, target: str | int = "", value: int | None = None) -> int:
    """Queue a control; returns its id. Raises ControlError for an unknown command or a missing value."""
    if command not in COMMANDS:
        raise ControlError(f"unknown control {command!r}; known: {', '.join(COMMANDS)}")
    kind, wants_value = COMMANDS[command]
    if kind and target in ("", None):
        raise ControlError(f"{command} needs a {kind}")
    if wants_value and value is None:
        raise ControlError(f"{command} needs an integer value")
    path = Path(run_dir) / DB_NAME
    if not path.exists():
        raise ControlError(f"{run_dir}: no run here")
    conn = sqlite3.connect(path, timeout=10)
    try:
        refusal = _not_listening(conn, run_dir)
        if refusal:
            raise ControlError(refusal)
        with conn:
            cursor = conn.execute("INSERT INTO controls (ts, command, target, value) VALUES (?, ?, ?, ?)",
                                  (time.time(), command, str(target), "" if value is None else str(int(value))))
        return int(cursor.lastrowid)
    finally:
        conn.close()


def _not_listening(conn: sqlite3.Connection, run_dir: str | Path) -> str:
    """Why no orchestrator would apply a control now ("" when one may)."""
    try:
        run = conn.execute("SELECT state, owner FROM run WHERE id = 1").fetchone()
    except sqlite3.Error as exc:
        return f"{run_dir}: not a kernelfleet run store ({exc})"
    if run is None:
        return f"{run_dir}: the run never started"
    state, owner = run
    resume = f"continue it with kernelfleet run --resume {run_dir}"
    if state in ("stopped", "finished"):
        return f"{run_dir}: the run is {state}, so nothing would apply the control; {resume}"
    if (Path(run_dir) / LOCK_NAME).exists():  # the run's lock knows, across hosts and after a pid is reused
        if holder(run_dir) is None:
            return f"{run_dir}: the run's orchestrator is gone, so nothing would apply the control; {resume}"
        return ""
    host, _, pid = (owner or "").rpartition(":")  # a run from before the lock
    if host == socket.gethostname() and pid.isdigit() and not alive(int(pid)):
        return f"{run_dir}: the run's orchestrator (pid {pid}) is gone, so nothing would apply the control; {resume}"
    return ""
