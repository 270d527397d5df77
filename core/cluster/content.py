"""A problem travels to a Ray node as content, never as a path into the head's disk: its folder's files as bytes,
and the safetensors blobs its workloads read where they are small enough to ship. On the node it is written once
per content hash under the node's cache (``cache_root()/cluster/problems/HASH``) and loaded with ``load_problem``.

Blobs: when all the blobs one problem's workloads read come to at most ``MAX_SHIPPED_BLOB_BYTES``, they travel with
it; above that none do, and every node must hold them at the same paths as the head (the blob roots and the folders
they were found in). A node that cannot run a workload the head can says so in a ``ContentError``, rather than
quietly reporting the workload unavailable.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from core.cluster.errors import ContentError
from core.problem.load import load_problem
from core.problem.schema import InputKind, Problem

# The folder's own files (definitions, workloads, solutions, helper modules); safetensors files are blobs.
MAX_FOLDER_BYTES = 32 << 20
MAX_SHIPPED_BLOB_BYTES = 256 << 20
BLOB_SUFFIX = ".safetensors"
_SKIPPED = {"__pycache__"}
_MANIFEST = "manifest.json"


@dataclass(frozen=True)
class ProblemContent:
    key: str  # sha256 of everything below: equal content, equal key
    folder_name: str  # the problem folder's name on the head
    subset: str  # its parent folder's name (Problem.subset)
    files: dict[str, bytes]  # relative POSIX path -> bytes, the folder's files less blobs
    blobs: dict[str, bytes]  # blob path as workload.jsonl names it -> bytes (shipped blobs)
    blob_roots: tuple[str, ...]  # folders every node must hold at these paths (blobs not shipped)
    available: tuple[int, ...]  # workload indices the head can run
    source: str  # the folder on the head, for messages

    def to_wire(self) -> dict[str, Any]:
        return {"key": self.key, "folder_name": self.folder_name, "subset": self.subset, "files": self.files,
                "blobs": self.blobs, "blob_roots": list(self.blob_roots), "available": list(self.available),
                "source": self.source}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ProblemContent:
        return cls(str(data["key"]), str(data["folder_name"]), str(data["subset"]), dict(data["files"]),
                   dict(data["blobs"]), tuple(data["blob_roots"]), tuple(int(i) for i in data["available"]),
                   str(data["source"]))

    @property
    def size(self) -> int:
        return sum(map(len, self.files.values())) + sum(map(len, self.blobs.values()))


def pack_problem(problem: Problem, blob_roots: Sequence[str | Path] = (), *, max_folder_bytes: int = MAX_FOLDER_BYTES,
                 max_blob_bytes: int = MAX_SHIPPED_BLOB_BYTES) -> ProblemContent:
    """``problem``'s folder and blobs as content; ContentError when its folder is over ``max_folder_bytes``."""
    folder = Path(problem.path)
    files: dict[str, bytes] = {}
    total = 0
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part in _SKIPPED or part.startswith(".") for part in relative.parts):
            continue
        if not path.is_file() or path.suffix == BLOB_SUFFIX:
            continue
        data = path.read_bytes()
        total += len(data)
        if total > max_folder_bytes:
            raise ContentError(f"{folder}: its files (safetensors blobs aside) come to more than "
                               f"{_mib(max_folder_bytes)}, the most a problem's folder may take to the cluster's "
                               "nodes; keep only the problem's own files in its folder")
        files[relative.as_posix()] = data
    # The workers load the problem with the run's blob roots; resolve the blobs as they will.
    resolved = load_problem(folder, [Path(r) for r in blob_roots])
    found: dict[str, Path] = {}  # blob path as named -> where the head has it
    for workload in resolved.workloads:
        for name, hit in workload.safetensors_files.items():
            source = workload.inputs[name]
            if source.kind is InputKind.SAFETENSORS and source.path:
                found[source.path] = hit
    sizes = {named: hit.stat().st_size for named, hit in found.items()}
    shippable = all(_shippable(named) for named in found)
    blobs: dict[str, bytes] = {}
    roots: list[str] = []
    if found and shippable and sum(sizes.values()) <= max_blob_bytes:
        blobs = {named: found[named].read_bytes() for named in sorted(found)}
    elif found:
        roots = [str(Path(r).resolve()) for r in blob_roots]
        for named, hit in found.items():
            if not PurePosixPath(named).is_absolute():
                root = hit.parents[len(PurePosixPath(named).parts) - 1]
                if str(root) not in roots:
                    roots.append(str(root))
    available = tuple(w.index for w in resolved.workloads if not w.unavailable)
    digest = hashlib.sha256()
    manifest = {"folder": folder.name, "subset": folder.parent.name, "roots": roots, "available": available,
                "files": {p: _sha(d) for p, d in files.items()}, "blobs": {p: _sha(d) for p, d in blobs.items()}}
    digest.update(json.dumps(manifest, sort_keys=True).encode())
    return ProblemContent(digest.hexdigest(), folder.name, folder.parent.name, files, blobs, tuple(roots), available,
                          str(folder))


