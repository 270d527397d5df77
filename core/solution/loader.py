"""Write a prepared candidate to disk and import its entry function.

This module runs candidate code. It belongs in an evaluation worker process only, never in the orchestrator:
:func:`load_entry` executes the candidate's module-level code in the calling process.

Layout written by :func:`materialize` (a fresh folder per candidate)::

    <dest>/<every source at its own path>        # main.py, rmsnorm.cu, tunables.json, sub/helper.py ...
    <dest>/kernelfleet_tunables.py               # generated when tunables.json exists
    <dest>/<source path with .cubin suffix>      # fast path: rmsnorm.cu -> rmsnorm.cubin, next to its source
    <dest>/.kernelfleet/ext/<module>.so          # torch extension (cuda_cpp with a C++ entry)
    <dest>/.kernelfleet/manifest.json            # kind, entry, artifacts: what load_entry needs

Import isolation (:func:`load_entry`): the entry file is imported as a submodule of a package with a unique,
never reused name (``_kf_candidate_<n>_<hash>``), so relative imports (``from .helpers import f``) resolve
inside the candidate. For absolute imports of sibling files (``import helpers``,
``from kernelfleet_tunables import BLOCK``) the candidate's folder is on ``sys.path`` *while the entry module
is imported*; afterwards the folder leaves ``sys.path`` and those sibling modules leave ``sys.modules``
(the entry keeps its references), and any module of the same name that was there before is put back. Two
candidates with the same file names therefore never see each other's modules. Consequence: a candidate must
do its imports at module level (an absolute ``import helpers`` first run inside ``run()`` would not find the
folder).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import itertools
import json
import shutil
import sys
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any

from core.solution.prepare import PreparedSolution
from core.solution.schema import Solution
from core.solution.support import RunKind, run_kind

META_DIR = ".kernelfleet"
MANIFEST = f"{META_DIR}/manifest.json"
EXT_DIR = f"{META_DIR}/ext"
_FORMAT = 1

_counter = itertools.count(1)
# materialized folder -> the unique package name its entry was imported under
_loaded: dict[str, str] = {}


class CandidateLoadError(Exception):
    """The candidate could not be imported, or its entry point is missing or not callable."""


def cubin_path_for(source_path: str) -> str:
    """Where the cubin of a ``.cu`` source lies in a materialized folder: next to it, suffix ``.cubin``."""
    return str(PurePosixPath(source_path).with_suffix(".cubin"))


# ---------------------------------------------------------------- materialize


def materialize(prepared: PreparedSolution, dest_dir: str | Path) -> Path:
    """Write sources, generated files and built artifacts into ``dest_dir`` (absent or empty); return it."""
    if not prepared.ok:
        raise ValueError(f"cannot materialize '{prepared.solution.name}': its build failed")
    dest = Path(dest_dir)
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest}: not empty; materialize needs a fresh folder")
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    solution = prepared.solution
    written: set[str] = set()

    def place(rel: str) -> Path:
        key = str(PurePosixPath(rel))
        if key in written:
            raise ValueError(f"{solution.name}: '{rel}' would be written twice (a source clashes with a build output)")
        written.add(key)
        target = (root / rel).resolve()
        if root not in target.parents:
            raise ValueError(f"{solution.name}: '{rel}' escapes the solution folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    for src in solution.sources:
        place(src.path).write_text(src.content, encoding="utf-8")
    for rel, text in prepared.generated.items():
        place(rel).write_text(text, encoding="utf-8")

    cubins: dict[str, str] = {}
    for source_path, cubin in sorted(prepared.cubins.items()):
        rel = cubin_path_for(source_path)
        shutil.copyfile(cubin, place(rel))
        cubins[source_path] = rel

    extension = None
    if prepared.extension is not None:
        rel = f"{EXT_DIR}/{prepared.extension_module}{''.join(prepared.extension.suffixes) or '.so'}"
        shutil.copyfile(prepared.extension, place(rel))
        extension = {"module": prepared.extension_module, "file": rel}

    manifest = {
        "format": _FORMAT,
        "name": solution.name,
        "kind": prepared.kind.value,
        "entry_file": solution.entry_file,
        "entry_symbol": solution.entry_symbol,
        "generated": sorted(prepared.generated),
        "cubins": cubins,
        "extension": extension,
        "defines": dict(prepared.defines),
    }
    place(MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return dest


def read_manifest(materialized_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(materialized_dir) / MANIFEST).read_text(encoding="utf-8"))


# ---------------------------------------------------------------- load


def load_entry(materialized_dir: str | Path, solution: Solution) -> Callable[..., Any]:
    """Import the candidate in ``materialized_dir`` and return its entry function (worker process only)."""
    root = Path(materialized_dir).resolve()
    try:
        manifest = read_manifest(root)
        kind = RunKind(manifest["kind"])
    except (OSError, ValueError, KeyError):
        manifest, kind = {}, run_kind(solution, check_environment=False)

    if kind is RunKind.TORCH_EXT:
        module = _load_extension(root, manifest, solution)
    else:
        module = _import_python_entry(root, solution)

    symbol = solution.entry_symbol
    fn = getattr(module, symbol, None)
    if fn is None:
        raise CandidateLoadError(
            f"{solution.entry_file}: no function '{symbol}' (entry point {solution.spec.entry_point})"
        )
    if not callable(fn):
        raise CandidateLoadError(f"{solution.entry_file}: '{symbol}' is a {type(fn).__name__}, not a function")
    return fn


def unload(materialized_dir: str | Path) -> None:
    """Forget a loaded candidate: its package leaves sys.modules and its cubins leave the runtime cache."""
    root = str(Path(materialized_dir).resolve())
    package = _loaded.pop(root, None)
    if package is not None:
        for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
            del sys.modules[name]
    from core.solution import runtime

    runtime.forget(root)


def _import_python_entry(root: Path, solution: Solution) -> ModuleType:
    entry = PurePosixPath(solution.entry_file)
    if not (root / entry).is_file():
        raise CandidateLoadError(f"{root}: entry file '{entry}' is missing; was the folder materialized?")
    package = f"_kf_candidate_{next(_counter)}_{hashlib.sha1(str(root).encode()).hexdigest()[:8]}"
    search = [root / entry.parent, root] if entry.parent != PurePosixPath(".") else [root]
    shadowed = set().union(*(_top_level_names(d) for d in search))

    saved = {n: sys.modules.pop(n) for n in list(sys.modules) if n.partition(".")[0] in shadowed}
    inserted = [str(d) for d in search]
    sys.path[:0] = inserted
    importlib.invalidate_caches()
    pkg = ModuleType(package)
    pkg.__path__ = [str(root)]
    pkg.__package__ = package
    pkg.__spec__ = ModuleSpec(package, None, is_package=True)
    pkg.__spec__.submodule_search_locations = [str(root)]
    sys.modules[package] = pkg
    _loaded[str(root)] = package
    try:
        return importlib.import_module(".".join([package, *entry.with_suffix("").parts]))
    except (Exception, SystemExit) as exc:  # the candidate's own fault: report it, keep the worker alive
        raise CandidateLoadError(f"importing {entry} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        for path in inserted:
            try:
                sys.path.remove(path)
            except ValueError:
                pass
        for name in [n for n in sys.modules if n.partition(".")[0] in shadowed]:
            del sys.modules[name]
        sys.modules.update(saved)


def _top_level_names(folder: Path) -> set[str]:
    """Module names a folder provides to an absolute import: ``x.py`` -> ``x``, a sub-folder -> its name."""
    names = set()
    if not folder.is_dir():
        return names
    for item in folder.iterdir():
        if item.name.startswith("."):
            continue
        if item.is_file() and item.suffix == ".py" and item.stem.isidentifier():
            names.add(item.stem)
        elif item.is_dir() and item.name.isidentifier():
            names.add(item.name)
    return names


def _load_extension(root: Path, manifest: dict[str, Any], solution: Solution) -> ModuleType:
    ext = manifest.get("extension") or {}
    if not ext:
        raise CandidateLoadError(f"{root}: no built extension in the manifest; was it prepared and materialized?")
    name, path = ext["module"], root / ext["file"]
    # The module name carries the build's content hash: the same name is the same binary, so reuse it.
    if name in sys.modules:
        return sys.modules[name]
    import torch  # noqa: F401  (the extension links against libtorch, which must be loaded first)

    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    if spec is None:
        raise CandidateLoadError(f"{path}: cannot load the extension")
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except Exception as exc:
        raise CandidateLoadError(f"loading the extension of '{solution.name}' failed: {exc}") from exc
    sys.modules[name] = module
    return module
