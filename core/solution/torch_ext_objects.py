"""Compiled translation units kept by content, so a candidate that changes one TU recompiles only that one.

An object's key hashes what decides it: the TU's text, every local header (all the solution's sources that are
not compiled: simple, and never misses a header), the full compile command with this build's folders written as
placeholders, the compiler's identity and torch's. ``-DTORCH_EXTENSION_NAME=<module>`` differs for every
candidate; it enters the key only when the TU or a local header names ``TORCH_EXTENSION_NAME`` (torch's own
headers never do; a test checks), so a kernel ``.cu`` is reused across candidates whose binding changed, while the
``.cpp`` holding ``PYBIND11_MODULE(TORCH_EXTENSION_NAME, ...)`` is rebuilt whenever the module name changes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

OBJECTS_SUBDIR = "objects"
_FORMAT = "kernelfleet-torch-ext-object-1"
_NAME_MACRO = "TORCH_EXTENSION_NAME"
_NAME_TOKEN = re.compile(rf"\b{_NAME_MACRO}\b")
_WORK_MARK = ".tmp-"


def object_key(
    *,
    source: str,
    text: str,
    headers: Mapping[str, str],
    template: Sequence[str],
    placeholders: Mapping[str, str],
    name: str,
    toolchain: str,
) -> str:
    """``placeholders``: build-specific strings (folders) -> what they are written as in the key."""
    uses_name = bool(_NAME_TOKEN.search(text)) or any(_NAME_TOKEN.search(h) for h in headers.values())
    replacements = dict(placeholders)
    if not uses_name:
        replacements[f"-D{_NAME_MACRO}={name}"] = f"-D{_NAME_MACRO}=<unused>"

    def neutral(token: str) -> str:
        if token in replacements:
            return replacements[token]
        for real, placeholder in placeholders.items():
            token = token.replace(real, placeholder)
        return token

    payload = {
        "format": _FORMAT,
        "source": source,
        "text": text,
        "headers": sorted(headers.items()),
        "command": [neutral(t) for t in template],
        "toolchain": toolchain,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class ObjectCache:
    def __init__(self, root: Path):
        self.root = root

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.o"

    def get(self, key: str) -> Path | None:
        path = self.path(key)
        return path if path.is_file() else None

    def put(self, key: str, built: Path) -> Path:
        """Copy ``built`` in (temporary file renamed, so readers never see half an object)."""
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        work = target.with_name(f"{target.name}{_WORK_MARK}{os.getpid()}")
        shutil.copyfile(built, work)
        os.replace(work, target)
        return target

    def remove_stale_work(self, older_than_s: float = 3600.0) -> None:
        now = time.time()
        for item in self.root.glob(f"*/*{_WORK_MARK}*"):
            try:
                if now - item.stat().st_mtime > older_than_s:
                    item.unlink()
            except OSError:
                pass


def toolchain_identity(template: Sequence[str]) -> str:
    """The compiler a command runs (resolved path and ``--version``), with torch's version and install."""
    compiler = template[0] if template else ""
    parts = [_compiler_version(compiler)]
    if Path(compiler).name.startswith("nvcc"):
        ccbin = template[template.index("-ccbin") + 1] if "-ccbin" in template else "c++"
        parts.append(_compiler_version(ccbin))  # nvcc's host compiler
    return "\n".join([*parts, _torch_identity()])


@functools.cache
def _compiler_version(compiler: str) -> str:
    resolved = shutil.which(compiler) or compiler
    try:
        completed = subprocess.run([resolved, "--version"], capture_output=True, text=True, timeout=60)
        version = completed.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        version = "unknown"
    return f"{os.path.realpath(resolved)}: {version}"


@functools.cache
def _torch_identity() -> str:
    import torch

    return f"torch {torch.__version__} cuda {torch.version.cuda} at {Path(torch.__file__).parent}"
