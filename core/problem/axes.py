"""Axis expressions such as ``hidden_size // 128``, parsed into a small AST and evaluated without ``eval``."""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
# Checking and evaluating recurse once per operator; SOL-ExecBench's longest expression has 57 characters.
MAX_EXPRESSION_CHARS = 400


class AxisExpressionError(ValueError):
    pass


def parse_expression(text: str) -> ast.expr:
    """Parse and check an axis expression: integer literals, axis names, ``+ - * // %``, unary sign, parentheses."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise AxisExpressionError(f"longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise AxisExpressionError(f"not a valid expression: {text!r} ({exc.msg})") from None
    except (RecursionError, MemoryError, ValueError):
        raise AxisExpressionError("nested too deeply to parse") from None
    _check(tree.body, text)
    return tree.body


def _check(node: ast.AST, text: str) -> None:
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINARY:
            raise AxisExpressionError(f"operator {type(node.op).__name__} not allowed in {text!r} (use + - * // %)")
        _check(node.left, text)
        _check(node.right, text)
    elif isinstance(node, ast.UnaryOp):
        if type(node.op) not in _UNARY:
            raise AxisExpressionError(f"operator {type(node.op).__name__} not allowed in {text!r}")
        _check(node.operand, text)
    elif isinstance(node, ast.Constant):
        if type(node.value) is not int:
            raise AxisExpressionError(f"only integer literals are allowed in {text!r}, got {node.value!r}")
    elif isinstance(node, ast.Name):
        pass
    else:
        raise AxisExpressionError(f"{type(node).__name__} not allowed in axis expression {text!r}")


def names_in(node: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def evaluate(node: ast.expr, values: Mapping[str, int]) -> int:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        try:
            return values[node.id]
        except KeyError:
            raise AxisExpressionError(f"unknown axis {node.id!r}") from None
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](evaluate(node.operand, values))
    if isinstance(node, ast.BinOp):
        left, right = evaluate(node.left, values), evaluate(node.right, values)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            raise AxisExpressionError("division by zero")
        return _BINARY[type(node.op)](left, right)
    raise AxisExpressionError(f"cannot evaluate {ast.dump(node)}")
