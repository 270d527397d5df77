"""A problem's own reference as a candidate solution: a value-returning pytorch solution that must pass."""

from __future__ import annotations

from core.problem.schema import Problem
from core.solution.io import parse_solution
from core.solution.schema import Solution


def reference_as_solution(problem: Problem) -> Solution:
    return parse_solution({
        "name": f"reference_{problem.name}", "definition": problem.name, "author": "reference",
        "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run",
                 "destination_passing_style": False},
        "sources": [{"path": "main.py", "content": problem.definition.reference}],
    })
