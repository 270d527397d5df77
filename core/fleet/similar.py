"""Which problems of a run are alike: the same op family, or references that call much the same operations.

A reference's operations are the names its ``run`` calls, directly or through the module's own functions
(``torch.relu`` and ``x.relu()`` both give "relu", ``a @ b`` gives "matmul"), read from its source with ``ast``
(nothing runs; a custom-inputs generator is not ``run``'s, so its ``randn`` calls do not count). A problem's op
family is its ``op`` when the run knows one (upstream's ``op_type``), else the first of ``FAMILY_RULES`` its
reference's operations match ("gemm", "norm", "attention", ...; "elementwise" when none does), else its subset (the
folder it sits in) when the reference does not parse. The family names the notes board agents share. All pure.
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
ENTRY = "run"  # the reference's entry point (SOL-ExecBench's)


@dataclass(frozen=True)
class FamilyRule:
    """A reference is of ``family`` when it calls one of ``calls`` (or a name holding one of ``fragments``) and,
    when ``with_calls`` is given, one of those too. Names are compared without a trailing ``_`` (in-place ops)."""

    family: str
    calls: frozenset[str] = frozenset()
    with_calls: frozenset[str] = frozenset()
    fragments: tuple[str, ...] = ()

    def matches(self, calls: frozenset[str]) -> bool:
        hit = bool(calls & self.calls) or any(f in c for f in self.fragments for c in calls)
        return hit and (not self.with_calls or bool(calls & self.with_calls))


_GEMM = frozenset({"matmul", "mm", "bmm", "linear", "addmm", "baddbmm", "addbmm", "einsum", "addmv", "mv"})
# The first rule that matches names the family: what usually dominates a fused reference's time comes first.
FAMILY_RULES: tuple[FamilyRule, ...] = (
    FamilyRule("attention", frozenset({"scaled_dot_product_attention", "flash_attn_func", "flex_attention"})),
    FamilyRule("attention", frozenset({"softmax"}), _GEMM),
    FamilyRule("conv", frozenset({"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                                  "conv_transpose3d", "convolution"})),
    FamilyRule("fft", frozenset({"fft", "ifft", "rfft", "irfft", "fft2", "rfft2", "irfft2", "fftn", "rfftn",
                                 "irfftn", "stft", "istft"})),
    FamilyRule("rope", fragments=("rope", "rotary", "rotate_half")),
    FamilyRule("rope", frozenset({"cos"}), frozenset({"sin"})),
    FamilyRule("scatter", frozenset({"index_add", "index_copy", "index_put", "index_select", "index_fill", "scatter",
                                     "scatter_add", "scatter_reduce", "gather", "take_along_dim", "one_hot",
                                     "bincount", "histc", "topk", "sort", "argsort", "unique", "embedding",
                                     "masked_scatter", "masked_select", "nonzero"})),
    FamilyRule("gemm", _GEMM),
    FamilyRule("norm", frozenset({"rms_norm", "layer_norm", "group_norm", "batch_norm", "instance_norm",
                                  "local_response_norm", "normalize", "vector_norm", "norm", "rsqrt", "var", "std",
                                  "var_mean", "std_mean"})),
    FamilyRule("norm", frozenset({"mean"}), frozenset({"sqrt", "pow"})),
    FamilyRule("softmax", frozenset({"softmax", "log_softmax", "logsumexp"})),
    FamilyRule("reduction", frozenset({"sum", "mean", "cumsum", "cumprod", "amax", "amin", "argmax", "argmin",
                                       "prod", "nansum", "logcumsumexp", "all", "any"})),
)
DEFAULT_FAMILY = "elementwise"


def op_family(row: ProblemRow, reference: str = "") -> str:
    """The op family of a problem: its op type, else its ``reference``'s (``reference_family``), else its subset."""
    return row.op or reference_family(reference) or row.subset


@functools.lru_cache(maxsize=4096)
def reference_family(source: str) -> str:
    """The family of the first of ``FAMILY_RULES`` the reference's operations match, DEFAULT_FAMILY when none does;
    "" when the source does not parse (or is empty)."""
    if not source.strip() or _parsed(source) is None:
        return ""
    calls = frozenset(c.rstrip("_") for c in reference_calls(source))
    return next((rule.family for rule in FAMILY_RULES if rule.matches(calls)), DEFAULT_FAMILY)


@functools.lru_cache(maxsize=4096)
def _parsed(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


@functools.lru_cache(maxsize=4096)
def reference_calls(source: str) -> frozenset[str]:
    """The names a reference's ``run`` calls, itself or through the module's functions it calls (the whole module's
    calls when it has no ``run``), less the common ones; ``a @ b`` counts as "matmul". Empty when it does not
    parse."""
    tree = _parsed(source)
    if tree is None:
        return frozenset()
    functions = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    todo: list[ast.AST] = [functions[ENTRY]] if ENTRY in functions else [tree]
    visited = {ENTRY}
    names = set()
    while todo:
        for node in ast.walk(todo.pop()):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                names.add("matmul")
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name is None:
                continue
            names.add(name)
            if name in functions and name not in visited:
                visited.add(name)
                todo.append(functions[name])
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
    family = op_family(row, references.get(row.id, ""))
    found = []
    for other in rows:
        if other.id == row.id:
            continue
        score = similarity(mine, reference_calls(references.get(other.id, "")))
        if family and op_family(other, references.get(other.id, "")) == family:
            found.append((2.0 + score, other, f"same op family {family}"))
        elif score >= MIN_SIMILARITY:
            found.append((score, other, f"similar reference operations ({score:.2f})"))
    found.sort(key=lambda f: (-f[0], f[1].id))
    return [(other, why) for _, other, why in found]
