"""The diff viewer's model: an attempt's title line, a unified diff as side-by-side rows, and which attempt is
shown. Pure functions and frozen dataclasses."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace

from core.store.model import AttemptRow
from tui.detail.model import attempt_status
from tui.formatting import fmt_sol, fmt_x
from tui.snapshot import Snapshot


def attempt_title(a: AttemptRow, index: int, count: int, s: Snapshot) -> str:
    parent = f" ← #{a.parent_id}" if a.parent_id else ""
    where = f" · on {a.node} " + (f"GPU {a.gpu}" if a.gpu is not None else "cpu") if a.node else ""
    return (f"attempt #{a.id}{parent} ({index + 1}/{count}) · {s.agent_name(a.agent_id)} · {attempt_status(a)} · "
            f"speedup {fmt_x(a.speedup)} · SOL {fmt_sol(a.sol)}{where}")


@dataclass(frozen=True)
class SideRow:
    """One row of a side-by-side diff. kind: "file" (a file header), "hunk" (a hunk header), "equal", "replace",
    "delete", "insert"."""

    kind: str
    left_no: int | None = None
    left: str = ""
    right_no: int | None = None
    right: str = ""


def _hunk_start(header: str) -> tuple[int, int]:
    # "@@ -12,7 +12,9 @@ ..."
    try:
        parts = header.split()
        return abs(int(parts[1].split(",")[0])), int(parts[2].split(",")[0].lstrip("+"))
    except (IndexError, ValueError):
        return 1, 1


def side_by_side(diff: str) -> list[SideRow]:
    """A unified diff as side-by-side rows: each hunk's old and new lines aligned by difflib's opcodes."""
    rows: list[SideRow] = []
    old: list[str] = []
    new: list[str] = []
    start = (1, 1)

    def flush() -> None:
        if not old and not new:
            return
        matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
        lo, ro = start
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            for k in range(max(i2 - i1, j2 - j1)):
                li, ri = i1 + k, j1 + k
                has_l, has_r = li < i2, ri < j2
                rows.append(SideRow(tag if tag != "replace" or (has_l and has_r) else ("delete" if has_l else "insert"),
                                    lo + li if has_l else None, old[li] if has_l else "",
                                    ro + ri if has_r else None, new[ri] if has_r else ""))
        old.clear()
        new.clear()

    lines = diff.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            flush()
            a, b = line[4:].strip(), lines[i + 1][4:].strip()
            rows.append(SideRow("file", left=a, right=b))
            i += 2
            continue
        if line.startswith("@@"):
            flush()
            start = _hunk_start(line)
            rows.append(SideRow("hunk", left=line, right=""))
        elif line.startswith("-"):
            old.append(line[1:])
        elif line.startswith("+"):
            new.append(line[1:])
        elif line.startswith(" ") or line == "":
            old.append(line[1:])
            new.append(line[1:])
        i += 1
    flush()
    return rows


@dataclass(frozen=True)
class DiffView:
    """The diff viewer's state: which of the problem's attempts is shown, and how."""

    attempt_ids: tuple[int, ...]
    index: int = 0
    split: bool = False

    def step(self, by: int) -> DiffView:
        if not self.attempt_ids:
            return self
        return replace(self, index=min(len(self.attempt_ids) - 1, max(0, self.index + by)))

    def toggled(self) -> DiffView:
        return replace(self, split=not self.split)

    @property
    def current(self) -> int | None:
        return self.attempt_ids[self.index] if self.attempt_ids else None
