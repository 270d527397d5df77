"""Static checks of a candidate before anything is built or run: only faults that are certain, so a candidate
failing one could not have passed an evaluation (a false alarm would throw away a good kernel).

- Python syntax of every ``.py`` source (``ast.parse``: nothing is executed or imported).
- A ``.py`` entry point names a function bound at the entry module's top level (a ``def``, an assignment, an
  import...). A module that could bind names in ways the parse cannot see (``import *``, ``globals()``, a module
  ``__getattr__``, ``setattr``, ``exec``, ``sys.modules``...) is given the benefit of the doubt.
- When that name is bound once, by a plain undecorated ``def``, its positional parameters fit the call the evaluator
  makes: the definition's inputs in order, then its outputs with destination passing style, all positional.

The fast path's need for a ``.cu`` source and the other spec rules are checked by ``core.solution.support.run_kind``
when the candidate is prepared (a COMPILE_ERROR without device time), so they are not repeated here.

Pure: a Solution and the definition's input and output names in, the faults found out (empty: nothing found).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Sequence

from core.solution.schema import Solution

# Text that lets a module bind names no parse can see: where one appears, the entry point is not judged.
_DYNAMIC = re.compile(r"import\s+\*|\bglobals\s*\(|\bvars\s*\(|\bsetattr\s*\(|\bexec\s*\(|\beval\s*\(|"
                      r"__getattr__|__dict__|sys\.modules|__builtins__|\bimportlib\b|__import__")


def static_faults(solution: Solution, inputs: Sequence[str], outputs: Sequence[str]) -> tuple[str, ...]:
    """Faults that make ``solution`` certain to fail, each one line naming the file (empty: none found). Cached
    by what they depend on: a tuner's trials differ only in tunables.json, and parsing costs a millisecond."""
    python = tuple((s.path, s.content) for s in solution.sources if s.path.endswith(".py"))
    return _faults_of(python, solution.spec.entry_point, solution.spec.destination_passing_style, tuple(inputs),
                      tuple(outputs))


@functools.lru_cache(maxsize=512)
def _faults_of(python: tuple[tuple[str, str], ...], entry_point: str, dps: bool, inputs: tuple[str, ...],
               outputs: tuple[str, ...]) -> tuple[str, ...]:
    faults: list[str] = []
    trees: dict[str, ast.Module] = {}
    for path, content in python:
        try:
            trees[path] = ast.parse(content, filename=path)
        except SyntaxError as exc:
            faults.append(f"{path}:{exc.lineno or 0}: error: {exc.msg}")
        except ValueError as exc:  # null bytes
            faults.append(f"{path}: error: {exc}")
    entry_file, _, symbol = entry_point.partition("::")
    tree = trees.get(entry_file)
    if tree is None or _DYNAMIC.search(dict(python)[entry_file]):
        return tuple(faults)
    bindings = _top_level_bindings(tree, symbol)
    if bindings is None:
        return tuple(faults)
    if not bindings:
        faults.append(f"{entry_file}: no function '{symbol}' at module level (entry point {entry_point})")
        return tuple(faults)
    if len(bindings) == 1 and isinstance(bindings[0], ast.FunctionDef) and not bindings[0].decorator_list:
        names = [*inputs, *(outputs if dps else ())]
        fault = _arity_fault(bindings[0], names, len(inputs), dps)
        if fault is not None:
            faults.append(f"{entry_file}:{bindings[0].lineno}: error: {fault}")
    return tuple(faults)


def _top_level_bindings(tree: ast.Module, symbol: str) -> list[ast.AST] | None:
    """The module-level statements and nodes that bind ``symbol``; None when a function declares it global (it
    may be bound by a call at import time)."""
    found: list[ast.AST] = []

    def visit(node: ast.AST) -> bool:
        """False as soon as the name's bindings cannot be known."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == symbol:
                found.append(node)
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Global, ast.Nonlocal)) and symbol in inner.names:
                    return False
            return True  # its body's names are its own
        if isinstance(node, ast.Lambda):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound = alias.asname or (alias.name.split(".")[0] if isinstance(node, ast.Import) else alias.name)
                if bound == symbol:
                    found.append(node)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id == symbol:
            found.append(node)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name == symbol:
            found.append(node)
        elif isinstance(node, ast.MatchMapping) and node.rest == symbol:
            found.append(node)
        elif isinstance(node, ast.ExceptHandler) and node.name == symbol:
            found.append(node)
        return all(visit(child) for child in ast.iter_child_nodes(node))

    return found if visit(tree) else None


def _arity_fault(fn: ast.FunctionDef, names: list[str], n_inputs: int, dps: bool) -> str | None:
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    required = len(positional) - len(args.defaults)
    given = len(names)
    called = (f"the evaluator calls it with {given} positional argument{'s' if given != 1 else ''}: "
              f"{', '.join(names[:n_inputs]) or 'no inputs'}"
              + (f", then the outputs {', '.join(names[n_inputs:])} (destination passing style)" if dps and
                 given > n_inputs else ""))
    if required > given:
        return f"{fn.name}() needs {required} positional arguments; {called}"
    if args.vararg is None and len(positional) < given:
        return f"{fn.name}() takes {len(positional)} positional argument{'s' if len(positional) != 1 else ''}; {called}"
    missing = [a.arg for a, default in zip(args.kwonlyargs, args.kw_defaults) if default is None]
    if missing:
        return f"{fn.name}() needs keyword-only argument(s) {', '.join(missing)}, never passed; {called}"
    return None
