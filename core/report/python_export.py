"""Python sources made to run without kernelfleet: tunables baked in, kernelfleet's launch API renamed.

* ``from kernelfleet_tunables import BLOCK`` becomes ``BLOCK = 256``; ``import kernelfleet_tunables as t`` a
  namespace holding the values (and the ``values`` / ``space`` dicts the generated module has). The values are the
  ones kernelfleet's loader would have given that file: those of the nearest ``kernelfleet_tunables.py`` source in
  its folder or above (a composite's member), else the solution's ``tunables.json``.
* With ``launch_module`` set (a fast-path launcher hosted by the exported extension), imports of
  ``core.solution.runtime`` import that module instead.

Sources are parsed, never run. What cannot be rewritten is returned as one line per problem.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from core.solution.python_imports import TUNABLES_MODULE, ImportSite, import_sites, replace_sites
from core.solution.schema import SourceFile

RUNTIME_MODULE = "core.solution.runtime"
RUNTIME_NAMES = ("load_module", "launch", "current_stream")
TUNABLES_MODULE_FILE = TUNABLES_MODULE + ".py"


@dataclass(frozen=True)
class TunableValues:
    values: Mapping[str, Any]
    space: Mapping[str, tuple[Any, ...]]


@dataclass(frozen=True)
class BakedPython:
    source: SourceFile
    baked: tuple[str, ...]  # "NAME=value" for each tunable written in
    problems: tuple[str, ...]


def generated_module_values(text: str) -> TunableValues | None:
    """The values in a generated ``kernelfleet_tunables.py`` (plain literal assignments); None if it is not one."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                return None
    values = found.pop("values", None)
    space = found.pop("space", {})
    if not isinstance(values, dict):
        values = found
    return TunableValues(values, space if isinstance(space, dict) else {})


def values_for(path: str, root: TunableValues | None, modules: Mapping[str, TunableValues]) -> TunableValues | None:
    """The tunables a Python file at ``path`` sees: the nearest generated module (folder -> values), else the root's."""
    for folder in PurePosixPath(path).parents:
        key = str(folder)
        if key in modules:
            return modules[key]
    return root


def bake_python(source: SourceFile, values: TunableValues | None, launch_module: str | None = None) -> BakedPython:
    sites = import_sites(source.content)
    if sites is None:
        return BakedPython(source, (), (f"{source.path}: not valid Python; its imports were left as they are",))
    baked: list[str] = []
    problems: list[str] = []
    replacements: list[tuple[ImportSite, str]] = []
    for site in sites:
        if site.level:
            continue
        if site.is_from:
            new = _from_import(site, values, launch_module, baked, problems, source.path)
        else:
            new = _plain_import(site, values, launch_module, baked, problems, source.path)
        if new is not None:
            replacements.append((site, new))
    content = replace_sites(source.content, replacements) if replacements else source.content
    return BakedPython(SourceFile(source.path, content), tuple(dict.fromkeys(baked)), tuple(problems))


def _from_import(site: ImportSite, values: TunableValues | None, launch_module: str | None, baked: list[str],
                 problems: list[str], path: str) -> str | None:
    if site.module == TUNABLES_MODULE:
        if values is None:
            problems.append(f"{path} line {site.line}: imports {TUNABLES_MODULE} but the solution declares no tunables")
            return None
        names = [(n, None) for n in (*values.values, "values", "space")] if site.names == (("*", None),) \
            else list(site.names)
        statements = []
        for name, alias in names:
            value = _tunable(name, values)
            if value is _MISSING:
                problems.append(f"{path} line {site.line}: {TUNABLES_MODULE} has no '{name}'")
                return None
            statements.append(f"{alias or name} = {value!r}")
            if name in values.values:
                baked.append(f"{name}={values.values[name]!r}")
        return "; ".join(statements)
    if launch_module is None:
        return None
    if site.module == RUNTIME_MODULE:
        missing = [n for n, _ in site.names if n not in RUNTIME_NAMES]
        if missing:
            problems.append(f"{path} line {site.line}: imports {', '.join(missing)} from {RUNTIME_MODULE}; the "
                            f"export provides only {', '.join(RUNTIME_NAMES)}")
        names = ", ".join(n if a is None else f"{n} as {a}" for n, a in site.names)
        return f"from {launch_module} import {names}"
    if site.module == "core.solution" and any(n == "runtime" for n, _ in site.names):
        if len(site.names) > 1:
            problems.append(f"{path} line {site.line}: imports more than runtime from core.solution")
            return None
        return f"import {launch_module} as {site.names[0][1] or 'runtime'}"
    return None


def _plain_import(site: ImportSite, values: TunableValues | None, launch_module: str | None, baked: list[str],
                  problems: list[str], path: str) -> str | None:
    statements, changed = [], False
    for name, alias in site.names:
        if name == TUNABLES_MODULE:
            if values is None:
                problems.append(f"{path} line {site.line}: imports {TUNABLES_MODULE} but the solution declares no "
                                "tunables")
                return None
            fields = ", ".join(f"{n}={v!r}" for n, v in values.values.items())
            statements.append(f"import types as _kf_types; {alias or name} = _kf_types.SimpleNamespace({fields}"
                              f"{', ' if fields else ''}values={dict(values.values)!r}, "
                              f"space={_space(values)!r})")
            baked += [f"{n}={v!r}" for n, v in values.values.items()]
            changed = True
        elif name == RUNTIME_MODULE and launch_module is not None:
            if alias is not None:
                statements.append(f"import {launch_module} as {alias}")
            else:
                statements.append(f"import types as _kf_types, {launch_module} as _kf_runtime; "
                                  "core = _kf_types.SimpleNamespace(solution=_kf_types.SimpleNamespace("
                                  "runtime=_kf_runtime))")
            changed = True
        else:
            statements.append(f"import {name}" + (f" as {alias}" if alias else ""))
    return "; ".join(statements) if changed else None


_MISSING = object()


def _tunable(name: str, values: TunableValues) -> Any:
    if name in values.values:
        return values.values[name]
    if name == "values":
        return dict(values.values)
    if name == "space":
        return _space(values)
    return _MISSING


def _space(values: TunableValues) -> dict[str, tuple[Any, ...]]:
    return {n: tuple(o) for n, o in values.space.items()}
