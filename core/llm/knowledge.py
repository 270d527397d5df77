"""The LLM agent's tools for what the run already knows: ``attempt`` reads an earlier attempt (of this problem, or
the best of a similar problem of this run), ``note`` puts a short finding on the notes board of the problem's op
family. Everything shown was redacted by the store when it was written, and is clipped here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.llm.toolkit import Tool, ToolRefused, ToolResult, clip
from core.llm.tools import verdict_table
from core.store.model import AttemptRow, ProblemRow
from core.store.writer import MAX_NOTE_CHARS

MAX_NOTES_PER_TURN = 3
# The agent cuts a tool result at 8000 characters; a summary stays under it.
SUMMARY_CHARS = 7500
DIFF_CHARS = 2000
FILE_CHARS = 7000


def render_attempt(attempt: AttemptRow, row: ProblemRow, *, own_problem: bool) -> str:
    """An attempt for the model: who made it, its spec, note and verdict table, its diff to its parent and its
    sources, each clipped so the whole stays under SUMMARY_CHARS."""
    who = "the seed" if attempt.agent_id is None else f"agent {attempt.agent_id}"
    head = f"attempt {attempt.id} by {who}, language {attempt.language}" + (
        "" if own_problem else f", of the similar problem {row.key} (its best)")
    if attempt.parent_id is not None:
        head += f", parent attempt {attempt.parent_id}"
    spec = attempt.solution.get("spec") or {}
    parts = [head, "spec: " + ", ".join(f"{k} {spec.get(k)!r}" for k in ("entry_point", "destination_passing_style",
                                                                          "binding") if k in spec)]
    if attempt.note:
        parts.append("note: " + clip(attempt.note, 500))
    parts.append(verdict_table(attempt, row.workloads))
    if attempt.diff:
        parts.append("diff to its parent:\n```diff\n" + clip(attempt.diff, DIFF_CHARS) + "\n```")
    sources = [(s.get("path", "?"), s.get("content", "")) for s in attempt.solution.get("sources", [])]
    if sources:
        parts.append("sources: " + ", ".join(f"{p} ({len(c)} characters)" for p, c in sources)
                     + "; read one whole with the `path` argument")
    text = "\n".join(parts)
    for path, content in sources:
        left = SUMMARY_CHARS - len(text) - 80
        if left < 200:
            text += "\n(more sources not shown: read them with path)"
            break
        text += f"\n```{_fence(path)} path={path}\n" + clip(content, left) + "\n```"
    return text


def _fence(path: str) -> str:
    return {".py": "python", ".cu": "cuda", ".cuh": "cuda", ".json": "json"}.get(Path(path).suffix, "")


async def _attempt(box, args: dict[str, Any]) -> ToolResult:
    attempt_id = args.get("id")
    if not isinstance(attempt_id, int) or isinstance(attempt_id, bool):
        raise ToolRefused("id must be an attempt number")
    found = box.bench.readable_attempt(attempt_id)
    if found is None:
        raise ToolRefused(f"no attempt {attempt_id} to read: you may read this problem's attempts and the best "
                          "attempts of the similar problems the brief lists")
    attempt, row = found
    path = args.get("path")
    if path is None or path == "":
        return ToolResult(render_attempt(attempt, row, own_problem=row.id == box.bench.problem_id))
    files = {s.get("path"): s.get("content", "") for s in attempt.solution.get("sources", [])}
    if path not in files:
        raise ToolRefused(f"attempt {attempt_id} has no file {path!r}; files: {', '.join(map(str, files))}")
    return ToolResult(f"attempt {attempt_id}, {path}:\n```{_fence(path)} path={path}\n"
                      + clip(files[path], FILE_CHARS) + "\n```")


async def _note(box, args: dict[str, Any]) -> ToolResult:
    text = args.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ToolRefused("text must be a non-empty string")
    if box.notes_written >= MAX_NOTES_PER_TURN:
        raise ToolRefused(f"at most {MAX_NOTES_PER_TURN} notes a turn")
    text = " ".join(text.split())
    cut = len(text) > MAX_NOTE_CHARS
    box.bench.add_note(text[:MAX_NOTE_CHARS])
    box.notes_written += 1
    return ToolResult("noted on the board of your op family" + (f" (cut to {MAX_NOTE_CHARS} characters)" if cut
                                                                else ""))


TOOLS: tuple[Tool, ...] = (
    Tool("attempt", "Read an earlier attempt: its verdict per workload, note, diff to its parent and sources (all "
                    "clipped; give path to read one source file whole). Any attempt of this problem, or the best "
                    "attempt of a similar problem the brief lists.", _attempt,
         {"id": {"type": "integer"}, "path": {"type": "string"}}, ("id",)),
    Tool("note", f"Put a short finding (at most {MAX_NOTE_CHARS} characters) on the notes board of your problem's "
                 "op family, for the other agents: what worked, what did not and why. At most "
                 f"{MAX_NOTES_PER_TURN} a turn.", _note, {"text": {"type": "string"}}, ("text",)),
)
