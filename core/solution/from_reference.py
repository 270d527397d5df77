"""A problem's own reference as a candidate solution: a value-returning pytorch solution that must pass."""

from __future__ import annotations

from core.problem.schema import Problem
from core.solution.io import parse_solution
from core.solution.schema import Solution


REFERENCE_AUTHOR = "reference"


def reference_as_solution(problem: Problem) -> Solution:
    return parse_solution({
        "name": f"reference_{problem.name}", "definition": problem.name, "author": REFERENCE_AUTHOR,
        "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run",
                 "destination_passing_style": False},
        "sources": [{"path": "main.py", "content": problem.definition.reference}],
    })


def is_reference(solution: dict) -> bool:
    """Whether a solution (as stored) is a problem's reference made a solution: the seed of a problem that ships
    no kernel for the run."""
    return isinstance(solution, dict) and solution.get("author") == REFERENCE_AUTHOR
