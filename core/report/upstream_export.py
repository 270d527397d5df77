"""One stored solution as a self-contained solution upstream's evaluator accepts (pure: a Solution in, one out).

By kind:

* Python languages (pytorch, triton, cute_dsl, and composites of such members): the sources as they are, with
  the tunables baked in (``core.report.python_export``).
* cuda_cpp with a C/C++ entry (a torch extension): the tunables as ``#define`` lines at the top of each compiled
  file, and each compiled file in a sub-folder given a top-level unit (upstream compiles only those).
* cuda_cpp with a Python entry (kernelfleet's fast path, and composites with such members): a torch extension
  that hosts the launcher (``core.report.cuda_bridge``).

``tunables.json`` and generated ``kernelfleet_tunables.py`` files are dropped once their values are written in;
``H200`` is written as upstream's ``LOCAL`` (the GPU the evaluation runs on). Then the result is checked against
the deviation rules (``core.solution.io.upstream_deviations``); whatever remains is reported, not hidden.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import PurePosixPath

from core.report.cuda_bridge import bridge, launch_module_name
from core.report.cuda_sources import compiled_units, define_lines, is_compiled
from core.report.python_export import (
    TUNABLES_MODULE_FILE,
    TunableValues,
    bake_python,
    generated_module_values,
    values_for,
)
from core.solution.io import content_hash, parse_solution, solution_to_dict, upstream_deviations
from core.solution.schema import CPP_SUFFIXES, UPSTREAM_HARDWARE, CompileOptions, Language, Solution, SourceFile
from core.solution.tunables import TUNABLES_FILE, defines, get_tunables

# kernelfleet's hardware names -> upstream's
HARDWARE_NAMES = {"H200": "LOCAL"}
_DLOPEN_FLAG = "-ldl"


@dataclass(frozen=True)
class UpstreamSolution:
    solution: Solution
    form: str  # what was written, in a few words
    changes: tuple[str, ...]  # what the export changed, one line each
    deviations: tuple[str, ...]  # where upstream may still reject or differ, one line each


def to_upstream(solution: Solution) -> UpstreamSolution:
    changes: list[str] = []
    problems: list[str] = []
    spec = solution.spec

    hardware = tuple(dict.fromkeys(HARDWARE_NAMES.get(hw, hw) for hw in spec.target_hardware))
    for hw in spec.target_hardware:
        if hw in HARDWARE_NAMES:
            changes.append(f"target_hardware {hw} written as {HARDWARE_NAMES[hw]} (upstream knows "
                           f"{', '.join(UPSTREAM_HARDWARE)}; LOCAL builds for the GPU it runs on)")

    tunables = get_tunables(solution)
    root_values = TunableValues(dict(tunables.values), dict(tunables.space)) if tunables is not None else None
    macros = defines(tunables)
    member_values = {}
    for src in solution.sources:
        pure = PurePosixPath(src.path)
        if pure.name == TUNABLES_MODULE_FILE:
            values = generated_module_values(src.content)
            if values is not None:
                member_values[str(pure.parent)] = values

    fast_path = spec.is_cpp and not solution.entry_file.endswith(CPP_SUFFIXES)
    launch_module = launch_module_name(content_hash(solution)) if fast_path else None
    sources: list[SourceFile] = []
    for src in solution.sources:
        pure = PurePosixPath(src.path)
        if src.path == TUNABLES_FILE or (pure.name == TUNABLES_MODULE_FILE and str(pure.parent) in member_values):
            continue
        if pure.suffix == ".py":
            done = bake_python(src, values_for(src.path, root_values, member_values), launch_module)
            sources.append(done.source)
            problems += done.problems
        else:
            sources.append(src)
    if tunables is not None:
        changes.append("tunables baked in: " + ", ".join(f"{n}={v!r}" for n, v in tunables.values.items()))
    if member_values:
        changes.append("members' tunables baked in: " + ", ".join(
            f"{folder} " + ", ".join(f"{n}={v!r}" for n, v in vals.values.items())
            for folder, vals in sorted(member_values.items())))

    entry_point, binding, options = spec.entry_point, spec.binding, spec.compile_options
    if fast_path:
        bridged = bridge(sources, solution.entry_file, solution.entry_symbol, macros, launch_module)
        sources, entry_point, binding = list(bridged.sources), bridged.entry_point, "torch"
        problems += bridged.problems
        options = _with_dlopen(options)
        units = sum(1 for s in solution.sources if s.path.endswith(".cu"))
        form = (f"cuda_cpp torch extension: the fast-path launcher {solution.entry_file} hosted by {entry_point}, "
                f"its {units} .cu source{'s' if units != 1 else ''} compiled by upstream's build")
        changes.append(f"entry {spec.entry_point} -> {entry_point} (the launcher runs unchanged inside the "
                       "extension; core.solution.runtime replaced by the extension's launch API)")
        if bridged.renamed:
            changes.append("kernels renamed per unit to be unique in one library: " + ", ".join(bridged.renamed))
    elif spec.is_cpp:
        preludes = {s.path: (f"// kernelfleet export: the tunables (kernelfleet passed them as -D)\n"
                             f"{define_lines(macros)}" if macros else "")
                    for s in sources if is_compiled(s.path) and (macros or len(PurePosixPath(s.path).parts) > 1)}
        sources = compiled_units(sources, preludes)
        form = f"{'/'.join(lang.value for lang in spec.languages)} torch extension (C++ entry {solution.entry_file})"
    else:
        form = f"{'/'.join(lang.value for lang in spec.languages)} (Python entry {solution.entry_file})"

    new_spec = dataclasses.replace(spec, target_hardware=hardware, entry_point=entry_point, binding=binding,
                                   compile_options=options)
    if fast_path:
        new_spec = dataclasses.replace(new_spec, languages=(Language.CUDA_CPP,))
    exported = dataclasses.replace(solution, spec=new_spec, sources=tuple(sources))
    exported = parse_solution(solution_to_dict(exported), "export")
    deviations = list(dict.fromkeys([*upstream_deviations(exported), *problems]))
    return UpstreamSolution(exported, form, tuple(changes), tuple(deviations))


def _with_dlopen(options: CompileOptions | None) -> CompileOptions:
    """The bridge finds kernels with dlsym: link libdl (a no-op where glibc has it built in)."""
    options = options or CompileOptions(cflags=(), cuda_cflags=(), ld_flags=())  # what no options built with
    if _DLOPEN_FLAG in options.ld_flags:
        return options
    return dataclasses.replace(options, ld_flags=(*options.ld_flags, _DLOPEN_FLAG))
