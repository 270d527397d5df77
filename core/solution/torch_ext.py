"""Upstream-style C++/CUDA solutions: a torch extension built as ``torch.utils.cpp_extension.load`` builds it.

This is upstream's build (every C/C++/CUDA source compiled, the solution folder on the include path, the
``compile_options`` flags appended) plus the tunables as ``-D`` macros. The commands are torch's own, but
kernelfleet runs them (``core.solution.torch_ext_build``): one compiler process per translation unit in parallel,
each TU's object cached by content under ``cache_root()/"torch_ext"/"objects"``, a precompiled header for the
torch header a C++ TU includes first under ``.../"pch"``. A build is still slow when a ``.cu`` that includes
torch's headers changes (nvcc parses them twice and compiles them once), so:

* it runs in a subprocess in its own process group, killed whole on timeout or cancellation;
* a successful build is kept under ``cache_root()/"torch_ext"/<key>``, where ``key`` hashes everything that
  decides the binary (C/C++ sources, flags, defines, arch, torch and Python versions). A second prepare of the
  same sources is a cache hit that costs a stat. Builds go to a temporary folder renamed into place when done,
  so two concurrent builds of one key never see each other's half-written output.

Failures are not cached (a timeout or a broken toolchain must not stick). Run as ``python -m
core.solution.torch_ext REQUEST.json`` it is the build subprocess itself.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import anyio

from core.build.nvcc import detect_arch
from core.build.cutlass import MISSING as CUTLASS_MISSING
from core.build.cutlass import cutlass_flags
from core.build.process import run_in_process_group
from core.cache import cache_root
from core.solution.diagnostics import summarize_build_log
from core.solution.schema import Solution, built_by_upstream
from core.solution.torch_ext_build import BUILD_SUMMARY
from core.solution.torch_ext_objects import OBJECTS_SUBDIR
from core.solution.torch_ext_pch import PCH_SUBDIR
from core.solution.tunables import TUNABLES_FILE

CACHE_SUBDIR = "torch_ext"
RESULT_FILE = "result.json"
LOG_FILE = "build.log"
_FORMAT = "kernelfleet-torch-ext-3"
DEFAULT_TIMEOUT_S = 600.0
_WORK_MARK = ".tmp-"
_STALE_WORK_S = 6 * 3600.0
# Environment variables a build subprocess does not need and must not see.
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")


@dataclass(frozen=True)
class ExtensionBuild:
    ok: bool
    key: str
    module_name: str
    library: Path | None  # the built .so (inside the cache) when ok
    errors: str = ""
    log: str = ""
    cache_hit: bool = False
    seconds: float = 0.0
    timed_out: bool = False
    compiled: tuple[str, ...] = ()  # the TUs this build compiled
    reused: tuple[str, ...] = ()  # the TUs whose cached object it linked


def build_inputs(solution: Solution) -> dict[str, str]:
    """Sources that can reach the compiler: everything but Python files and tunables.json (values come as -D)."""
    return {
        s.path: s.content
        for s in solution.sources
        if s.path != TUNABLES_FILE and PurePosixPath(s.path).suffix != ".py"
    }


def extension_key(
    solution: Solution, defines: dict[str, str | int | float], arch: str | None = None
) -> str:
    opts = solution.spec.compile_options
    payload = {
        "format": _FORMAT,
        "sources": sorted(build_inputs(solution).items()),
        "cflags": list(opts.cflags) if opts else [],
        "cuda_cflags": list(opts.cuda_cflags) if opts else [],
        "ld_flags": list(opts.ld_flags) if opts else [],
        "defines": sorted((k, str(v)) for k, v in defines.items()),
        "arch": arch,
        "cutlass": list(cutlass_flags(build_inputs(solution)) or ()),
        "torch": _torch_version(),
        "python": list(sys.version_info[:2]),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


# The TORCH_EXTENSION_NAME every extension is compiled with: upstream's own (its build_ext names every solution's
# module so). Fixed, so that a unit naming it (PYBIND11_MODULE) keeps its cached object when only other units of a
# new candidate change. Each build is imported under a name of its own whose last part is this one (the part
# PyInit_ is looked up by), so the builds of one process never meet in sys.modules.
EXTENSION_NAME = "benchmark_kernel"


def module_name_for(key: str) -> str:
    """The import name of the build ``key``: unique per build, ending in EXTENSION_NAME."""
    return f"kf_ext_{key[:20]}.{EXTENSION_NAME}"


def cached_extension(key: str, cache_dir: Path | None = None) -> Path | None:
    """The cached .so for ``key``, or None."""
    folder = (cache_dir or cache_root() / CACHE_SUBDIR) / key
    try:
        result = json.loads((folder / RESULT_FILE).read_text())
    except (OSError, ValueError):
        return None
    library = folder / result.get("library", "")
    return library if library.is_file() else None


async def build_extension(
    solution: Solution,
    defines: dict[str, str | int | float],
    *,
    arch: str | None = None,
    cache_dir: Path | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    shared_dir: Path | None = None,
) -> ExtensionBuild:
    """Build (or find in the cache) the torch extension of a C++-entry solution. Failures come back as data.

    ``arch`` (``sm_90a``...) becomes TORCH_CUDA_ARCH_LIST; when None and there is a .cu source, it is
    ``core.build.detect_arch()`` (the GPU here, ``$KERNELFLEET_CUDA_ARCH``, else sm_90a), as for the fast path.
    ``shared_dir`` holds the per-TU objects and precompiled headers, shared by all builds (default
    ``cache_root()/"torch_ext"``, whatever ``cache_dir`` is: a failed build leaves nothing in ``cache_dir``).
    """
    started = time.monotonic()
    cache_dir = Path(cache_dir) if cache_dir else cache_root() / CACHE_SUBDIR
    if arch is None and any(PurePosixPath(p).suffix == ".cu" for p in build_inputs(solution)):
        try:
            arch = await anyio.to_thread.run_sync(detect_arch)
        except ValueError as exc:  # a malformed $KERNELFLEET_CUDA_ARCH
            return ExtensionBuild(False, "", "", None, str(exc), seconds=time.monotonic() - started)
    key = extension_key(solution, defines, arch)
    name = module_name_for(key)
    hit = cached_extension(key, cache_dir)
    if hit is not None:
        log = _read(hit.parent.parent / LOG_FILE) if (hit.parent.parent / LOG_FILE).exists() else ""
        return ExtensionBuild(True, key, name, hit, log=log, cache_hit=True, seconds=time.monotonic() - started)

    cache_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_work(cache_dir)
    work = Path(tempfile.mkdtemp(prefix=f"{key[:16]}{_WORK_MARK}", dir=cache_dir))
    try:
        src = work / "src"
        for path, content in build_inputs(solution).items():
            target = src / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
        inputs = build_inputs(solution)
        # As upstream's build: a file in a folder (an exported composite's member) is compiled through the
        # top-level unit that includes it, never on its own as well.
        compiled = sorted(p for p in inputs if built_by_upstream(p))
        opts = solution.spec.compile_options
        define_flags = [f"-D{k}={int(v) if isinstance(v, bool) else v}" for k, v in sorted(defines.items())]
        cutlass = cutlass_flags(inputs)
        if cutlass is None:
            return ExtensionBuild(False, key, name, None, CUTLASS_MISSING, seconds=time.monotonic() - started)
        # After the solution folder, as upstream orders them; the version define keys the objects by CUTLASS too.
        define_flags += [f for f in cutlass if f.startswith("-D")]
        shared = Path(shared_dir) if shared_dir else cache_root() / CACHE_SUBDIR
        request = {
            "name": EXTENSION_NAME,
            "src": str(src),
            "sources": compiled,
            "headers": sorted(p for p in inputs if p not in compiled),
            "defines": define_flags,
            "cflags": [*(opts.cflags if opts else ()), *define_flags],
            "cuda_cflags": [*(opts.cuda_cflags if opts else ()), *define_flags],
            "ld_flags": list(opts.ld_flags) if opts else [],
            "with_cuda": any(p.endswith(".cu") for p in compiled),
            "build_directory": str(work / "build"),
            "include_extra": [f[2:] for f in cutlass if f.startswith("-I")],
            "objects_dir": str(shared / OBJECTS_SUBDIR),
            "pch_dir": str(shared / PCH_SUBDIR),
        }
        (work / "build").mkdir()
        (work / "request.json").write_text(json.dumps(request, indent=2))
        outcome = await run_in_process_group(
            [sys.executable, "-m", "core.solution.torch_ext", str(work / "request.json")],
            cwd=work, env=_build_env(arch), timeout_s=timeout_s,
        )
        log = outcome.output
        (work / LOG_FILE).write_text(log, encoding="utf-8")
        seconds = time.monotonic() - started
        if outcome.returncode is None:
            return ExtensionBuild(False, key, name, None, f"torch extension build timed out after {timeout_s:g} s; "
                                  "the build and its children were killed", log, seconds=seconds, timed_out=True)
        summary = _build_summary(log)
        units = {"compiled": tuple(summary.get("compiled", ())), "reused": tuple(summary.get("reused", ()))}
        if outcome.returncode != 0:
            errors = summarize_build_log(log, src) or f"the build exited with status {outcome.returncode}"
            return ExtensionBuild(False, key, name, None, errors, log, seconds=seconds)
        built = next((p for p in (work / "build").glob(f"{EXTENSION_NAME}*.so")), None)
        if built is None:
            return ExtensionBuild(False, key, name, None, "the build produced no extension library", log,
                                  seconds=seconds)
        (work / RESULT_FILE).write_text(json.dumps({"module": name, "library": f"build/{built.name}"}))
        final = cache_dir / key
        try:
            os.rename(work, final)
        except OSError:
            # Another build of the same key finished first: keep its result.
            if cached_extension(key, cache_dir) is None:
                raise
        library = cached_extension(key, cache_dir)
        return ExtensionBuild(library is not None, key, name, library, "" if library else "cache rename failed", log,
                              seconds=time.monotonic() - started, **units)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def _build_summary(log: str) -> dict:
    for line in reversed(log.splitlines()):
        if line.startswith(BUILD_SUMMARY):
            try:
                return json.loads(line[len(BUILD_SUMMARY):])
            except ValueError:
                return {}
    return {}


def _remove_stale_work(cache_dir: Path) -> None:
    """Build folders left by a process that died mid-build (no build runs for hours)."""
    now = time.time()
    for item in cache_dir.glob(f"*{_WORK_MARK}*"):
        try:
            if now - item.stat().st_mtime > _STALE_WORK_S:
                shutil.rmtree(item, ignore_errors=True)
        except OSError:
            pass


def _build_env(arch: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not any(m in k.upper() for m in _SECRET_MARKERS)}
    if arch:
        cap = _arch_to_capability(arch)
        if cap:
            env["TORCH_CUDA_ARCH_LIST"] = cap
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _arch_to_capability(arch: str) -> str | None:
    """``sm_90a`` -> ``9.0a`` (TORCH_CUDA_ARCH_LIST spelling)."""
    if not arch.startswith("sm_"):
        return None
    digits = arch[3:]
    suffix = digits[-1] if digits and digits[-1].isalpha() else ""
    number = digits[:-1] if suffix else digits
    if not number.isdigit() or len(number) < 2:
        return None
    return f"{number[:-1]}.{number[-1]}{suffix}"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _main(request_path: str) -> int:
    """The build subprocess: compile, link and import-check the extension (import errors surface here, not later)."""
    from core.solution.torch_ext_build import build

    code = build(json.loads(Path(request_path).read_text()))
    if code == 0:
        print("kernelfleet: extension built", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))
