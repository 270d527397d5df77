"""The candidate model: a SOL-ExecBench ``solution.json`` as frozen dataclasses (pure data, no torch here).

Field names and defaults follow upstream's ``Solution``/``BuildSpec``/``SourceFile``/``CompileOptions`` so a
solution read from, or written to, JSON is the same object on both sides. Validation lives in ``core.solution.io``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from pathlib import PurePosixPath


class Language(str, Enum):
    """Every language upstream knows; which of them kernelfleet runs is decided in ``core.solution.support``."""

    # Python languages (entry is a .py file)
    PYTORCH = "pytorch"
    TRITON = "triton"
    TLX = "tlx"
    CUTE_DSL = "cute_dsl"
    CUTILE = "cutile"
    CUDNN_FRONTEND = "cudnn_frontend"
    # C++ languages (entry is a C/C++/CUDA file, built as a torch extension)
    CUTLASS = "cutlass"
    CUDNN = "cudnn"
    CUBLAS = "cublas"
    CUDA_CPP = "cuda_cpp"

    @property
    def is_python(self) -> bool:
        return self in PYTHON_LANGUAGES

    @property
    def is_cpp(self) -> bool:
        return self in CPP_LANGUAGES


PYTHON_LANGUAGES = frozenset(
    {Language.PYTORCH, Language.TRITON, Language.TLX, Language.CUTE_DSL, Language.CUTILE, Language.CUDNN_FRONTEND}
)
CPP_LANGUAGES = frozenset({Language.CUTLASS, Language.CUDNN, Language.CUBLAS, Language.CUDA_CPP})

# Upstream accepts "B200" and "LOCAL"; kernelfleet also accepts the machine it is measured on.
# A solution naming "H200" is therefore not loadable by upstream as is (see ``core.solution.io.upstream_deviations``).
UPSTREAM_HARDWARE = ("B200", "LOCAL")
HARDWARE = UPSTREAM_HARDWARE + ("H200",)

BINDINGS = ("torch",)

# File suffixes upstream treats as C/C++/CUDA (valid entries for C++ languages).
CPP_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".cuh")
# Suffixes torch.utils.cpp_extension compiles (headers are only included).
CPP_COMPILED_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")


def built_by_upstream(path: str) -> bool:
    """Whether upstream's build compiles this source file as a unit of its own: a C/C++/CUDA file at the top level
    (one in a folder is compiled only where a top-level file includes it)."""
    pure = PurePosixPath(path)
    return pure.suffix in CPP_COMPILED_SUFFIXES and len(pure.parts) == 1

# Upstream's defaults for a ``compile_options`` object whose lists are left out.
DEFAULT_CFLAGS: tuple[str, ...] = ()
DEFAULT_CUDA_CFLAGS: tuple[str, ...] = ("-O3", "--use_fast_math")
DEFAULT_LD_FLAGS: tuple[str, ...] = ("-lcuda",)


@dataclass(frozen=True)
class SourceFile:
    path: str  # relative, POSIX separators, no '..'
    content: str


@dataclass(frozen=True)
class CompileOptions:
    """Extra compiler/linker flags. Defaults are upstream's, which apply when the object exists but a list is absent."""

    cflags: tuple[str, ...] = DEFAULT_CFLAGS
    cuda_cflags: tuple[str, ...] = DEFAULT_CUDA_CFLAGS
    ld_flags: tuple[str, ...] = DEFAULT_LD_FLAGS


@dataclass(frozen=True)
class BuildSpec:
    languages: tuple[Language, ...]
    target_hardware: tuple[str, ...]
    entry_point: str  # "file::function", exactly one '::'
    dependencies: tuple[str, ...] = ()
    destination_passing_style: bool = True
    binding: str | None = None  # "torch" or None (upstream: None means torch for C++ languages)
    compile_options: CompileOptions | None = None

    @property
    def entry_file(self) -> str:
        return self.entry_point.split("::", 1)[0]

    @property
    def entry_symbol(self) -> str:
        return self.entry_point.split("::", 1)[1]

    @property
    def is_cpp(self) -> bool:
        return any(lang.is_cpp for lang in self.languages)

    @property
    def is_python(self) -> bool:
        return any(lang.is_python for lang in self.languages)


@dataclass(frozen=True)
class Solution:
    name: str
    definition: str
    author: str
    spec: BuildSpec
    sources: tuple[SourceFile, ...]
    description: str | None = None

    @cached_property
    def _by_path(self) -> dict[str, SourceFile]:
        return {s.path: s for s in self.sources}

    @property
    def entry_file(self) -> str:
        return self.spec.entry_file

    @property
    def entry_symbol(self) -> str:
        return self.spec.entry_symbol

    @property
    def entry_source(self) -> SourceFile:
        return self._by_path[self.spec.entry_file]

    def source(self, path: str) -> SourceFile | None:
        return self._by_path.get(path)

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(s.path for s in self.sources)

    def sources_with_suffix(self, *suffixes: str) -> tuple[SourceFile, ...]:
        return tuple(s for s in self.sources if PurePosixPath(s.path).suffix in suffixes)
