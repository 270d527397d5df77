"""Turn a Solution into what an evaluation worker can load: compile what needs compiling, generate what is generated.

``await prepare(solution, build_service)`` runs in the orchestrator (it compiles, it never imports candidate code):

* Python languages (pytorch, triton, cute_dsl): nothing to compile; the tunables module is generated.
* cuda_cpp with a ``.py`` entry (the fast path): every ``.cu`` source goes to ``core.build`` in one request, with
  the tunables as ``-D`` macros and ``compile_options.cuda_cflags`` as extra nvcc flags; the result holds one
  cubin per ``.cu``. Python files and tunables.json are left out of the request (the values reach nvcc as
  macros), so a candidate that only changes its Python launcher reuses the cached cubins.
* cuda_cpp with a C/C++ entry: upstream's torch extension, built in a subprocess and cached
  (``core.solution.torch_ext``).

A compile failure is returned as data (``ok=False``, ``errors`` trimmed to what a person needs); a solution
kernelfleet cannot run at all (unsupported language, CuTe DSL missing) raises SpecError before any work.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from core.solution.diagnostics import trim_errors
from core.solution.schema import Solution
from core.solution.support import RunKind, run_kind
from core.solution.torch_ext import DEFAULT_TIMEOUT_S, build_extension, build_inputs
from core.solution.tunables import defines, generated_files

if TYPE_CHECKING:  # core.build is imported lazily: Python-only candidates never need it
    from core.build import BuildResult, BuildService


@dataclass(frozen=True)
class PreparedSolution:
    """A solution with its build outputs: everything ``core.solution.loader.materialize`` writes out."""

    solution: Solution
    kind: RunKind
    ok: bool
    errors: str = ""  # trimmed compiler errors when not ok
    log: str = ""  # the full build output
    build: BuildResult | None = None  # fast path: core.build's result (cubins, resources, cache key)
    extension: Path | None = None  # torch extension: the cached .so
    extension_module: str | None = None  # its module name (what PyInit_ expects)
    generated: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # path -> text (tunables)
    defines: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    cache_hit: bool = False
    seconds: float = 0.0
    timed_out: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "generated", MappingProxyType(dict(self.generated)))
        object.__setattr__(self, "defines", MappingProxyType(dict(self.defines)))

    @property
    def cubins(self) -> Mapping[str, Path]:
        """Source path -> built cubin (fast path only)."""
        return self.build.cubins if self.build is not None and self.build.ok else MappingProxyType({})


async def prepare(
    solution: Solution,
    build_service: BuildService | None = None,
    *,
    arch: str | None = None,
    torch_ext_timeout_s: float = DEFAULT_TIMEOUT_S,
    torch_ext_cache_dir: Path | None = None,
) -> PreparedSolution:
    """Compile ``solution`` as its kind needs (module docstring); the fast path needs ``build_service``."""
    started = time.monotonic()
    kind = run_kind(solution)  # SpecError when kernelfleet cannot run it
    gen = generated_files(solution)
    macros = defines(solution)

    if kind is RunKind.PYTHON:
        return PreparedSolution(solution, kind, ok=True, generated=gen, defines=macros,
                                seconds=time.monotonic() - started)

    if kind is RunKind.CUDA_FAST:
        if build_service is None:
            raise ValueError("the cuda_cpp fast path needs a core.build.BuildService")
        from core.build import BuildRequest

        opts = solution.spec.compile_options
        request = BuildRequest(
            sources=build_inputs(solution),
            compile=tuple(s.path for s in solution.sources if PurePosixPath(s.path).suffix == ".cu"),
            defines=macros,
            extra_flags=tuple(opts.cuda_cflags) if opts else (),
            arch=arch,
        )
        result = await build_service.build(request)
        return PreparedSolution(
            solution,
            kind,
            ok=bool(result.ok),
            errors="" if result.ok else trim_errors(result.errors or result.log),
            log=result.log,
            build=result,
            generated=gen,
            defines=macros,
            cache_hit=bool(result.cache_hit),
            seconds=time.monotonic() - started,
            timed_out=bool(getattr(result, "timed_out", False)),
        )

    ext = await build_extension(solution, macros, arch=arch, cache_dir=torch_ext_cache_dir,
                                timeout_s=torch_ext_timeout_s)
    return PreparedSolution(
        solution,
        kind,
        ok=ext.ok,
        errors=ext.errors,
        log=ext.log,
        extension=ext.library,
        extension_module=ext.module_name,
        generated=gen,
        defines=macros,
        cache_hit=ext.cache_hit,
        seconds=time.monotonic() - started,
        timed_out=ext.timed_out,
    )
