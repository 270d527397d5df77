"""Export the best solution of every problem of a run.

``sol-execbench``: ``OUT/<subset>/<name>/solution.json``, the best attempt's solution made self-contained for
upstream's evaluator by :func:`core.report.upstream_export.to_upstream` (tunables baked in, the fast path as a
torch extension, kernelfleet's hardware names mapped), then checked against the deviation rules; each
:class:`ExportedProblem` says what was written and what deviation remains. Problems without a passing attempt, or
whose solution cannot be exported, are skipped; :func:`not_exported` says which and why.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from core.errors import SpecError
from core.report.upstream_export import UpstreamSolution, to_upstream
from core.solution.io import parse_solution, solution_to_dict
from core.store.model import AttemptRow, ProblemRow
from core.store.queries import Queries

FORMATS = ("sol-execbench",)
SOLUTION_FILE = "solution.json"


class ExportError(ValueError):
    pass


@dataclass(frozen=True)
class ExportedProblem:
    key: str
    path: Path
    attempt_id: int
    form: str  # what was written, in a few words
    changes: tuple[str, ...]  # what the export changed, one line each
    deviations: tuple[str, ...]  # where upstream may still reject or differ, one line each
    verified: str = ""  # the attempt's re-verification with upstream's full rules (core.fleet.verify); "" none


def _safe_part(text: str) -> bool:
    return bool(text) and text not in (".", "..") and "/" not in text and "\\" not in text and "\0" not in text


def _plan(reader: Queries) -> tuple[list[tuple[ProblemRow, AttemptRow, UpstreamSolution]], list[tuple[str, str]]]:
    """(problem, attempt, exported solution) to write, and (key, why) for the problems that are skipped."""
    chosen: list[tuple[ProblemRow, AttemptRow, UpstreamSolution]] = []
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
            try:
                exported = to_upstream(parse_solution(attempt.solution, f"attempt {attempt.id}"))
            except SpecError as exc:
                skipped.append((problem.key, f"best attempt {attempt.id} cannot be exported: {exc}"))
                continue
            chosen.append((problem, attempt, exported))
    return chosen, skipped


def _check_format(format: str) -> None:
    if format not in FORMATS:
        raise ExportError(f"unknown export format {format!r}; known: {', '.join(FORMATS)}")


def export_problems(reader: Queries, out_dir: str | Path, format: str = "sol-execbench") -> list[ExportedProblem]:
    """Write the best solution of each problem that has one, in problem order; what was written and what remains."""
    _check_format(format)
    out = Path(out_dir)
    chosen, _ = _plan(reader)
    done = []
    for problem, attempt, exported in chosen:
        target = out / problem.subset / problem.name / SOLUTION_FILE
        _write_atomic(target, json.dumps(solution_to_dict(exported.solution), indent=2) + "\n")
        done.append(ExportedProblem(problem.key, target, attempt.id, exported.form, exported.changes,
                                    exported.deviations, attempt.verified))
    return done


def export_best(reader: Queries, out_dir: str | Path, format: str = "sol-execbench") -> list[Path]:
    """Write the best solution of each problem that has one; returns the files written, in problem order."""
    return [done.path for done in export_problems(reader, out_dir, format)]


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
