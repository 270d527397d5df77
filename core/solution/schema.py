"""The candidate model: a SOL-ExecBench ``solution.json`` as frozen dataclasses (pure data, no torch here).

Field names and defaults follow upstream's ``Solution``/``BuildSpec``/``SourceFile``/``CompileOptions`` so a
solution read from, or written to, JSON is the same object on both sides. Validation lives in ``core.solution.io``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import PurePosixPath
from typing import ClassVar

from core.languages import CPP_SUFFIXES, KernelLanguage, language, languages


class _LanguageType(type):
    def __iter__(cls) -> Iterator[Language]:
        """Every registered language, in registration order (as iterating upstream's enum did)."""
        return iter([cls(e.name) for e in languages()])


class Language(str, metaclass=_LanguageType):
    """A name of ``spec.languages``, one per registered language (``core.languages``): upstream's enum values and
    whatever else is registered. It reads as upstream's enum did (``Language.CUDA_CPP``, ``.value``, one object per
    language, so ``is`` works), but it is open: registering a language makes its name a Language. An alias reads as
    the language it names. ``Language("x")`` for a name nothing is registered under raises ValueError."""

    _interned: ClassVar[dict[str, Language]] = {}

    def __new__(cls, name: str) -> Language:
        if isinstance(name, Language):
            return name
        canonical = language(name).name  # UnknownLanguage, a ValueError, for an unknown name
        interned = cls._interned.get(canonical)
        if interned is None:
            interned = cls._interned.setdefault(canonical, super().__new__(cls, canonical))
        return interned

    @property
    def value(self) -> str:
        return str.__str__(self)

    @property
    def kernel_language(self) -> KernelLanguage:
        return language(self.value)

    @property
    def is_python(self) -> bool:
        return self.kernel_language.is_python

    @property
    def is_cpp(self) -> bool:
        return self.kernel_language.is_cpp

    def __repr__(self) -> str:
        return f"Language({self.value!r})"

    # upstream's names, as its enum spells them
    PYTORCH: ClassVar[Language]
    TRITON: ClassVar[Language]
    TLX: ClassVar[Language]
    CUTE_DSL: ClassVar[Language]
    CUTILE: ClassVar[Language]
    CUDNN_FRONTEND: ClassVar[Language]
    CUTLASS: ClassVar[Language]
    CUDNN: ClassVar[Language]
    CUBLAS: ClassVar[Language]
    CUDA_CPP: ClassVar[Language]


for _name in ("pytorch", "triton", "tlx", "cute_dsl", "cutile", "cudnn_frontend", "cutlass", "cudnn", "cublas",
              "cuda_cpp"):
    setattr(Language, _name.upper(), Language(_name))


def python_languages() -> frozenset[Language]:
    """The registered languages whose entry is a .py file (now: a language may be registered later)."""
    return frozenset(Language(e.name) for e in languages() if e.is_python)


def cpp_languages() -> frozenset[Language]:
    """The registered languages whose entry is a C/C++/CUDA file."""
    return frozenset(Language(e.name) for e in languages() if e.is_cpp)


# The built-in ones, for callers that read these names once; ``python_languages()`` sees later registrations too.
PYTHON_LANGUAGES = python_languages()
CPP_LANGUAGES = cpp_languages()

# Upstream accepts "B200" and "LOCAL"; kernelfleet also accepts the machine it is measured on.
# A solution naming "H200" is therefore not loadable by upstream as is (see ``core.solution.io.upstream_deviations``).
UPSTREAM_HARDWARE = ("B200", "LOCAL")
HARDWARE = UPSTREAM_HARDWARE + ("H200",)

BINDINGS = ("torch",)

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
