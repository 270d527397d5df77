"""The first candidate of each problem: a solution shipped in its ``solutions/`` folder that fits the run's device
and languages, else the reference itself."""

from __future__ import annotations

from pathlib import Path

from core.errors import SpecError
from core.problem.schema import Problem
from core.solution.from_reference import reference_as_solution
from core.solution.io import load_solution
from core.solution.schema import Solution


REFERENCE_ORIGIN = "the reference (no shipped solution fits this run)"


def pick_seed(problem: Problem, device: str, languages: tuple[str, ...]) -> tuple[Solution, str]:
    """(solution, where it came from)."""
    folder = Path(problem.path) / "solutions"
    files = sorted(folder.glob("*.json"), key=lambda p: (not p.name.startswith("seed"), p.name)) \
        if folder.is_dir() else []
    for path in files:
        try:
            solution = load_solution(path)
        except SpecError:
            continue
        language = solution.spec.languages[0].value
        if language not in languages or (device == "cpu" and language != "pytorch"):
            continue
        return solution, f"solutions/{path.name}"
    return reference_as_solution(problem), REFERENCE_ORIGIN
