"""A g++ precompiled header for the torch header a C++ translation unit includes first.

``#include <torch/extension.h>`` costs a C++ TU most of its parse time. When a TU's first directive includes a
header from torch's include folders, the build compiles that header once (same compiler, same flags less the
per-candidate macros and the solution folder) into ``<pch>/<key>/<header>.gch`` and passes ``-I<pch>/<key>``
ahead of every other include folder: g++ looks for ``<header>.gch`` in each folder before the header itself, so it
finds the PCH first. g++ checks the PCH against the TU (macros the header uses, options); when it does not fit,
it warns (``-Winvalid-pch``) and reads the real header, so a PCH can make a build slower but never wrong.
Only g++ TUs: nvcc hands its host compiler preprocessed text, where a PCH cannot apply.

A missing PCH is built by a process of its own, started once the build that wanted it is done (``spawn``): a cold
build does not wait the half minute compiling torch/extension.h takes, and the next build finds it. Run as
``python -m core.solution.torch_ext_pch PLAN.json`` it is that process.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PCH_SUBDIR = "pch"
ENABLE_ENV = "KERNELFLEET_TORCH_EXT_PCH"  # "0" turns precompiled headers off
MAX_KEPT = 4  # each is hundreds of MB (torch/extension.h: ~0.8 GB)
BUILD_TIMEOUT_S = 600.0  # the detached build's compiler is killed after this
PROJECT_ROOT = Path(__file__).resolve().parents[2]
_WORK_MARK = ".tmp-"
_FIRST_INCLUDE = re.compile(r'#\s*include\s*<(?P<header>[\w./+-]+)>')
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
REJECTED = re.compile(r"\.gch\b.*\[-Winvalid-pch\]")  # g++ says why it read the header instead


@dataclass(frozen=True)
class PchPlan:
    header: str  # as included: "torch/extension.h"
    header_file: Path  # where it is in torch's include folders
    folder: Path  # what goes on -I: <folder>/<header>.gch
    argv: tuple[str, ...]  # the command that builds it into <work folder>/<header>.gch, with "$out" for that file

    @property
    def ready(self) -> bool:
        return (self.folder / f"{self.header}.gch").is_file()


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "1") != "0"


def first_include(text: str) -> str | None:
    """The ``<header>`` of the TU's first directive when nothing but comments and blank lines precede it."""
    text = _BLOCK_COMMENT.sub(" ", text)
    for line in text.splitlines():
        stripped = line.split("//", 1)[0].strip()
        if not stripped:
            continue
        match = _FIRST_INCLUDE.fullmatch(stripped)
        return match["header"] if match else None
    return None


def system_include_dirs(template: Sequence[str]) -> list[Path]:
    """The ``-isystem`` folders of a compile command (torch's, CUDA's and Python's), in search order."""
    dirs = []
    for i, token in enumerate(template):
        if token == "-isystem" and i + 1 < len(template):
            dirs.append(Path(template[i + 1]))
        elif token.startswith("-isystem") and len(token) > len("-isystem"):
            dirs.append(Path(token[len("-isystem"):]))
    return dirs


def plan_pch(
    source_text: str,
    template: Sequence[str],
    *,
    drop: Sequence[str],
    shadowing_dirs: Sequence[Path],
    cache_dir: Path,
    toolchain: str,
) -> PchPlan | None:
    """The PCH a TU could use, or None. ``drop``: per-candidate flags left out of the PCH (its name, tunables, the
    solution folder); ``shadowing_dirs``: folders searched before torch's, where the header must not exist."""
    header = first_include(source_text)
    if header is None:
        return None
    if any((d / header).exists() for d in shadowing_dirs):
        return None
    header_file = next((d / header for d in system_include_dirs(template) if (d / header).is_file()), None)
    if header_file is None:
        return None
    argv = _pch_argv(template, set(drop), header_file)
    key = hashlib.sha256(json.dumps({"argv": argv, "toolchain": toolchain, "header": header}).encode()).hexdigest()
    return PchPlan(header, header_file, cache_dir / key[:32], tuple(argv))


