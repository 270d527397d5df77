"""What a kernel language is to kernelfleet: one frozen :class:`KernelLanguage` record per language."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

PYTHON_SUFFIXES = (".py",)
# The suffixes upstream treats as C/C++/CUDA (valid entries for C++ languages).
CPP_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".cuh")


class Toolchain(str, Enum):
    """How a solution in the language is built and run."""

    PYTHON = "python"  # the .py entry is imported; its sources are Python modules beside it
    NVCC = "nvcc"  # C/C++/CUDA sources built by nvcc: a torch extension (C++ entry) or cubins (.py launcher)


@dataclass(frozen=True)
class DocSource:
    """An installed package whose API the ``docs`` tool indexes: the given parts of its folder (files or folders,
    relative to the package folder), plus every .md/.rst file it ships."""

    name: str  # the docs tool's source name, e.g. "torch"
    label: str  # for a person: "CuTe DSL (nvidia-cutlass-dsl)"
    top_level: str  # the import name of the package, e.g. "cutlass"
    distributions: tuple[str, ...]  # names in importlib.metadata, for the version and as a fallback locator
    parts: tuple[str, ...] = ("",)  # "" for the whole package
    marker: str = ""  # a path that must exist inside the package folder (tells CuTe DSL from other "cutlass")
    mentions: tuple[str, ...] = ()  # query words that name this source

    def missing_note(self) -> str:
        return f"{self.label} is not installed here"


@dataclass(frozen=True)
class KernelLanguage:
    """One language of ``spec.languages``: how its solutions are built and run, what it needs on the machine, where
    the agents read about it. Upstream knows languages kernelfleet does not run yet (``runs`` False): a solution in
    one is read, listed and diffed, and refused when asked to run."""

    name: str  # as written in spec.languages and in the config's [fleet] languages
    description: str  # one line, for the config help and the agents' brief
    toolchain: Toolchain
    runs: bool = True  # False: read and listed, refused when asked to run
    upstream: bool = False  # one of SOL-ExecBench's SupportedLanguages (a solution naming another is a deviation)
    # NVCC only: a .py entry may launch the .cu kernels, built to cubins (kernelfleet's fast path; upstream wants a
    # C/C++ entry, so such a solution is a deviation)
    python_launcher: bool = False
    aliases: tuple[str, ...] = ()  # other names read as this one (a solution is written back with ``name``)
    packages: tuple[str, ...] = ()  # distributions it needs, their versions reported in the run's facts
    # Why it cannot run on this machine, or None when it can (called only when running, never when reading).
    refusal: Callable[[], str | None] | None = None
    # It is refused where no CUTLASS/CuTe headers are found (core.build puts them on the include path of any C++
    # source that includes them, whatever its language).
    needs_cutlass_headers: bool = False
    docs: DocSource | None = None  # what the docs tool indexes for it

    @property
    def is_python(self) -> bool:
        return self.toolchain is Toolchain.PYTHON

    @property
    def is_cpp(self) -> bool:
        return self.toolchain is Toolchain.NVCC

    @property
    def entry_suffixes(self) -> tuple[str, ...]:
        """The entry files a solution in this language may have."""
        if self.is_python:
            return PYTHON_SUFFIXES
        return CPP_SUFFIXES + (PYTHON_SUFFIXES if self.python_launcher else ())

    def refusal_here(self) -> str | None:
        """Why a solution in this language cannot run on this machine, or None."""
        if not self.runs:
            return None
        if self.needs_cutlass_headers:
            from core.languages.machine import cutlass_refusal

            refusal = cutlass_refusal()
            if refusal is not None:
                return refusal
        return self.refusal() if self.refusal is not None else None
