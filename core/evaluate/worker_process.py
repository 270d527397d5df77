"""One worker process of the pool (candidate, judge or baseline): started with an environment without secrets
(a candidate's under the machine's confinement), spoken to over a private socket, killed with its whole process
group when it dies, hangs or breaks the protocol."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import anyio

from core.evaluate import sandbox
from core.evaluate.memory_cap import worker_environment
from core.evaluate.messages import Answer, Exit, MessageError, Request, decode_answer, decode_ready, encode
from core.evaluate.verdict import Status


class WorkerGone(Exception):
    """The worker process died, timed out, or broke the protocol; it has been killed."""

    def __init__(self, status: Status, reason: str):
        self.status = status
        self.reason = reason
        super().__init__(reason)


class WorkerProcess:
    """One worker process. A candidate's goes through the machine's confinement (``sandbox.confinement()``): it can
    write only ``scratch`` and the ``writable`` folders, and read the ``keep`` paths where home folders are hidden.
    Every role gets an environment without secrets. ``memory_fraction``: the process's cap on its device's memory
    (``core.evaluate.memory_cap``; None: none)."""

    def __init__(self, role: str, device: str, gpu: int | None, scratch_root: Path,
                 cores: frozenset[int] | None = None, *, writable: Sequence[Path] = (), keep: Sequence[Path] = (),
                 memory_fraction: float | None = None):
        self.role = role
        self.device = device
        self.scratch = Path(tempfile.mkdtemp(prefix=f"{role}-", dir=scratch_root))
        parent, child = socket.socketpair()
        self.conn = Connection(parent.detach())
        child_fd = child.detach()
        candidate = role == "candidate"
        env = sandbox.scrubbed_environment(os.environ, str(self.scratch) if candidate else None)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(sandbox.PROJECT_ROOT), env.get("PYTHONPATH", "")]))
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = physical_gpu(gpu)
        elif device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        env.update(worker_environment(memory_fraction))
        worker = [sys.executable, "-m", "core.evaluate.worker", role, "cuda" if device.startswith("cuda") else "cpu",
                  str(child_fd)]
        if candidate:
            worker = sandbox.confinement().command(worker, write=[self.scratch, *writable], keep=keep)
        self.log_path = self.scratch / ("candidate.log" if candidate else "judge.log")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                worker, cwd=self.scratch, env=env, pass_fds=(child_fd,), stdin=subprocess.DEVNULL, stdout=log,
                stderr=log, start_new_session=True, preexec_fn=_before_exec(candidate, cores),
            )
        os.close(child_fd)
        self.started = time.monotonic()
        self.ready = False
        self.in_request = False  # a request sent and not yet answered

    async def wait_ready(self, timeout_s: float = 120.0) -> None:
        if not self.ready:
            try:
                decode_ready(await self._receive(timeout_s))
            except MessageError:
                raise self._gone(Status.REWARD_HACK, "the private channel carried something that is not a reply") \
                    from None
            self.ready = True

    async def request(self, message: Request, timeout_s: float) -> Answer:
        """Send one request (``core.evaluate.messages``) and return its answer; a process that answers something
        that is not one, dies or stays silent past ``timeout_s`` is killed (``WorkerGone``)."""
        await self.wait_ready()
        self.in_request = True
        try:
            try:
                self.conn.send_bytes(json.dumps(encode(message)).encode())
            except OSError:
                raise self._gone(Status.RUNTIME_ERROR, "worker process is gone") from None
            reply = await self._receive(timeout_s)
        finally:
            self.in_request = False
        try:
            return decode_answer(reply, message)
        except MessageError:
            raise self._gone(Status.REWARD_HACK, "the private channel carried something that is not a reply") \
                from None

    def answered_out_of_turn(self) -> bool:
        """Whether something waits on the channel that no request asked for: code in the process (a candidate's)
        wrote to it beside the harness, and the next request would read that as its answer. (A process not yet
        ready has its ready message waiting: that one is asked for.)"""
        if not self.ready or self.in_request:
            return False
        try:
            return self.proc.poll() is None and self.conn.poll(0)
        except (OSError, EOFError):
            return False

    async def _receive(self, timeout_s: float) -> Any:
        def receive() -> bytes | None:
            try:
                if not self.conn.poll(timeout_s):
                    return None
                return self.conn.recv_bytes(64 << 20)
            except (EOFError, OSError):
                return b""

        raw = await anyio.to_thread.run_sync(receive, abandon_on_cancel=True)
        if raw is None:
            raise self._gone(Status.TIMEOUT, f"no answer within {timeout_s:g} s; the process group was killed")
        if raw == b"":
            self.proc.wait()
            raise self._gone(Status.RUNTIME_ERROR, f"the process died ({self._exit_description()}){self._log_tail()}")
        try:
            reply = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise self._gone(Status.REWARD_HACK, "the private channel carried something that is not a reply") \
                from None
        if not isinstance(reply, dict):
            raise self._gone(Status.REWARD_HACK, "the private channel carried something that is not a reply")
        if reply.get("fatal"):
            self.kill()
        return reply

    def _exit_description(self) -> str:
        code = self.proc.returncode
        if code is None:
            return "still running"
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit status {code} before answering"

    def _log_tail(self) -> str:
        try:
            lines = [line for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return ""
        return f": {lines[-1].strip()[:300]}" if lines else ""

    def _gone(self, status: Status, reason: str) -> WorkerGone:
        self.kill()
        return WorkerGone(status, reason)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        else:
            try:  # children the candidate left behind in its group
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.conn.close()

    def close(self, timeout_s: float = 5.0) -> None:
        self.ask_exit()
        self.finish_close(timeout_s)

    def ask_exit(self) -> None:
        """The first half of ``close``: ask the process to exit, without waiting (a pool asks all its workers first)."""
        if self.proc.poll() is None:
            try:
                self.conn.send_bytes(json.dumps(encode(Exit())).encode())
            except OSError:
                pass

    def finish_close(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the exit asked by ``ask_exit``, then kill what is left, and remove the scratch."""
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=max(0.0, timeout_s))
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        shutil.rmtree(self.scratch, ignore_errors=True)


def _before_exec(limits: bool, cores: frozenset[int] | None):
    """What a worker's child runs before exec: it dies with the process that started it (a killed orchestrator
    leaves no worker holding a GPU), then the candidate's resource limits and its kept cores."""
    parent = os.getpid()

    def prepare() -> None:
        die_with_parent(parent)
        if cores:
            os.sched_setaffinity(0, cores)
        if limits:
            sandbox.apply_limits()

    return prepare


def _load_prctl():
    # Looked up once here: a forked child of a threaded parent must not dlopen.
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """In a forked child: SIGKILL when the thread that forked it ends (Linux; elsewhere nothing). Workers are
    started from the event loop's thread, which lives as long as the process."""
    if _PRCTL is None:
        return
    _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def physical_gpu(index: int) -> str:
    """GPU ``index`` as this process sees it, translated through a CUDA_VISIBLE_DEVICES the user already set."""
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return visible[index] if index < len(visible) else str(index)
