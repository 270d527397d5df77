"""Which problems of a run are alike: the same op family, or references that call much the same operations.

A problem's op family is its ``op`` when the run knows one, else its subset (the folder it sits in: "norm",
"gemm", ...). A reference's operations are the names it calls (``torch.relu`` and ``x.relu()`` both give
"relu"), read from its source with ``ast`` (nothing runs). All pure.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

from core.store.model import ProblemRow

# Calls too common to say anything about what a reference computes.
_COMMON = frozenset({"to", "float", "contiguous", "view", "reshape", "size", "shape", "empty", "empty_like", "zeros",
                     "zeros_like", "ones", "ones_like", "int", "len", "range", "tuple", "list", "dict", "isinstance",
                     "super", "no_grad", "inference_mode", "dim", "numel", "item", "clone", "detach", "cpu", "cuda",
                     "type", "print", "min", "max", "abs", "getattr", "setattr", "str", "bool"})
MIN_SIMILARITY = 0.5


def op_family(row: ProblemRow) -> str:
    return row.op or row.subset


@functools.lru_cache(maxsize=4096)
def reference_calls(source: str) -> frozenset[str]:
    """The names a reference's source calls, less the common ones; empty when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return frozenset()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):
                names.add(func.attr)
            elif isinstance(func, ast.Name):
                names.add(func.id)
    return frozenset(names - _COMMON)


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two call sets (0 when either is empty)."""
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


@dataclass(frozen=True)
class SimilarBest:
    """The best passing attempt of a problem like this one, as the brief lists it."""

    problem_id: int
    problem_key: str
    attempt_id: int
    speedup: float | None
    sol: float | None
    language: str
    why: str  # "same op family norm", "similar reference (0.67)"


def similar_problems(row: ProblemRow, references: dict[int, str],
                     rows: list[ProblemRow]) -> list[tuple[ProblemRow, str]]:
    """The problems of ``rows`` like ``row`` (with why), most alike first: the same op family, or references
    (problem id -> source) calling at least MIN_SIMILARITY of the same operations."""
    mine = reference_calls(references.get(row.id, ""))
    found = []
    for other in rows:
        if other.id == row.id:
            continue
        score = similarity(mine, reference_calls(references.get(other.id, "")))
        if op_family(other) == op_family(row) and op_family(row):
            found.append((2.0 + score, other, f"same op family {op_family(row)}"))
        elif score >= MIN_SIMILARITY:
            found.append((score, other, f"similar reference operations ({score:.2f})"))
    found.sort(key=lambda f: (-f[0], f[1].id))
    return [(other, why) for _, other, why in found]
