"""C/C++/CUDA sources of an exported solution: what upstream's build compiles, and the kernel names in them.

Upstream's build compiles only the top-level C/C++ files of the solution folder, in one extension. So a compiled
file in a sub-folder gets a top-level unit that includes it, and each unit starts with a prelude: the values of
the solution's tunables as ``#define`` lines (what ``-D`` gave kernelfleet's build) and whatever else the caller
needs there (``#line 1`` keeps the compiler's line numbers those of the original file).

Kernel names are read from the text (comments and strings removed, line continuations joined), so they are found
also inside macros; a name made by token pasting (``name_v##VEC``) is reported as its literal prefix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from core.solution.schema import CPP_COMPILED_SUFFIXES, SourceFile

_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_TOKEN = re.compile(r"[A-Za-z_]\w*|##|\(|\)|;|\{|[^\sA-Za-z_]")
_ATTRIBUTES = {"__launch_bounds__", "__attribute__", "__declspec", "__cluster_dims__", "alignas",
               "__maxnreg__", "__grid_constant__"}


@dataclass(frozen=True)
class KernelNames:
    names: tuple[str, ...]  # plain kernel names
    pasted: tuple[str, ...]  # literal prefixes of names made by token pasting


def kernel_names(text: str) -> KernelNames:
    """The ``__global__`` functions declared or defined in ``text``."""
    clean = _COMMENT_OR_STRING.sub(lambda m: " " if m.group(0)[0] in "/" else '""', text.replace("\\\n", " "))
    tokens = _TOKEN.findall(clean)
    names: dict[str, None] = {}
    pasted: dict[str, None] = {}
    for i, token in enumerate(tokens):
        if token != "__global__":
            continue
        j, depth = i + 1, 0
        while j < len(tokens) and tokens[j] not in (";", "{"):
            if tokens[j] in _ATTRIBUTES and j + 1 < len(tokens) and tokens[j + 1] == "(":
                j += 1
                depth = 0
                while j < len(tokens):
                    depth += {"(": 1, ")": -1}.get(tokens[j], 0)
                    if depth == 0:
                        break
                    j += 1
            elif tokens[j] == "(":
                _record(tokens, j, names, pasted)
                break
            j += 1
    return KernelNames(tuple(names), tuple(pasted))


def _record(tokens: list[str], paren: int, names: dict[str, None], pasted: dict[str, None]) -> None:
    """The kernel name ends just before ``tokens[paren]``; walk back over ``a ## b`` pastes to its first part."""
    k = paren - 1
    if k < 0 or not re.match(r"[A-Za-z_]", tokens[k]):
        return
    if k >= 2 and tokens[k - 1] == "##":
        while k >= 2 and tokens[k - 1] == "##":
            k -= 2
        if re.match(r"[A-Za-z_]", tokens[k]):
            pasted[tokens[k]] = None
    else:
        names[tokens[k]] = None


def is_compiled(path: str) -> bool:
    return PurePosixPath(path).suffix in CPP_COMPILED_SUFFIXES


def unit_path(source_path: str, taken: set[str]) -> str:
    """A free top-level file name for the unit that compiles ``source_path`` (itself when it is top-level)."""
    pure = PurePosixPath(source_path)
    if len(pure.parts) == 1:
        return source_path
    base = "kf_unit_" + "_".join(pure.with_suffix("").parts)
    candidate, n = base + pure.suffix, 2
    while candidate in taken:
        candidate, n = f"{base}_{n}{pure.suffix}", n + 1
    return candidate


def compiled_units(sources: list[SourceFile], preludes: dict[str, str]) -> list[SourceFile]:
    """``sources`` with each compiled file that has a prelude (path -> text) made a top-level unit that starts with
    it: a top-level file gets the prelude at its top, a nested one a new top-level file that includes it."""
    taken = {s.path for s in sources}
    out = []
    for src in sources:
        prelude = preludes.get(src.path)
        if prelude is None or not is_compiled(src.path):
            out.append(src)
            continue
        unit = unit_path(src.path, taken)
        if unit == src.path:
            out.append(SourceFile(src.path, f'{prelude}#line 1 "{src.path}"\n{src.content}'))
        else:
            taken.add(unit)
            out.append(src)
            out.append(SourceFile(unit, f'{prelude}#include "{src.path}"\n'))
    return out


def define_lines(values: dict[str, object]) -> str:
    return "".join(f"#define {name} {value}\n" for name, value in values.items())
