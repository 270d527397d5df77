"""A problem's identity for caches: its definition and workloads, byte for byte."""

from __future__ import annotations

import hashlib
from pathlib import Path

from core.problem.load import DEFINITION_FILE, WORKLOAD_FILE


def problem_content_hash(problem_dir: str | Path) -> str:
    """sha256 over definition.json and workload.jsonl, byte for byte (each length-prefixed)."""
    folder = Path(problem_dir)
    digest = hashlib.sha256()
    for name in (DEFINITION_FILE, WORKLOAD_FILE):
        data = (folder / name).read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()
