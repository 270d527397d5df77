"""Running a command in a process group of its own, and killing the whole group when it overstays."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio


@dataclass(frozen=True)
class ProcessOutcome:
    returncode: int | None  # None when the command was killed at its timeout
    output: str  # stdout and stderr interleaved as written


async def run_in_process_group(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout_s: float
) -> ProcessOutcome:
    """Run ``argv`` to completion or for ``timeout_s``, whichever comes first.

    The process leads a new session, so on timeout or cancellation everything it started dies with it: nvcc
    runs the preprocessor, cicc and ptxas as children, and killing nvcc alone would leave them running.
    """
    process = await anyio.open_process(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    chunks: list[bytes] = []

    async def collect_output() -> None:
        assert process.stdout is not None
        async for chunk in process.stdout:
            chunks.append(chunk)

    timed_out = False
    try:
        with anyio.move_on_after(timeout_s):
            async with anyio.create_task_group() as group:
                group.start_soon(collect_output)
                await process.wait()
    finally:
        with anyio.CancelScope(shield=True):
            # While the leader is unreaped its pid cannot be reused, so the group id still names our group.
            if process.returncode is None:
                timed_out = True
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            await process.aclose()

    output = b"".join(chunks).decode(errors="replace")
    return ProcessOutcome(None if timed_out else process.returncode, output)