@dataclass(frozen=True)
class NodeProblem:
    problem: Problem
    blob_roots: tuple[str, ...]  # what the node's workers load its blobs from


def node_problem(content: ProblemContent, root: Path, node: str = "this node") -> NodeProblem:
    """``content`` written under ``root`` (once per key; files changed since are written again) and loaded; a
    ContentError when a workload the head can run cannot run here."""
    problem_dir, blob_dir = materialize(content, root)
    blob_roots = ((str(blob_dir),) if content.blobs else ()) + content.blob_roots
    problem = load_problem(problem_dir, [Path(r) for r in blob_roots])
    for index in content.available:
        if index >= len(problem.workloads):
            raise ContentError(f"{content.source}: workload {index} is missing from the copy on {node}")
        reason = problem.workloads[index].unavailable
        if reason:
            raise ContentError(f"{content.source}: workload {index} cannot run on {node} ({reason}); blobs over "
                               f"{_mib(MAX_SHIPPED_BLOB_BYTES)} per problem do not travel and must be at the same "
                               "paths on every node")
    return NodeProblem(problem, blob_roots)


def materialize(content: ProblemContent, root: Path) -> tuple[Path, Path]:
    """Write ``content`` under ``root/KEY`` (atomically the first time); the problem folder and the blob folder."""
    for name in (content.folder_name, content.subset):
        if not name or name in (".", "..") or "/" in name or "\\" in name:
            raise ContentError(f"{content.source}: a folder name that cannot be written: {name!r}")
    base = root / content.key
    problem_dir = base / "problem" / content.subset / content.folder_name
    blob_dir = base / "blobs"
    if (base / _MANIFEST).is_file():
        _repair(content, problem_dir)  # e.g. a file an unconfined candidate changed
        return problem_dir, blob_dir
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{content.key[:16]}-", dir=root))
    try:
        write_files(content.files, staging / "problem" / content.subset / content.folder_name, content.source)
        write_files(content.blobs, staging / "blobs", content.source)
        (staging / _MANIFEST).write_text(json.dumps({"source": content.source, "key": content.key}))
        try:
            os.rename(staging, base)
        except OSError:  # another process on this node wrote it first
            if not (base / _MANIFEST).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return problem_dir, blob_dir


def write_files(files: dict[str, bytes], into: Path, source: str) -> None:
    into.mkdir(parents=True, exist_ok=True)
    for named, data in files.items():
        target = into / _safe_relative(named, source)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _repair(content: ProblemContent, problem_dir: Path) -> None:
    for named, data in content.files.items():
        target = problem_dir / _safe_relative(named, content.source)
        try:
            same = target.read_bytes() == data
        except OSError:
            same = False
        if not same:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


def _safe_relative(named: str, source: str) -> PurePosixPath:
    path = PurePosixPath(named)
    if not _shippable(named):
        raise ContentError(f"{source}: a path that would leave its folder: {named!r}")
    return path


def _shippable(named: str) -> bool:
    path = PurePosixPath(named)
    return bool(path.parts) and not path.is_absolute() and ".." not in path.parts and "\\" not in named


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 1 << 20 else f"{n / 1024:g} KiB"
