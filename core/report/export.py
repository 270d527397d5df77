"""Export the best solution of every problem of a run.

``sol-execbench``: ``OUT/<subset>/<name>/solution.json`` holding the best attempt's stored solution dict as
written by :func:`core.solution.io.solution_to_dict`, i.e. a SOL-ExecBench ``solution.json``. Problems without a
passing attempt are skipped; :func:`not_exported` says which and why.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from core.store.model import ProblemRow
from core.store.queries import Queries

FORMATS = ("sol-execbench",)
SOLUTION_FILE = "solution.json"


class ExportError(ValueError):
    pass


def _safe_part(text: str) -> bool:
    return bool(text) and text not in (".", "..") and "/" not in text and "\\" not in text and "\0" not in text


def _plan(reader: Queries) -> tuple[list[tuple[ProblemRow, dict[str, Any]]], list[tuple[str, str]]]:
    """(problem, solution dict) pairs to write, and (key, why) for the problems that are skipped."""
    chosen: list[tuple[ProblemRow, dict[str, Any]]] = []
    skipped: list[tuple[str, str]] = []
    for problem in reader.problems():
        if problem.best_attempt_id is None:
            skipped.append((problem.key, "no passing attempt"))
            continue
        attempt = reader.attempt(problem.best_attempt_id)
        if attempt is None:
            skipped.append((problem.key, f"best attempt {problem.best_attempt_id} is not in the store"))
        elif not attempt.solution:
            skipped.append((problem.key, f"best attempt {attempt.id} has no stored solution"))
        elif not (_safe_part(problem.subset) and _safe_part(problem.name)):
            skipped.append((problem.key, f"subset/name {problem.subset!r}/{problem.name!r} is not a folder name"))
        else:
            chosen.append((problem, attempt.solution))
    return chosen, skipped


def _check_format(format: str) -> None:
    if format not in FORMATS:
        raise ExportError(f"unknown export format {format!r}; known: {', '.join(FORMATS)}")


def export_best(reader: Queries, out_dir: str | Path, format: str = "sol-execbench") -> list[Path]:
    """Write the best solution of each problem that has one; returns the files written, in problem order."""
    _check_format(format)
    out = Path(out_dir)
    chosen, _ = _plan(reader)
    written = []
    for problem, solution in chosen:
        target = out / problem.subset / problem.name / SOLUTION_FILE
        _write_atomic(target, json.dumps(solution, indent=2) + "\n")
        written.append(target)
    return written


def not_exported(reader: Queries) -> list[tuple[str, str]]:
    """(problem key, why) for each problem :func:`export_best` skips."""
    return _plan(reader)[1]


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