def _pch_argv(template: Sequence[str], drop: set[str], header_file: Path) -> list[str]:
    argv: list[str] = []
    skip_next = False
    for token in template:
        if skip_next:
            skip_next = False
            continue
        if token in ("-MF", "-o"):
            skip_next = True
            continue
        if token in ("-MMD", "-c", "$in") or token in drop:
            continue
        argv.append(token)
    return [*argv, "-x", "c++-header", str(header_file), "-o", "$out"]


def use_flags(plan: PchPlan) -> list[str]:
    """Flags that go right after the compiler so its folder is searched first."""
    return [f"-I{plan.folder}", "-Winvalid-pch"]


def build_pch(plan: PchPlan, run) -> str:
    """Build ``plan`` into place (temporary folder renamed; a concurrent build of the same PCH wins or loses
    whole). ``run(argv, cwd) -> (returncode, output)``. Returns a line for the build log."""
    if plan.ready:
        return f"kernelfleet: pch {plan.header} already built"
    plan.folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(plan.folder.parent)
    work = plan.folder.parent / f"{plan.folder.name}{_WORK_MARK}{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    target = work / f"{plan.header}.gch"
    target.parent.mkdir(parents=True)
    started = time.monotonic()
    try:
        code, output = run([token.replace("$out", str(target)) for token in plan.argv], work)
        if code != 0 or not target.is_file():
            return f"kernelfleet: pch {plan.header} not built (status {code}); compiles read the header\n{output}"
        try:
            os.rename(work, plan.folder)
        except OSError:
            pass  # another build put the same PCH in place first
        _evict(plan.folder.parent)
        return f"kernelfleet: pch {plan.header} built in {time.monotonic() - started:.1f} s"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _evict(root: Path) -> None:
    kept = sorted((p for p in root.iterdir() if _WORK_MARK not in p.name), key=_mtime, reverse=True)
    for old in kept[MAX_KEPT:]:
        shutil.rmtree(old, ignore_errors=True)


def touch(plan: PchPlan) -> None:
    """Mark a PCH as recently used (eviction keeps the newest)."""
    try:
        os.utime(plan.folder)
    except OSError:
        pass


def _remove_stale(root: Path, older_than_s: float = 3600.0) -> None:
    now = time.time()
    for item in root.glob(f"*{_WORK_MARK}*"):
        if now - _mtime(item) > older_than_s:
            shutil.rmtree(item, ignore_errors=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def spawn(plan: PchPlan, env: dict[str, str] | None = None) -> subprocess.Popen | None:
    """Build ``plan`` in a process of its own, in a session of its own (it outlives the build that asked, and the
    kill of that build's process group), writing nowhere but the PCH folder; None when another build's process is
    already on it or it could not start."""
    work = plan.folder.parent
    work.mkdir(parents=True, exist_ok=True)
    if any(time.time() - _mtime(other) < BUILD_TIMEOUT_S for other in work.glob(f"{plan.folder.name}{_WORK_MARK}*")):
        return None  # another build's process is on it
    spec = work / f"{plan.folder.name}{_WORK_MARK}{os.getpid()}.json"
    spec.write_text(json.dumps({"header": plan.header, "header_file": str(plan.header_file),
                                "folder": str(plan.folder), "argv": list(plan.argv)}))
    environment = dict(os.environ if env is None else env)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), environment.get("PYTHONPATH")]))
    try:
        return subprocess.Popen([sys.executable, "-m", "core.solution.torch_ext_pch", str(spec)], cwd=work,
                                env=environment, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        spec.unlink(missing_ok=True)
        return None


def _run_bounded(argv, cwd: Path) -> tuple[int, str]:
    try:
        completed = subprocess.run(list(argv), cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {BUILD_TIMEOUT_S:g} s"
    return completed.returncode, completed.stdout.decode(errors="replace")


def _main(spec_path: str) -> int:
    try:
        os.nice(10)  # work for later builds: it yields the cores to the builds and timings of now
    except OSError:
        pass
    spec = Path(spec_path)
    try:
        data = json.loads(spec.read_text())
    finally:
        spec.unlink(missing_ok=True)
    plan = PchPlan(data["header"], Path(data["header_file"]), Path(data["folder"]), tuple(data["argv"]))
    build_pch(plan, _run_bounded)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))
