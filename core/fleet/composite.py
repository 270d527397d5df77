"""One solution made of a problem's frontier members: its entry sends each call, by the shapes of its inputs, to the
member that leads the workload of those shapes (pure: source text in, a Solution out; nothing here runs a member).

Layout: each member's sources under ``attempt_<id>/``, so no two members' files can collide, and a generated
``main.py`` at the root. A member's tunables are baked in, since a solution has one ``tunables.json``: its CUDA
sources get ``#define NAME VALUE`` lines at their top (what nvcc's ``-D`` gave them), and its Python sources find
the values in ``attempt_<id>/kernelfleet_tunables.py`` (what the loader generated for them). The entry imports each
member as a package of its own, with the member's folder on the import path while it is imported (its absolute
sibling imports and ``kernelfleet_tunables`` resolve inside it), then removes what it imported by absolute name,
so the next member finds its own files. A fast-path member's ``load_module("k.cu")`` resolves against its own
folder, where its cubin is placed.

Languages: members with a Python entry only (a torch-extension member cannot be composed). With a fast-path
``cuda_cpp`` member the composite is ``cuda_cpp`` with a Python entry (its other members are Python code the entry
imports); else the members' Python languages. Members must agree on destination passing style and, where they
compile CUDA, on the nvcc flags; otherwise :class:`CompositeError` says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

from core.errors import SpecError
from core.problem.schema import Problem
from core.solution.io import parse_solution, solution_to_dict
from core.solution.schema import BuildSpec, Language, Solution, SourceFile
from core.solution.tunables import TUNABLES_FILE, TUNABLES_MODULE_FILE, defines, python_module_source
from core.store.model import FrontierMember

ENTRY_FILE = "main.py"
ShapeKey = tuple  # per input in definition order: its shape as a tuple of ints, or None for a scalar


class CompositeError(ValueError):
    """These members cannot be composed; the message says why."""


def member_folder(attempt_id: int) -> str:
    return f"attempt_{attempt_id}"


def input_shape_key(problem: Problem, workload_index: int) -> ShapeKey:
    """The key the composite's entry computes from a call's inputs on this workload."""
    definition = problem.definition
    workload = problem.workloads[workload_index]
    return tuple(definition.shape_of(spec, workload.resolved_axes) for spec in definition.inputs.values())


def shape_routes(problem: Problem, frontier: Sequence[FrontierMember], fallback_id: int) -> dict[ShapeKey, int]:
    """Input shapes -> the member leading the workload of those shapes. Workloads of equal shapes led by different
    members (they differ in a scalar, say) go to ``fallback_id``."""
    routes: dict[ShapeKey, int] = {}
    for member in frontier:
        for index in member.leads:
            key = input_shape_key(problem, index)
            routes[key] = member.attempt_id if routes.get(key, member.attempt_id) == member.attempt_id \
                else fallback_id
    return routes


def compose(problem: Problem, frontier: Sequence[FrontierMember], solutions: Mapping[int, dict[str, Any]],
            fallback_id: int) -> Solution:
    """The composite of ``frontier`` (at least two members; ``solutions``: attempt id -> its stored solution dict);
    calls of shapes no member leads go to ``fallback_id``. CompositeError when they cannot be composed."""
    ids = [m.attempt_id for m in frontier]
    if len(ids) < 2:
        raise CompositeError("a composite needs at least two frontier members")
    if fallback_id not in ids:
        raise CompositeError(f"the fallback attempt {fallback_id} is not a frontier member")
    members: dict[int, Solution] = {}
    for attempt_id in ids:
        try:
            members[attempt_id] = parse_solution(solutions[attempt_id], f"attempt {attempt_id}")
        except (KeyError, SpecError) as exc:
            raise CompositeError(f"attempt {attempt_id}: no valid stored solution ({exc})") from None
    for attempt_id, member in members.items():
        if not member.entry_file.endswith(".py"):
            raise CompositeError(f"attempt {attempt_id} has a C++ entry ({member.entry_file}): a torch extension "
                                 "cannot be composed")
    styles = {m.spec.destination_passing_style for m in members.values()}
    if len(styles) > 1:
        raise CompositeError("the members disagree on destination passing style")
    cuda = {i: m for i, m in members.items() if Language.CUDA_CPP in m.spec.languages}
    flags = {_compile_options(m) for m in cuda.values()}
    if len(flags) > 1:
        raise CompositeError("the CUDA members are built with different compile options")
    if cuda:
        languages: tuple[Language, ...] = (Language.CUDA_CPP,)
    else:
        languages = tuple(dict.fromkeys(lang for m in members.values() for lang in m.spec.languages))
    sources = [SourceFile(ENTRY_FILE, _entry_source(problem, members, shape_routes(problem, frontier, fallback_id),
                                                    fallback_id))]
    for attempt_id, member in members.items():
        sources += _member_sources(attempt_id, member)
    first = members[ids[0]]
    spec = BuildSpec(
        languages=languages,
        target_hardware=tuple(dict.fromkeys(hw for m in members.values() for hw in m.spec.target_hardware)),
        entry_point=f"{ENTRY_FILE}::run",
        dependencies=tuple(dict.fromkeys(d for m in members.values() for d in m.spec.dependencies)),
        destination_passing_style=first.spec.destination_passing_style,
        binding=None,
        compile_options=next(iter(cuda.values())).spec.compile_options if cuda else first.spec.compile_options)
    name = f"{problem.definition.name}_composite_" + "_".join(str(i) for i in ids)
    solution = Solution(name=name, definition=problem.definition.name, author="kernelfleet", spec=spec,
                        sources=tuple(sources),
                        description="composite of attempts " + ", ".join(str(i) for i in ids)
                                    + ": each call goes to the member fastest on its input shapes")
    try:
        return parse_solution(solution_to_dict(solution), "composite")
    except SpecError as exc:
        raise CompositeError(f"the composite is not a valid solution: {exc}") from None


def _compile_options(member: Solution) -> tuple:
    opts = member.spec.compile_options
    return (opts.cflags, opts.cuda_cflags, opts.ld_flags) if opts is not None else (None,)


def _member_sources(attempt_id: int, member: Solution) -> list[SourceFile]:
    folder = PurePosixPath(member_folder(attempt_id))
    macros = defines(member)
    baked = "".join(f"#define {name} {value}\n" for name, value in macros.items())
    out = []
    for src in member.sources:
        if src.path == TUNABLES_FILE:
            continue  # its values are baked in below
        content = src.content
        if baked and PurePosixPath(src.path).suffix == ".cu":
            content = f"// {member_folder(attempt_id)}'s tunables, baked in by kernelfleet\n{baked}{content}"
        out.append(SourceFile(str(folder / src.path), content))
    tunables_module = python_module_source(member)
    if tunables_module is not None:
        out.append(SourceFile(str(folder / TUNABLES_MODULE_FILE), tunables_module))
    return out


def _entry_source(problem: Problem, members: Mapping[int, Solution], routes: Mapping[ShapeKey, int],
                  fallback_id: int) -> str:
    loads = "\n".join(f"    {i}: _load({member_folder(i)!r}, {str(PurePosixPath(m.entry_file).with_suffix(''))!r}, "
                      f"{m.entry_symbol!r}),"
                      for i, m in members.items())
    route_lines = "\n".join(f"    {key!r}: {attempt_id}," for key, attempt_id in routes.items())
    return f'''"""Composite of attempts {", ".join(str(i) for i in members)} (assembled by kernelfleet): each call goes to the
