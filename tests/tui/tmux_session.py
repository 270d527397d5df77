"""A detached tmux session on a server of its own, for the tests that drive the watcher in a real terminal: started
with a command and a size, driven with `send-keys`, read with `capture-pane`."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

TMUX = shutil.which("tmux")


class Tmux:
    def __init__(self, socket: str, session: str = "watch"):
        self.socket = socket
        self.session = session

    def __call__(self, *args: str, check: bool = True) -> str:
        result = subprocess.run([TMUX, "-L", self.socket, *args], capture_output=True, text=True, timeout=30)
        if check and result.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {result.stderr}")
        return result.stdout

    def start(self, command: Sequence[str], cwd: Path, width: int = 80, height: int = 24,
              env: dict[str, str] | None = None) -> None:
        """Run ``command`` in a new detached session of ``width`` x ``height`` (no tmux config read); the pane
        stays after the command exits, so its last screen can still be read."""
        variables = {"TERM": "xterm-256color", "COLORTERM": "truecolor", **(env or {})}
        self("-f", os.devnull, "new-session", "-d", "-s", self.session, "-x", str(width), "-y", str(height),
             "-c", str(cwd), "env", *(f"{k}={v}" for k, v in variables.items()), *command)
        self("set-option", "-t", self.session, "remain-on-exit", "on")

    def send(self, *keys: str) -> None:
        self("send-keys", "-t", self.session, *keys)

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", self.session)

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 60.0, what: str = "the screen") -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if predicate(text):
                return text
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; the screen:\n{text}")

    def kill(self) -> None:
        self("kill-server", check=False)
