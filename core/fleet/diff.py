"""Unified diffs between two solutions' sources (what an attempt changed relative to its parent)."""

from __future__ import annotations

import difflib
import json
from typing import Any


def _sources(solution: dict[str, Any]) -> dict[str, str]:
    return {s["path"]: s["content"] for s in solution.get("sources", [])}


def solution_diff(parent: dict[str, Any] | None, child: dict[str, Any]) -> str:
    """``git diff``-style text over every source file; spec changes appear as a diff of ``solution.json``."""
    old, new = _sources(parent or {}), _sources(child)
    chunks = []
    for path in sorted(set(old) | set(new)):
        a, b = old.get(path), new.get(path)
        if a == b:
            continue
        lines = difflib.unified_diff((a or "").splitlines(keepends=True), (b or "").splitlines(keepends=True),
                                     fromfile=f"a/{path}" if a is not None else "/dev/null",
                                     tofile=f"b/{path}" if b is not None else "/dev/null")
        chunks.append("".join(line if line.endswith("\n") else line + "\n" for line in lines))
    old_spec, new_spec = (parent or {}).get("spec"), child.get("spec")
    if parent is not None and old_spec != new_spec:
        a = json.dumps(old_spec, indent=2, sort_keys=True).splitlines(keepends=True)
        b = json.dumps(new_spec, indent=2, sort_keys=True).splitlines(keepends=True)
        chunks.append("".join(difflib.unified_diff(a, b, "a/solution.json:spec", "b/solution.json:spec")))
    return "".join(chunks)
