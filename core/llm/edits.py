"""Edits to a file's text short of rewriting it: an exact replacement, or a unified diff applied with strict context.

Both are pure functions of the text; each either returns the whole new text or raises :class:`EditRefused` saying
why, and changes nothing then (a diff's hunks apply all or none).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


class EditRefused(ValueError):
    """An edit that cannot be made as given; the message says why."""


def replace_once(text: str, old: str, new: str) -> str:
    """``text`` with ``old`` replaced by ``new``; ``old`` must occur exactly once."""
    if not old:
        raise EditRefused("old must be a non-empty part of the file")
    found = text.count(old)
    if found != 1:
        raise EditRefused(f"old occurs {found} times in the file; it must occur exactly once"
                          + (" (give more of the surrounding text)" if found else
                             " (copy it exactly, whitespace included; read_file shows the file)"))
    return text.replace(old, new, 1)


@dataclass(frozen=True)
class Hunk:
    header: str  # its "@@ -a,b +c,d @@" line
    start: int  # the 0-based line the header says the old side starts at
    old: tuple[str, ...]  # context and removed lines
    new: tuple[str, ...]  # context and added lines


def parse_hunks(diff: str) -> list[Hunk]:
    """The hunks of a unified diff (file headers ``---``/``+++`` are skipped; line counts are not trusted)."""
    hunks: list[Hunk] = []
    header, start, old, new = "", 0, [], []
    for line in diff.splitlines():
        match = _HUNK.match(line)
        if match:
            if header:
                hunks.append(Hunk(header, start, tuple(old), tuple(new)))
            # "-a,b" starts at line a (1-based); with b = 0 (nothing old) it inserts after line a.
            first = int(match.group(1))
            header, start, old, new = line, first if match.group(2) == "0" else max(0, first - 1), [], []
        elif not header or line.startswith("\\"):  # before the first hunk, or "\ No newline at end of file"
            continue
        elif line.startswith("-"):
            old.append(line[1:])
        elif line.startswith("+"):
            new.append(line[1:])
        else:  # a context line; an empty one is an empty line whose leading space was lost
            old.append(line[1:])
            new.append(line[1:])
    if header:
        hunks.append(Hunk(header, start, tuple(old), tuple(new)))
    if not hunks:
        raise EditRefused("the diff has no hunk (a line starting with @@ -a,b +c,d @@)")
    return hunks


def apply_diff(text: str, diff: str) -> str:
    """``text`` with every hunk of ``diff`` applied in order. A hunk's context and removed lines must match the
    text exactly (no fuzz); where they match more than once, the place nearest the header's line number wins."""
    lines = text.split("\n")
    at = 0
    for number, hunk in enumerate(parse_hunks(diff), 1):
        if not hunk.old:
            place = min(max(hunk.start, at), len(lines))  # a pure insertion: where the header says
        else:
            places = [i for i in range(at, len(lines) - len(hunk.old) + 1)
                      if tuple(lines[i:i + len(hunk.old)]) == hunk.old]
            if not places:
                raise EditRefused(f"hunk {number} does not apply (its context and removed lines are not in the "
                                  f"file as given; nothing was changed): {hunk.header}")
            place = min(places, key=lambda i: abs(i - hunk.start))
        lines[place:place + len(hunk.old)] = hunk.new
        at = place + len(hunk.new)
    return "\n".join(lines)
