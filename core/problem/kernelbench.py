"""Import KernelBench problem files (``class Model``, ``get_inputs()``, ``get_init_inputs()``) as problem folders.

One ``.py`` file becomes ``OUT/<subset>/<name>/{definition.json,workload.jsonl}``: the subset is the file's folder
(``level1``), the name its stem (``19_ReLU`` -> ``019_relu``). The file is never imported here: a subprocess
(``core.problem.kernelbench_probe``) learns its inputs and outputs under a timeout and a memory limit, and
``core.problem.kernelbench_definition`` turns what it learned into the definition. What is written is loaded
back with ``core.problem.load`` before it is moved into place, so a folder that appears is one kernelfleet reads.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.problem.kernelbench_definition import (
    DEFAULT_TOLERANCE,
    build_definition,
    build_workload,
    problem_name,
    subset_name,
    wrapper_conflicts,
)
from core.problem.load import DEFINITION_FILE, WORKLOAD_FILE, ProblemInvalid, load_problem
from core.secrets import without_secrets


class ImportFailed(Exception):
    """A KernelBench file that could not be imported; the message says why, in one line."""


@dataclass(frozen=True)
class Target:
    source: Path
    subset: str
    name: str

    def folder(self, out_dir: Path) -> Path:
        return out_dir / self.subset / self.name


@dataclass(frozen=True)
class Imported:
    source: Path
    folder: Path
    ran_on: str  # "cpu": the forward ran on data; "meta": shapes only
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProbeLimits:
    timeout_s: float = 120.0
    memory_limit_bytes: int | None = None
    real_budget_bytes: int = 1 << 30  # inputs + parameters above this are only shaped on the meta device


def find_kernelbench_files(path: Path) -> list[Path]:
    """The file itself, or every ``.py`` file under a folder (sorted; ``__init__.py`` and hidden folders left out)."""
    if path.is_file():
        if path.suffix != ".py":
            raise ImportFailed(f"{path}: not a .py file")
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such file or directory")
    found = [p for p in path.rglob("*.py") if p.is_file() and p.name != "__init__.py"
             and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(path).parts)]
    return sorted(found, key=lambda p: (p.parent.as_posix(), _number_first(p.stem)))


def target_for(source: Path) -> Target:
    return Target(source, subset_name(source.resolve().parent.name), problem_name(source.stem))


def check_source(source: Path) -> str:
    """The file's text, once it parses and leaves the wrapper's names free; ImportFailed otherwise."""
    try:
        text = source.read_text()
    except UnicodeDecodeError:
        raise ImportFailed("not UTF-8 text") from None
    except OSError as exc:
        raise ImportFailed(f"cannot read: {exc.strerror or exc}") from None
    try:
        tree = ast.parse(text, filename=str(source))
    except SyntaxError as exc:
        raise ImportFailed(f"syntax error at line {exc.lineno}: {exc.msg}") from None
    clashes = wrapper_conflicts(_top_level_names(tree))
    if clashes:
        raise ImportFailed(f"defines {', '.join(clashes)} at the top level, which the imported reference needs for "
                           "its own wrapper")
    return text


def import_file(target: Target, out_dir: Path, *, limits: ProbeLimits = ProbeLimits(),
                atol: float = DEFAULT_TOLERANCE, rtol: float = DEFAULT_TOLERANCE, force: bool = False) -> Imported:
    folder = target.folder(out_dir)
    if folder.exists() and not force:
        raise ImportFailed(f"{folder} exists (--force replaces it)")
    source_text = check_source(target.source)
    probed, notes = probe_in_subprocess(target.source, limits)
    origin = f"{target.source.resolve().parent.name}/{target.source.name}"
    definition = build_definition(target.name, origin, source_text, probed)
    workload = build_workload(target.name, target.subset, list(definition["inputs"]), atol, rtol)
    _write_checked(folder, definition, workload, force)
    return Imported(target.source, folder, probed["run"], tuple(probed.get("notes", [])) + tuple(notes))


def probe_in_subprocess(source: Path, limits: ProbeLimits) -> tuple[dict[str, Any], list[str]]:
    """What ``core.problem.kernelbench_probe`` learned about the file, and notes on what it could not run."""
    with tempfile.TemporaryDirectory(prefix="kf-kernelbench-") as scratch:
        result_file, stage_file = Path(scratch) / "result.json", Path(scratch) / "stage"
        request = {"file": str(source.resolve()), "result_file": str(result_file), "stage_file": str(stage_file),
                   "memory_limit": limits.memory_limit_bytes, "real_budget_bytes": limits.real_budget_bytes}
        env = {**without_secrets(os.environ), "CUDA_VISIBLE_DEVICES": "",  # probed on the CPU, whatever the machine
               "PYTHONPATH": _project_root() + os.pathsep + os.environ.get("PYTHONPATH", "")}
        proc = subprocess.Popen([sys.executable, "-m", "core.problem.kernelbench_probe", json.dumps(request)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                                cwd=scratch, env=env)
        try:
            _, stderr = proc.communicate(timeout=limits.timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, stderr = proc.communicate()
            timed_out = True
        stage = stage_file.read_text() if stage_file.exists() else "starting Python"
        result = json.loads(result_file.read_text()) if result_file.exists() else None

    if result is not None and "error" in result:
        raise ImportFailed(result["error"])
    if result is not None and "run" in result:
        notes = []
        if timed_out or proc.returncode != 0:
            why = (f"no result within {limits.timeout_s:g} s" if timed_out
                   else _exit_text(proc.returncode, stderr, limits))
            notes.append(f"forward not run on data on the CPU ({stage}: {why}); shapes from the meta device")
        return result, notes
    if timed_out:
        raise ImportFailed(f"timeout: no result within {limits.timeout_s:g} s ({stage})")
    raise ImportFailed(f"{stage}: {_exit_text(proc.returncode, stderr, limits)}")


def _write_checked(folder: Path, definition: dict, workload: dict, force: bool) -> None:
    """Write into a scratch folder beside the target, load it back, then move it into place."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        (scratch / DEFINITION_FILE).write_text(json.dumps(definition, indent=4) + "\n")
        (scratch / WORKLOAD_FILE).write_text(json.dumps(workload) + "\n")
        try:
            load_problem(scratch)
        except ProblemInvalid as exc:
            raise ImportFailed(f"the written problem does not load: {exc.errors[0].field}: "
                               f"{exc.errors[0].message}") from None
        if folder.exists() and force:
            shutil.rmtree(folder)
        os.replace(scratch, folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _exit_text(returncode: int, stderr: bytes, limits: ProbeLimits) -> str:
    limit = f" (the memory limit is {limits.memory_limit_bytes / (1 << 30):.1f} GiB)" \
        if limits.memory_limit_bytes else ""
    if returncode < 0:
        name = signal.Signals(-returncode).name
        return f"killed by {name}" + (limit if name == "SIGKILL" else "")
    text = stderr.decode(errors="replace").strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1][:200] if lines else "no message"
    exhausted = any(m in text.lower() for m in ("cannot allocate memory", "can't allocate memory", "bad_alloc",
                                                 "out of memory", "memoryerror"))
    return f"exit status {returncode}: {last}" + (limit if exhausted else "")


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def _number_first(stem: str) -> tuple[int, str]:
    head = stem.split("_", 1)[0]
    return (int(head), stem) if head.isdigit() else (sys.maxsize, stem)


def _project_root() -> str:
    return str(Path(__file__).resolve().parents[2])
