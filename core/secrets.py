"""The run's secrets: read once from the environment, then removed from it, so that no process the run starts
inherits one; and the redactor every text leaving a worker passes through on its way to the store, the log or a
model.

Removing a variable from ``os.environ`` leaves its text in the block the kernel shows as ``/proc/PID/environ``
(the environment the process was started with), so that block is overwritten too.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from collections.abc import Iterable, Mapping

REDACTED = "[redacted]"
# Shorter values would redact ordinary words and numbers; no real credential is this short.
MIN_SECRET_CHARS = 8

_lock = threading.Lock()
_taken: dict[str, str] = {}  # name -> value, for the life of the process

# Variables no untrusted process sees: anything that looks like a credential, plus known secret-bearing names.
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|BEARER|COOKIE|SESSION|PRIVATE", re.IGNORECASE)
_SECRET_PREFIXES = ("OPENAI", "ANTHROPIC", "AWS_", "AZURE_", "GOOGLE_", "GCP_", "HF_", "HUGGING", "GITHUB_",
                    "KERNELFLEET_LLM")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name looks like it holds a credential."""
    return bool(_SECRET_NAME.search(name)) or name.upper().startswith(_SECRET_PREFIXES)


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` less every variable whose name looks like a credential."""
    return {k: v for k, v in env.items() if not is_secret_name(k)}


def take_secrets(names: Iterable[str] = ()) -> dict[str, str]:
    """Move every secret-looking variable, and each of ``names`` (e.g. the one ``[llm] api_key_env`` names), out of
    this process's environment into memory; returns all taken so far."""
    wanted = set(names)
    found = {k: v for k, v in os.environ.items() if v and (k in wanted or is_secret_name(k))}
    for name in found:
        del os.environ[name]
    _wipe_initial_environment(found)
    with _lock:
        _taken.update(found)
        return dict(_taken)


def secret(name: str) -> str | None:
    """A variable's value: taken earlier, else still in the environment."""
    with _lock:
        if name in _taken:
            return _taken[name]
    return os.environ.get(name)


def redact(text: str) -> str:
    """``text`` with the value of every secret taken so far replaced."""
    if not text:
        return text
    with _lock:
        values = [v for v in _taken.values() if len(v) >= MIN_SECRET_CHARS]
    for value in sorted(values, key=len, reverse=True):
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def _wipe_initial_environment(names: Iterable[str]) -> int:
    """Overwrite ``NAME=value`` of ``names`` in the environment block the process started with; the count wiped."""
    prefixes = [f"{n}=".encode() for n in names]
    if not prefixes:
        return 0
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start and env_end (fields 50 and 51 of stat)
    except (OSError, IndexError, ValueError):
        return 0
    if not 0 < start < end:
        return 0
    block = ctypes.string_at(start, end - start)
    wiped, offset = 0, 0
    for entry in block.split(b"\0"):
        if any(entry.startswith(p) for p in prefixes):
            ctypes.memset(start + offset, 0, len(entry))
            wiped += 1
        offset += len(entry) + 1
    return wiped
