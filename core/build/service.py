"""The build service: a candidate's .cu files to cubins with nvcc, bounded in parallel, timed out, cached."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import anyio

from core.build.cache import BuildCache, CacheEntry, build_key
from core.build.cutlass import MISSING as CUTLASS_MISSING
from core.build.cutlass import cutlass_flags
from core.build.diagnostics import Diagnostic, Diagnostics, parse_diagnostics, relativize
from core.build.nvcc import compile_flags, detect_arch, find_nvcc, nvcc_command, nvcc_version
from core.build.process import run_in_process_group
from core.build.ptxas import KernelResources, parse_ptxas_report


@dataclass(frozen=True)
class BuildRequest:
    sources: Mapping[str, str]  # relative path -> content: every file of the candidate, headers included
    compile: tuple[str, ...]  # the .cu files among `sources` to compile, each to its own cubin
    defines: Mapping[str, str | int | float] = field(default_factory=dict)  # -DNAME=VALUE
    extra_flags: tuple[str, ...] = ()
    arch: str | None = None  # None: detect_arch()


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    key: str  # cache key; '' when the request was rejected before one could be computed
    cubins: Mapping[str, Path]  # source relative path -> cubin inside the cache entry
    resources: tuple[KernelResources, ...]
    errors: str  # the first errors as file:line: error: message ('' when ok)
    log: str  # the full compiler output, one "== source ==" section per compiled file
    cache_hit: bool
    seconds: float
    timed_out: bool
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Compilation:
    source: str
    cubin: Path
    returncode: int | None  # None: killed at the timeout
    output: str  # with workspace paths made relative


class BuildService:
    """Builds requests concurrently on one event loop; identical requests in flight share a single build."""

    def __init__(self, cache_dir: Path | None = None, max_parallel: int | None = None, timeout_s: float = 120.0):
        self._cache = BuildCache(cache_dir)
        self._cache.remove_stale_workspaces()
        # One nvcc per core: each runs its preprocessor, cicc and ptxas one after another.
        self._limiter = anyio.CapacityLimiter(max_parallel or os.cpu_count() or 1)
        self._timeout_s = timeout_s
        self._key_locks: dict[str, tuple[anyio.Lock, int]] = {}

    async def build(self, req: BuildRequest) -> BuildResult:
        started = time.perf_counter()
        if (problem := _request_problem(req)) is not None:
            return _refused(problem, key="", started=started)
        nvcc = find_nvcc()
        if nvcc is None:
            return _refused("nvcc not found: put it on PATH or set CUDA_HOME", key="", started=started)
        try:
            arch, version = await anyio.to_thread.run_sync(_toolchain_target, nvcc, req.arch)
            flags = compile_flags(arch, req.defines, req.extra_flags)
        except (ValueError, OSError, subprocess.SubprocessError) as error:
            return _refused(str(error), key="", started=started)
        headers = cutlass_flags(req.sources)
        if headers is None:
            return _refused(CUTLASS_MISSING, key="", started=started)
        flags = (*flags, *headers)
        key = build_key(sources=req.sources, compile=req.compile, flags=flags, arch=arch, nvcc_version=version)

        async with self._hold_key(key):
            entry = self._cache.load(key)
            if entry is not None:
                return _success(key, entry, cache_hit=True, started=started)
            return await self._compile_all(req, key, nvcc, flags, started)

    async def _compile_all(
        self, req: BuildRequest, key: str, nvcc: Path, flags: tuple[str, ...], started: float
    ) -> BuildResult:
        workspace = self._cache.new_workspace()
        try:
            try:
                await anyio.to_thread.run_sync(_write_sources, workspace / "src", req.sources)
            except OSError as error:
                return _refused(f"cannot write the sources: {error}", key=key, started=started)
            compilations: dict[str, _Compilation] = {}
            async with anyio.create_task_group() as group:
                for source in req.compile:
                    group.start_soon(self._compile_one, nvcc, flags, source, workspace, compilations)
            ordered = [compilations[source] for source in req.compile]

            log = "\n".join(f"== {c.source} ==\n{c.output}" for c in ordered)
            resources = tuple(
                kernel for c in ordered for kernel in parse_ptxas_report(c.output, source=c.source)
            )
            if all(c.returncode == 0 and c.cubin.is_file() for c in ordered):
                entry = await anyio.to_thread.run_sync(
                    self._cache.publish, key, workspace, {c.source: c.cubin for c in ordered}, resources, log
                )
                return _success(key, entry, cache_hit=False, started=started)
            diagnostics = self._failure_diagnostics(ordered)
            return BuildResult(
                ok=False, key=key, cubins={}, resources=resources, errors=diagnostics.report(), log=log,
                cache_hit=False, seconds=time.perf_counter() - started,
                timed_out=any(c.returncode is None for c in ordered),
                warnings=tuple(str(warning) for warning in diagnostics.warnings),
            )
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(functools.partial(shutil.rmtree, workspace, ignore_errors=True))

    async def _compile_one(
        self, nvcc: Path, flags: tuple[str, ...], source: str, workspace: Path, into: dict[str, _Compilation]
    ) -> None:
        source_dir = workspace / "src"
        cubin = workspace / "out" / f"{source}.cubin"
        cubin.parent.mkdir(parents=True, exist_ok=True)
        nvcc_temporaries = workspace / "tmp"
        nvcc_temporaries.mkdir(exist_ok=True)
        argv = nvcc_command(nvcc, flags, include_dir=source_dir, output=cubin, source=source)
        # Relative source path and cwd in the sources: the front end then names files as the candidate does.
        env = {**os.environ, "TMPDIR": str(nvcc_temporaries)}
        async with self._limiter:
            outcome = await run_in_process_group(argv, cwd=source_dir, env=env, timeout_s=self._timeout_s)
        output = relativize(outcome.output, source_dir, workspace)
        into[source] = _Compilation(source, cubin, outcome.returncode, output)

    def _failure_diagnostics(self, compilations: list[_Compilation]) -> Diagnostics:
        """Parsed errors of every file, plus one line for each failure the compiler itself did not explain."""
        errors: list[Diagnostic] = []
        warnings: list[Diagnostic] = []
        for compilation in compilations:
            parsed = parse_diagnostics(compilation.output)
            warnings.extend(parsed.warnings)
            if compilation.returncode is None:
                message = f"timed out after {self._timeout_s:g} s; nvcc and its children were killed"
                errors.append(Diagnostic("error", message, file=compilation.source))
            elif parsed.errors:
                errors.extend(parsed.errors)
            elif compilation.returncode != 0:
                last_line = next((line for line in reversed(compilation.output.splitlines()) if line.strip()), "")
                message = f"nvcc exited with status {compilation.returncode}: {last_line or 'no output'}"
                errors.append(Diagnostic("error", message, file=compilation.source))
            elif not compilation.cubin.is_file():
                errors.append(Diagnostic("error", "nvcc succeeded but wrote no cubin", file=compilation.source))
        return Diagnostics(tuple(errors), tuple(warnings))

    @asynccontextmanager
    async def _hold_key(self, key: str) -> AsyncIterator[None]:
        """An in-process lock per cache key, dropped when its last holder leaves."""
        lock, holders = self._key_locks.get(key, (None, 0))
        if lock is None:
            lock = anyio.Lock()
        self._key_locks[key] = (lock, holders + 1)
        try:
            async with lock:
                yield
        finally:
            lock, holders = self._key_locks[key]
            if holders == 1:
                del self._key_locks[key]
            else:
                self._key_locks[key] = (lock, holders - 1)


def build_sync(req: BuildRequest, service: BuildService | None = None) -> BuildResult:
    """``build`` for callers without an event loop (CLI, scripts); a default service when none is given."""
    return anyio.run((service or BuildService()).build, req)


def _toolchain_target(nvcc: Path, requested_arch: str | None) -> tuple[str, str]:
    """(arch, nvcc version); both may start a subprocess the first time, so this runs in a worker thread."""
    return detect_arch(requested_arch), nvcc_version(nvcc)


def _success(key: str, entry: CacheEntry, *, cache_hit: bool, started: float) -> BuildResult:
    return BuildResult(
        ok=True, key=key, cubins=entry.cubins, resources=entry.resources, errors="", log=entry.log,
        cache_hit=cache_hit, seconds=time.perf_counter() - started, timed_out=False,
        warnings=tuple(str(warning) for warning in parse_diagnostics(entry.log).warnings),
    )


def _refused(message: str, *, key: str, started: float) -> BuildResult:
    """A request that never reached nvcc."""
    return BuildResult(
        ok=False, key=key, cubins={}, resources=(), errors=message, log="", cache_hit=False,
        seconds=time.perf_counter() - started, timed_out=False,
    )


def _request_problem(req: BuildRequest) -> str | None:
    for path in req.sources:
        if (reason := _unsafe_path_reason(path)) is not None:
            return f"source path {path!r} {reason}"
    if not req.compile:
        return "nothing to compile: the request's compile list is empty"
    for path in req.compile:
        if path not in req.sources:
            return f"compile entry {path!r} is not one of the sources"
    return None


def _unsafe_path_reason(path: str) -> str | None:
    pure = PurePosixPath(path)
    if not pure.parts:
        return "is empty"
    if pure.is_absolute():
        return "is absolute; source paths must be relative to the candidate's directory"
    if ".." in pure.parts:
        return "contains '..'; source paths must stay inside the candidate's directory"
    return None


def _write_sources(source_dir: Path, sources: Mapping[str, str]) -> None:
    for relative, content in sources.items():
        path = source_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
