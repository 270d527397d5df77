"""Ends what a GPU actor started when the actor dies without closing its pool (its node's raylet killed, the
process killed): the pool's workers and builds run in sessions of their own, which Ray does not end with the actor,
and they would hold the GPU's memory for nobody.

Run as ``python -I reaper.py ACTOR_PID`` in a session of its own, with a pipe from the actor on stdin: it notes the
actor's children (each leads a process group) twice a second; when the pipe closes it kills every group noted that
is still there, then exits. Standard library only; no secret reaches it (the actor's environment is scrubbed).
"""

from __future__ import annotations

import os
import select
import signal
import sys

SCAN_S = 0.5


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(parent pid, process group, start time) of ``pid``, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), int(fields[2]), int(fields[19])


def _processes() -> dict[int, tuple[int, int, int]]:
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None:
                found[int(name)] = stat
    return found


def _children(actor: int, seen: dict[int, tuple[int, int]]) -> None:
    """Add the actor's children now, ``pid -> (process group, start time)``."""
    for pid, (parent, group, started) in _processes().items():
        if parent == actor and pid != os.getpid():
            seen[pid] = (group, started)


def reap(seen: dict[int, tuple[int, int]]) -> int:
    """Kill every process of a group a noted child led, started no earlier than that child (a process group id
    reused since would belong to a later process, never to an earlier one); the count killed."""
    first: dict[int, int] = {}  # process group -> the earliest start time of a noted child leading it
    for pid, (group, started) in seen.items():
        if pid == group:
            first[group] = min(started, first.get(group, started))
    killed = 0
    for pid, (_, group, started) in _processes().items():
        if pid != os.getpid() and group in first and started >= first[group]:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def main(actor: int) -> None:
    seen: dict[int, tuple[int, int]] = {}
    while True:
        _children(actor, seen)
        ready, _, _ = select.select([sys.stdin], [], [], SCAN_S)
        if ready and not os.read(sys.stdin.fileno(), 4096):  # the actor is gone, or closed the pipe
            break
        if _stat(actor) is None:
            break
    reap(seen)


if __name__ == "__main__":
    main(int(sys.argv[1]))
