"""Candidate sources and diffs on the report page: every line escaped, long ones kept whole but capped in count so
one huge candidate cannot swell the page."""

from __future__ import annotations

import difflib
from typing import Any

from core.report.html_text import esc

MAX_LINES = 2000


def source_files(solution: dict[str, Any]) -> list[tuple[str, str]]:
    """(path, content) of each source file of a stored solution (whatever the store holds, read defensively)."""
    sources = solution.get("sources") if isinstance(solution, dict) else None
    files = []
    for i, entry in enumerate(sources if isinstance(sources, list) else []):
        if isinstance(entry, dict):
            files.append((str(entry.get("path", f"source {i + 1}")), str(entry.get("content", ""))))
    return files


def sources_diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    """A unified diff of two solutions' sources, file by file (files added or removed included)."""
    before, after = dict(source_files(old)), dict(source_files(new))
    chunks = []
    for path in dict.fromkeys([*before, *after]):
        chunks.extend(difflib.unified_diff(before.get(path, "").splitlines(keepends=True),
                                           after.get(path, "").splitlines(keepends=True),
                                           f"a/{path}" if path in before else "/dev/null",
                                           f"b/{path}" if path in after else "/dev/null"))
    return "".join(line if line.endswith("\n") else line + "\n" for line in chunks)


def _capped(lines: list[str]) -> tuple[list[str], str]:
    if len(lines) <= MAX_LINES:
        return lines, ""
    return lines[:MAX_LINES], f"<p class=\"meta\">… {len(lines) - MAX_LINES} more lines not shown</p>"


def diff_block(diff: str) -> str:
    """A unified diff with its added, removed and hunk lines coloured."""
    if not diff.strip():
        return "<p class=\"meta\">no change in the sources</p>"
    lines, more = _capped(diff.splitlines())
    out = []
    for line in lines:
        css = ("file" if line.startswith(("+++", "---")) else "add" if line.startswith("+")
               else "del" if line.startswith("-") else "hunk" if line.startswith("@@") else "")
        out.append(f"<span class=\"{css}\">{esc(line)}</span>" if css else esc(line))
    return f"<pre class=\"diff\">{chr(10).join(out)}</pre>{more}"


def sources_block(solution: dict[str, Any]) -> str:
    """Each source file of a solution in a collapsible block, first one open."""
    files = source_files(solution)
    if not files:
        return "<p class=\"meta\">no sources stored</p>"
    out = []
    for n, (path, content) in enumerate(files):
        lines, more = _capped(content.splitlines())
        out.append(f"<details class=\"source\"{' open' if n == 0 else ''}><summary>{esc(path)} "
                   f"<span class=\"meta\">({len(content.splitlines())} lines)</span></summary>"
                   f"<pre class=\"src\">{esc(chr(10).join(lines))}</pre>{more}</details>")
    return "".join(out)
