"""The on-disk build cache: one directory per key, each published whole by an atomic rename.

Layout under the root (``cache_root() / "build"`` by default)::

    ab/abcdef.../manifest.json    cubin names per source and the ptxas resource report
    ab/abcdef.../build.log        the compiler output
    ab/abcdef.../cubins/<source>.cubin
    .work-XXXX/                   a build in progress: sources, nvcc's temporaries, the entry being assembled

An entry directory only ever appears by renaming a finished one into place, so a reader never sees half an
entry, whether a builder is still running, was killed, or raced another process building the same key.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from core.build.ptxas import KernelResources
from core.cache import cache_root

# Part of every key: bump it when the key recipe or the entry layout changes, so old entries are never misread.
_FORMAT_VERSION = 1
_MANIFEST = "manifest.json"
_LOG = "build.log"
_WORKSPACE_PREFIX = ".work-"
# No build runs this long; a workspace this old was left by a builder that died before cleaning up.
_STALE_WORKSPACE_S = 3600.0


def build_key(
    *,
    sources: Mapping[str, str],
    compile: Sequence[str],
    flags: Sequence[str],
    arch: str,
    nvcc_version: str,
) -> str:
    """sha256 over everything that decides the output. ``flags`` include the -D defines and the extra flags.

    Headers outside ``sources`` (the CUDA toolkit, directories named by -I in the flags) are not hashed: they
    are taken to change only with the nvcc version.
    """
    recipe = {
        "format": _FORMAT_VERSION,
        "sources": sorted(sources.items()),
        "compile": sorted(compile),
        "flags": list(flags),
        "arch": arch,
        "nvcc": nvcc_version,
    }
    return hashlib.sha256(json.dumps(recipe, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    directory: Path
    cubins: Mapping[str, Path]  # source relative path -> cubin inside `directory`
    resources: tuple[KernelResources, ...]
    log: str


class BuildCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else cache_root() / "build"

    def load(self, key: str) -> CacheEntry | None:
        directory = self._entry_dir(key)
        try:
            manifest = json.loads((directory / _MANIFEST).read_text())
            log = (directory / _LOG).read_text()
        except FileNotFoundError:
            return None
        return CacheEntry(
            directory=directory,
            cubins={source: directory / name for source, name in manifest["cubins"].items()},
            resources=tuple(KernelResources(**fields) for fields in manifest["resources"]),
            log=log,
        )

    def new_workspace(self) -> Path:
        """A private directory for one build, on the cache's filesystem so that publishing is a rename."""
        self.root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=_WORKSPACE_PREFIX, dir=self.root))

    def publish(
        self,
        key: str,
        workspace: Path,
        cubins: Mapping[str, Path],
        resources: Sequence[KernelResources],
        log: str,
    ) -> CacheEntry:
        """Move the built ``cubins`` (source -> file in ``workspace``) into a new entry for ``key``.

        When another builder published ``key`` first, its entry is kept: same key, same content.
        """
        staging = workspace / "entry"
        staging.mkdir()
        names = {}
        for source, built in cubins.items():
            name = f"cubins/{source}.cubin"
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(built, staging / name)
            names[source] = name
        manifest = {"cubins": names, "resources": [asdict(kernel) for kernel in resources]}
        (staging / _MANIFEST).write_text(json.dumps(manifest, indent=1))
        (staging / _LOG).write_text(log)

        final = self._entry_dir(key)
        final.parent.mkdir(exist_ok=True)
        try:
            os.rename(staging, final)
        except OSError as error:
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
        return CacheEntry(final, {source: final / name for source, name in names.items()}, tuple(resources), log)

    def remove_stale_workspaces(self) -> None:
        if not self.root.is_dir():
            return
        cutoff = time.time() - _STALE_WORKSPACE_S
        for workspace in self.root.glob(f"{_WORKSPACE_PREFIX}*"):
            try:
                stale = workspace.stat().st_mtime < cutoff
            except FileNotFoundError:
                continue
            if stale:
                shutil.rmtree(workspace, ignore_errors=True)

    def _entry_dir(self, key: str) -> Path:
        return self.root / key[:2] / key
