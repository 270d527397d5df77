"""Tunable parameters a candidate declares, in a source file named ``tunables.json`` at the solution root.

Keeping them in a source file (not a new solution.json field) leaves solution.json upstream-valid, and makes a
tuning step a one-file change: :func:`with_values` rewrites only ``tunables.json``, in one canonical layout with
one parameter per line, so the diff between two candidates shows exactly the parameters that changed::

    {
      "space": {
        "BLOCK": [128, 256, 512],
        "VEC": [1, 2, 4, 8]
      },
      "values": {
        "BLOCK": 256,
        "VEC": 4
      }
    }

Rules: names are UPPER_SNAKE_CASE identifiers (valid C macros and Python constants); each space is a non-empty
list of distinct ints, floats, booleans or short word-like strings; values must be in their space (compared
with their JSON type: ``1``, ``1.0`` and ``true`` differ); a value left out takes the first option.

How a candidate sees them:

* CUDA sources get them as macros (``-DBLOCK=256``; booleans as 1/0) through :func:`defines`. A source that
  should also build without kernelfleet (upstream's torch extension) can give defaults with
  ``#ifndef BLOCK`` / ``#define BLOCK 256`` / ``#endif``.
* Python sources import the generated module ``kernelfleet_tunables`` (written next to the sources at the
  solution root by the loader): ``from kernelfleet_tunables import BLOCK``. It also holds ``values`` and
  ``space`` dicts. Note that upstream's runner does not generate it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from core.errors import SpecError
from core.solution.schema import Solution, SourceFile

TUNABLES_FILE = "tunables.json"
TUNABLES_MODULE = "kernelfleet_tunables"
TUNABLES_MODULE_FILE = TUNABLES_MODULE + ".py"

TunableValue = bool | int | float | str

_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_MAX_NAME = 64
_WORD = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
_MAX_STR = 32
_KEYS = ("space", "values")


@dataclass(frozen=True)
class Tunables:
    """A declared parameter space and the chosen value of every parameter (defaults filled in)."""

    space: Mapping[str, tuple[TunableValue, ...]]
    values: Mapping[str, TunableValue]

    def __post_init__(self) -> None:
        object.__setattr__(self, "space", MappingProxyType(dict(self.space)))
        object.__setattr__(self, "values", MappingProxyType(dict(self.values)))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.space)

    def size(self) -> int:
        """How many configurations the space holds."""
        n = 1
        for options in self.space.values():
            n *= len(options)
        return n


# ---------------------------------------------------------------- parsing


def parse_tunables(
    text: str,
    *,
    solution_file: str | Path | None = None,
    content_field: str | None = None,
    file: str = TUNABLES_FILE,
) -> Tunables:
    """Parse and validate tunables.json text.

    A text that is not a JSON object is reported against the solution file and ``content_field`` (e.g.
    ``sol.json: sources[2].content: tunables.json is not valid JSON: ...``); faults inside it against
    ``file`` and the key (``tunables.json: space.BLOCK: ...``).
    """
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        where = (solution_file, content_field) if content_field else (file, "<file>")
        detail = f"line {exc.lineno} column {exc.colno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else exc
        raise SpecError(where[0], where[1], f"{TUNABLES_FILE} is not valid JSON: {detail}") from None
    return tunables_from_dict(data, file=file)


def tunables_from_dict(data: Any, *, file: str = TUNABLES_FILE) -> Tunables:
    if not isinstance(data, dict):
        raise SpecError(file, "<file>", f"expected an object with \"space\" and \"values\", got {type(data).__name__}")
    for key in data:
        if key not in _KEYS:
            raise SpecError(file, str(key), "unknown key (allowed: space, values)")
    if "space" not in data:
        raise SpecError(file, "space", "missing (required)")
    raw_space = data["space"]
    if not isinstance(raw_space, dict):
        raise SpecError(file, "space", "expected an object mapping each name to its list of options")
    space: dict[str, tuple[TunableValue, ...]] = {}
    for name, options in raw_space.items():
        _check_name(name, f"space.{name}", file)
        if not isinstance(options, list) or not options:
            raise SpecError(file, f"space.{name}", "expected a non-empty list of options")
        for i, option in enumerate(options):
            _check_value(option, f"space.{name}[{i}]", file)
            if any(_same(option, earlier) for earlier in options[:i]):
                raise SpecError(file, f"space.{name}[{i}]", f"{_fmt(option)} is listed twice")
        space[name] = tuple(options)

    raw_values = data.get("values", {})
    if not isinstance(raw_values, dict):
        raise SpecError(file, "values", "expected an object mapping each name to its chosen value")
    values: dict[str, TunableValue] = {}
    for name in raw_values:
        if name not in space:
            raise SpecError(file, f"values.{name}", "not declared in \"space\"")
    for name, options in space.items():
        if name in raw_values:
            value = raw_values[name]
            _check_in_space(name, value, options, f"values.{name}", file)
            values[name] = value
        else:
            values[name] = options[0]
    return Tunables(space, values)


def tunables_index(solution: Solution) -> int | None:
    """Index of tunables.json among the sources, or None."""
    for i, src in enumerate(solution.sources):
        if src.path == TUNABLES_FILE:
            return i
    return None


def get_tunables(solution: Solution) -> Tunables | None:
    """The solution's tunables, or None when it declares none."""
    i = tunables_index(solution)
    if i is None:
        return None
    return parse_tunables(solution.sources[i].content, content_field=f"sources[{i}].content")