member that was fastest on its input shapes; other shapes go to attempt {fallback_id}."""

import hashlib
import importlib
import sys
import types
from importlib.machinery import ModuleSpec
from pathlib import Path

_ROOT = Path(__file__).resolve().parent
_INPUTS = {tuple(problem.definition.inputs)!r}


def _load(folder, module, symbol):
    base = _ROOT / folder
    package = "_kf_member_" + hashlib.sha1(str(base).encode()).hexdigest()[:12]
    pkg = types.ModuleType(package)
    pkg.__path__ = [str(base)]
    pkg.__spec__ = ModuleSpec(package, None, is_package=True)
    pkg.__spec__.submodule_search_locations = [str(base)]
    sys.modules[package] = pkg
    search = [str((base / module).parent), str(base)]
    # What the member imports by absolute name from its own folder (a sibling, kernelfleet_tunables) must be its
    # own file, not another member's of the same name: such modules are set aside while it is imported and
    # dropped afterwards, as kernelfleet's loader does for a whole candidate.
    shadowed = {{p.stem if p.suffix == ".py" else p.name for d in search for p in Path(d).iterdir()
                if not p.name.startswith(".")}}
    saved = {{n: sys.modules.pop(n) for n in list(sys.modules) if n.partition(".")[0] in shadowed}}
    sys.path[:0] = search
    importlib.invalidate_caches()
    try:
        entry = importlib.import_module(package + "." + module.replace("/", "."))
    finally:
        for path in search:
            if path in sys.path:
                sys.path.remove(path)
        for name in [n for n in sys.modules if n.partition(".")[0] in shadowed]:
            del sys.modules[name]
        sys.modules.update(saved)
    return getattr(entry, symbol)


_MEMBERS = {{
{loads}
}}
_ROUTES = {{
{route_lines}
}}
_FALLBACK = {fallback_id}


def _shape(value):
    shape = getattr(value, "shape", None)
    return tuple(shape) if shape is not None else None


def run(*args, **kwargs):
    values = list(args[:len(_INPUTS)]) + [kwargs[n] for n in _INPUTS[len(args):] if n in kwargs]
    key = tuple(_shape(v) for v in values)
    return _MEMBERS[_ROUTES.get(key, _FALLBACK)](*args, **kwargs)
'''
