"""A fast-path solution (cuda_cpp with a Python launcher, kernels built to cubins) as a torch extension upstream builds.

Translating an arbitrary Python launcher (its grid arithmetic, checks, temporaries, several kernels) into C++ is
not possible in general, so the launcher is kept and hosted instead: the extension's C++ entry (``kf_bridge.cpp``,
``core.report.bridge_code``) carries the launcher's Python files as strings (``kf_embedded.h``), starts them when
upstream imports the extension, and gives them ``load_module`` / ``launch`` / ``current_stream`` over the kernels
that upstream's build compiled into that same extension. The launcher's grid and block arithmetic therefore runs
exactly as it did under kernelfleet.

Each ``.cu`` source becomes a top-level unit (upstream compiles only those) starting with:

* the tunables as ``#define`` lines;
* ``#undef`` of the half/bfloat16 restrictions torch's extension build adds to nvcc's flags, which kernelfleet's
  nvcc build of the same source did not have;
* default symbol visibility (nvcc 13 hides kernels' host stubs, which the launch API finds by name);
* when two units define a kernel of the same name (a composite of two settings of one kernel), renames that make
  each unit's kernels unique in the one library; the launch API maps the launcher's names onto them.

Limits (returned as problems): kernels must have external linkage (``extern "C"`` as the fast path requires, or
the mangled name the launcher asks for); a launcher that uses cupy directly, or runtime helpers other than the
three above, does not run.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import PurePosixPath

from core.report.bridge_code import BRIDGE_CPP, BRIDGE_FILE, EMBEDDED_HEADER, LAUNCH_PY, START_PY
from core.report.cuda_sources import compiled_units, define_lines, is_compiled, kernel_names
from core.solution.schema import CPP_SUFFIXES, SourceFile

_TORCH_NVCC_RESTRICTIONS = ("__CUDA_NO_HALF_OPERATORS__", "__CUDA_NO_HALF_CONVERSIONS__",
                            "__CUDA_NO_BFLOAT16_CONVERSIONS__", "__CUDA_NO_HALF2_OPERATORS__")


@dataclass(frozen=True)
class Bridged:
    sources: tuple[SourceFile, ...]
    entry_point: str
    renamed: tuple[str, ...]  # .cu sources whose kernels got a unit prefix
    problems: tuple[str, ...]


def launch_module_name(solution_hash: str) -> str:
    """The import name of the launch API inside one exported solution (unique per solution)."""
    return "_kf_launch_" + hashlib.sha1(solution_hash.encode()).hexdigest()[:12]


def bridge(sources: list[SourceFile], entry_file: str, entry_symbol: str, macros: dict[str, object],
           launch_module: str) -> Bridged:
    """The exported sources: ``sources`` (Python already baked) hosted by the bridge; ``macros`` are the tunables."""
    problems = []
    cu = [s for s in sources if PurePosixPath(s.path).suffix == ".cu"]
    for s in sources:
        if is_compiled(s.path) and not s.path.endswith(".cu") and len(PurePosixPath(s.path).parts) == 1:
            problems.append(f"{s.path}: upstream's build compiles it, though kernelfleet's fast path did not")
    found = {s.path: kernel_names(s.content) for s in cu}
    counts = Counter(n for k in found.values() for n in (*k.names, *(p + "##" for p in k.pasted)))
    clashing = {path for path, k in found.items()
                if any(counts[n] > 1 for n in (*k.names, *(p + "##" for p in k.pasted)))}
    prefixes = {path: f"kf{i}_" for i, path in enumerate(sorted(clashing), start=1)}

    units, preludes, rewritten = {}, {}, []
    for src in sources:
        if src.path not in found:
            rewritten.append(src)
            continue
        names, prefix = found[src.path], prefixes.get(src.path, "")
        content = src.content
        if prefix:
            for stem in names.pasted:
                content = re.sub(rf"\b{re.escape(stem)}(?=\s*##)", prefix + stem, content)
        rewritten.append(SourceFile(src.path, content))
        preludes[src.path] = _prelude(macros, {n: prefix + n for n in names.names} if prefix else {})
        units[src.path] = {"prefix": prefix, "names": list(names.names), "pasted": list(names.pasted)}
    compiled = compiled_units(rewritten, preludes)

    hosted = [s for s in compiled if PurePosixPath(s.path).suffix not in CPP_SUFFIXES]
    kept = [s for s in compiled if PurePosixPath(s.path).suffix in CPP_SUFFIXES]
    for name in (BRIDGE_FILE, EMBEDDED_HEADER):
        if any(s.path == name for s in kept):
            problems.append(f"{name}: a source of this name is replaced by the export's own")
    kept = [s for s in kept if s.path not in (BRIDGE_FILE, EMBEDDED_HEADER)]
    entry_module = ".".join(PurePosixPath(entry_file).with_suffix("").parts)
    header = _embedded_header(hosted, entry_module, entry_symbol, launch_module, json.dumps(units, sort_keys=True))
    out = (SourceFile(BRIDGE_FILE, BRIDGE_CPP), SourceFile(EMBEDDED_HEADER, header), *kept)
    return Bridged(out, f"{BRIDGE_FILE}::{entry_symbol}", tuple(sorted(prefixes)), tuple(problems))


def _prelude(macros: dict[str, object], renames: dict[str, str]) -> str:
    lines = ["// kernelfleet export: this unit as kernelfleet's nvcc build compiled it\n"]
    if macros:
        lines.append("// the tunables (kernelfleet passed them as -D)\n" + define_lines(macros))
    lines.append("// torch's extension build adds these to nvcc's flags; kernelfleet's build did not\n")
    lines += [f"#undef {name}\n" for name in _TORCH_NVCC_RESTRICTIONS]
    lines.append("// the launcher finds kernels by name in the library's symbols; nvcc 13 hides them by default\n"
                 "#pragma GCC visibility push(default)\n")
    if renames:
        lines.append("// kernel names made unique in the one extension (the launch API maps them)\n")
        lines.append(define_lines(renames))
    return "".join(lines)


def _raw(text: str) -> str:
    """``text`` as a C++ raw string literal."""
    n = 0
    while f'){_delimiter(n)}"' in text:
        n += 1
    return f'R"{_delimiter(n)}({text}){_delimiter(n)}"'


def _delimiter(n: int) -> str:
    return f"kf{n}" if n else "kf"


def _embedded_header(hosted: list[SourceFile], entry_module: str, entry_symbol: str, launch_module: str,
                     units: str) -> str:
    files = "\n".join(f"    {{{json.dumps(s.path)}, {_raw(s.content)}}}," for s in hosted)
    return (
        "// Generated by kernelfleet export: the Python files this extension hosts (the fast-path launcher and the\n"
        "// files it imports, tunables baked in), the launch API they import, and what starts them (kf_bridge.cpp).\n"
        "#pragma once\n\n"
        "namespace kf_embedded {\n\n"
        "struct PythonFile {\n  const char* path;\n  const char* text;\n};\n\n"
        f"static const PythonFile kPythonFiles[] = {{\n{files}\n}};\n\n"
        f"static const char* const kEntryModule = {json.dumps(entry_module)};\n"
        f"static const char* const kEntrySymbol = {json.dumps(entry_symbol)};\n"
        f"static const char* const kLaunchModule = {json.dumps(launch_module)};\n"
        f"// kernelfleet's .cu sources -> how their kernels are named in this library\n"
        f"static const char* const kUnits = {_raw(units)};\n\n"
        f"static const char* const kLaunchSource = {_raw(LAUNCH_PY)};\n\n"
        f"static const char* const kStart = {_raw(START_PY)};\n\n"
        "}  // namespace kf_embedded\n"
    )