def validate_solution_tunables(solution: Solution, file: str | Path | None = None) -> Tunables | None:
    """Called by parse_solution: tunables.json (if any) must be valid, and the generated module name is taken."""
    i = tunables_index(solution)
    if i is None:
        return None
    for j, src in enumerate(solution.sources):
        if src.path == TUNABLES_MODULE_FILE:
            raise SpecError(
                file, f"sources[{j}].path",
                f"'{TUNABLES_MODULE_FILE}' is generated from {TUNABLES_FILE}; remove this source",
            )
    return parse_tunables(solution.sources[i].content, solution_file=file, content_field=f"sources[{i}].content")


# ---------------------------------------------------------------- changing values


def with_values(solution: Solution, updates: Mapping[str, TunableValue]) -> Solution:
    """A new Solution whose tunables.json carries ``updates`` (other parameters keep their values).

    Only tunables.json changes, and it is written in the canonical layout (:func:`format_tunables`), so two
    candidates made by this function differ exactly in the lines of the parameters that changed.
    """
    i = tunables_index(solution)
    if i is None:
        raise SpecError(None, TUNABLES_FILE, "this solution declares no tunables")
    current = parse_tunables(solution.sources[i].content, content_field=f"sources[{i}].content")
    values = dict(current.values)
    for name, value in updates.items():
        if name not in current.space:
            raise SpecError(TUNABLES_FILE, f"values.{name}", f"not declared in \"space\" (declared: "
                            f"{', '.join(current.names) or 'none'})")
        _check_in_space(name, value, current.space[name], f"values.{name}", TUNABLES_FILE)
        values[name] = value
    text = format_tunables(Tunables(current.space, values))
    sources = list(solution.sources)
    sources[i] = SourceFile(TUNABLES_FILE, text)
    return dataclasses.replace(solution, sources=tuple(sources))


def format_tunables(tunables: Tunables) -> str:
    """The canonical tunables.json text: one parameter per line in both sections, values all spelled out."""

    def dump(v: Any) -> str:
        return json.dumps(v, separators=(", ", ": "))

    space_lines = [f"    {json.dumps(n)}: {dump(list(opts))}" for n, opts in tunables.space.items()]
    value_lines = [f"    {json.dumps(n)}: {dump(tunables.values[n])}" for n in tunables.space]
    parts = ["{", '  "space": {' + ("\n" + ",\n".join(space_lines) + "\n  " if space_lines else "") + "},"]
    parts.append('  "values": {' + ("\n" + ",\n".join(value_lines) + "\n  " if value_lines else "") + "}")
    parts.append("}")
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------- what the candidate sees


def defines(source: Tunables | Solution | None) -> dict[str, str | int | float]:
    """Macro definitions for nvcc (``-DNAME=VALUE``): booleans become 1/0, strings are passed as bare tokens."""
    tunables = get_tunables(source) if isinstance(source, Solution) else source
    if tunables is None:
        return {}
    out: dict[str, str | int | float] = {}
    for name, value in tunables.values.items():
        out[name] = int(value) if isinstance(value, bool) else value
    return out


def python_module_source(source: Tunables | Solution | None) -> str | None:
    """Text of the generated ``kernelfleet_tunables`` module, or None without tunables."""
    tunables = get_tunables(source) if isinstance(source, Solution) else source
    if tunables is None:
        return None
    lines = [
        f'"""Generated by kernelfleet from {TUNABLES_FILE}: this candidate\'s parameter values. Do not edit."""',
        "",
    ]
    lines += [f"{name} = {value!r}" for name, value in tunables.values.items()]
    lines.append("")
    lines.append("values = {" + ", ".join(f"{n!r}: {v!r}" for n, v in tunables.values.items()) + "}")
    lines.append("space = {" + ", ".join(f"{n!r}: {tuple(o)!r}" for n, o in tunables.space.items()) + "}")
    return "\n".join(lines) + "\n"


def generated_files(solution: Solution) -> dict[str, str]:
    """Files kernelfleet adds next to the sources: the tunables module when tunables.json exists."""
    text = python_module_source(solution)
    return {TUNABLES_MODULE_FILE: text} if text is not None else {}


# ---------------------------------------------------------------- helpers


def _check_name(name: str, field: str, file: str) -> None:
    if not _NAME.match(name) or len(name) > _MAX_NAME:
        raise SpecError(file, field, f"{name!r} is not an UPPER_SNAKE_CASE name (like BLOCK or TILE_M)")


def _check_value(value: Any, field: str, file: str) -> None:
    if isinstance(value, bool) or isinstance(value, int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SpecError(file, field, f"{value!r} is not a finite number")
        return
    if isinstance(value, str):
        if len(value) > _MAX_STR or not _WORD.match(value):
            raise SpecError(
                file, field,
                f"{value!r}: a string option must be a short word (letters, digits, _ . + -; at most {_MAX_STR})",
            )
        return
    raise SpecError(file, field, f"expected an int, float, boolean or short string, got {_fmt(value)}")


def _check_in_space(name: str, value: Any, options: tuple[TunableValue, ...], field: str, file: str) -> None:
    _check_value(value, field, file)
    if not any(_same(value, option) for option in options):
        raise SpecError(file, field, f"{_fmt(value)} is not one of {_fmt(list(options))}")


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _fmt(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")
