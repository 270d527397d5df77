"""One orchestrator per run: ``RunLock`` is held for the life of the process that writes a run's store.

The lock is an exclusive ``flock`` on ``RUN_DIR/run.lock``, which the kernel drops when its holder dies (even by
``kill -9``), so a dead run's lock is taken over without anyone cleaning up. The file names its holder (process id,
host, start time, command) for the refusal a second orchestrator prints. Where a network filesystem does not share
locks between hosts, the holder's heartbeat (the file's modification time, touched every few seconds) refuses a
start on another host while the holder lives, and lets it in once the heartbeat is stale.

Readers (``watch``, ``report``, controls) never take the lock: ``holder`` only looks.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

LOCK_NAME = "run.lock"
HEARTBEAT_S = 5.0
# A holder on another host whose heartbeat is older than this is taken for dead (it touches the file every
# HEARTBEAT_S; the margin covers clock skew and a stalled NFS client).
STALE_AFTER_S = 60.0
# A reader's probe holds a shared lock for microseconds: an acquirer that meets one retries this long.
ACQUIRE_PATIENCE_S = 2.0


class RunLocked(Exception):
    """The run is held by another orchestrator (or the lock cannot be taken): one line saying who or why."""


@dataclass(frozen=True)
class LockHolder:
    pid: int
    host: str
    started_at: float
    command: str = ""
    heartbeat_at: float = 0.0  # the lock file's modification time when read

    def describe(self) -> str:
        since = datetime.datetime.fromtimestamp(self.started_at).strftime("%Y-%m-%d %H:%M:%S")
        command = f", `{self.command}`" if self.command else ""
        return f"pid {self.pid} on {self.host}, since {since}{command}"


class RunLock:
    """``RunLock.acquire(run_dir)`` or ``RunLocked``; ``release()`` (or process exit) lets the next one in."""

    def __init__(self, run_dir: Path, handle, *, shared_locks: bool):
        self.run_dir = run_dir
        self.path = run_dir / LOCK_NAME
        self._handle = handle
        self.shared_locks = shared_locks  # False: the filesystem refused flock; the heartbeat alone guards the run
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="kernelfleet-run-lock", daemon=True)
        self._beat.start()

    @classmethod
    def acquire(cls, run_dir: str | Path, *, command: str = "") -> RunLock:
        run_dir = Path(run_dir)
        path = run_dir / LOCK_NAME
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if exc.errno != errno.EROFS:
                raise RunLocked(f"{run_dir}: cannot create the run folder ({exc.strerror or exc})") from None
        try:
            handle = open(path, "a+", encoding="utf-8")  # not inherited by child processes (PEP 446)
        except OSError as exc:
            if exc.errno == errno.EROFS:
                raise RunLocked(f"{run_dir}: on a read-only filesystem, so no run can be recorded there (`kernelfleet "
                                f"report` and `watch` read a run as it is; copy its folder to a writable disk to "
                                f"--resume it)") from None
            raise RunLocked(f"{run_dir}: cannot take the run's lock {path.name} ({exc.strerror or exc})") from None
        try:
            shared_locks = _lock(handle)
            _refuse_live_holder_elsewhere(run_dir, handle, shared_locks)
            _write_holder(handle, command or _command_line())
        except BaseException:
            handle.close()
            raise
        return cls(run_dir, handle, shared_locks=shared_locks)

    def release(self) -> None:
        if self._handle.closed:
            return
        self._stop.set()
        try:
            self._handle.truncate(0)  # nobody holds it now; a full disk cannot stop a truncation
        except OSError:
            pass
        self._handle.close()  # drops the flock

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                os.utime(self._handle.fileno())
            except (OSError, ValueError):  # the run dir was deleted, or the handle closed meanwhile
                pass


def holder(run_dir: str | Path) -> LockHolder | None:
    """Who holds ``run_dir``'s lock now; None when nobody does (the run is not running, or predates the lock).
    Read-only: never creates the file."""
    path = Path(run_dir) / LOCK_NAME
    try:
        handle = open(path, encoding="utf-8")
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(handle) or LockHolder(0, "?", 0.0, "starting")
        except OSError:  # no flock here: the heartbeat tells
            found = _read_holder(handle)
            return found if found is not None and _fresh(found) else None
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        found = _read_holder(handle)
        # Held by a process on another host whose filesystem does not share flocks.
        return found if found is not None and found.host != socket.gethostname() and _fresh(found) else None


def _lock(handle) -> bool:
    """Take the flock (True), or find the filesystem without locks (False); RunLocked when another holds it."""
    deadline = time.monotonic() + ACQUIRE_PATIENCE_S
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise RunLocked(_in_use(handle)) from None
            time.sleep(0.05)
        except OSError as exc:
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                return False
            raise RunLocked(f"{Path(handle.name).parent}: cannot take the run's lock ({exc.strerror or exc})") \
                from None


def _refuse_live_holder_elsewhere(run_dir: Path, handle, shared_locks: bool) -> None:
    """The flock is ours; a holder still named in the file is dead on this host, or on another host one whose
    filesystem may not share flocks with us: refused while its heartbeat is fresh."""
    found = _read_holder(handle)
    if found is None or not _fresh(found):
        return
    here = socket.gethostname()
    if found.host != here or (not shared_locks and found.pid != os.getpid() and alive(found.pid)):
        raise RunLocked(_in_use(handle, found))


def _in_use(handle, found: LockHolder | None = None) -> str:
    run_dir = Path(handle.name).parent
    found = found or _read_holder(handle)
    who = found.describe() if found is not None else "another process that is starting"
    beat = ""
    if found is not None and found.host != socket.gethostname():
        beat = (f"; its last heartbeat was {time.time() - found.heartbeat_at:.0f} s ago, and the run is taken over "
                f"once it is {STALE_AFTER_S:.0f} s old")
    return (f"{run_dir}: the run is in use by {who}{beat}; watch it with `kernelfleet watch {run_dir}` (S there "
            f"stops it, then --resume continues it)")


def _read_holder(handle) -> LockHolder | None:
    try:
        handle.seek(0)
        data = json.loads(handle.read(4096) or "null")
        heartbeat = os.fstat(handle.fileno()).st_mtime
        if not isinstance(data, dict):
            return None
        return LockHolder(int(data["pid"]), str(data["host"]), float(data["started_at"]), str(data.get("command", "")),
                          heartbeat)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_holder(handle, command: str) -> None:
    record = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": time.time(), "command": command}
    try:
        handle.truncate(0)
        handle.write(json.dumps(record))
        handle.flush()
    except OSError:
        # A full disk: the flock is what guards the run; the refusal then names "a process that is starting".
        pass


def _fresh(found: LockHolder) -> bool:
    return time.time() - found.heartbeat_at < STALE_AFTER_S


def alive(pid: int) -> bool:
    """Whether a process of this pid exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _command_line() -> str:
    text = " ".join(["kernelfleet", *sys.argv[1:]])  # the same words whether started as a script or `-m cli.main`
    return text if len(text) <= 200 else text[:199] + "…"
