"""Cutting a compiler log down to the lines a person (or an agent) needs to fix the fault."""

from __future__ import annotations

import re
from pathlib import Path

MAX_LINES = 60
MAX_CHARS = 6000
_CONTEXT_AFTER = 3
_DIAGNOSTIC = re.compile(
    r"(\berror\b|fatal error|undefined reference|undefined symbol|ImportError|No such file or directory)",
    re.IGNORECASE,
)


def trim_errors(log: str, max_lines: int = MAX_LINES, max_chars: int = MAX_CHARS) -> str:
    """The diagnostic lines of ``log`` (with a little context after each), else its last lines; capped in size."""
    lines = log.splitlines()
    keep: list[int] = []
    for i, line in enumerate(lines):
        if _DIAGNOSTIC.search(line):
            for j in range(i, min(i + 1 + _CONTEXT_AFTER, len(lines))):
                if not keep or j > keep[-1]:
                    keep.append(j)
    picked = [lines[i] for i in keep] if keep else lines[-max_lines:]
    dropped = len(picked) - max_lines
    if dropped > 0:
        picked = picked[:max_lines] + [f"... ({dropped} more lines)"]
    text = "\n".join(picked).strip()
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n... ({len(text) - max_chars} more characters)"
    return text


def summarize_build_log(log: str, source_dir: Path | None = None) -> str:
    """The compiler's errors as ``file:line: error: message`` (core.build's parser), else :func:`trim_errors`."""
    from core.build.diagnostics import parse_diagnostics

    return parse_diagnostics(log, source_dir).report() or trim_errors(log)
