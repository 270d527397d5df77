"""CUTLASS C++ headers for candidates that include them (``#include <cutlass/...>`` or ``<cute/...>``).

Upstream SOL-ExecBench puts ``$CUTLASS_DIR/include`` and ``$CUTLASS_DIR/tools/util/include`` (default
``/usr/local/cutlass``) on every C++ build's include path. kernelfleet looks there first, then in the ``nvidia-cutlass``
package from PyPI, whose ``cutlass_library/source`` folder holds the same two trees (only the headers are used; the
package is found, not imported). The flags carry the CUTLASS version as a define, so the build caches (keyed by the
flags) tell one CUTLASS from another.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

UPSTREAM_DEFAULT_DIR = "/usr/local/cutlass"
PACKAGE = "cutlass_library"  # the import name of PyPI's nvidia-cutlass, where its headers live
MISSING = ("CUTLASS C++ headers not found: `pip install nvidia-cutlass` (only its headers are used) or set "
           "CUTLASS_DIR to a CUTLASS checkout")

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](?:cutlass|cute)/', re.MULTILINE)
_VERSION = re.compile(r"#define\s+CUTLASS_(MAJOR|MINOR|PATCH)\s+(\d+)")


@dataclass(frozen=True)
class CutlassHeaders:
    root: Path  # holds include/cutlass/cutlass.h
    version: str  # "4.2.0", from include/cutlass/version.h ("unknown" when it cannot be read)
    origin: str  # "CUTLASS_DIR", "/usr/local/cutlass" or "nvidia-cutlass"

    @property
    def number(self) -> int:
        """The version as one number (4.2.0 -> 40200; 0 unknown)."""
        parts = self.version.split(".")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            return 0
        return int(parts[0]) * 10000 + int(parts[1]) * 100 + int(parts[2])

    @property
    def include_dirs(self) -> tuple[Path, ...]:
        return tuple(d for d in (self.root / "include", self.root / "tools" / "util" / "include") if d.is_dir())


def includes_cutlass(sources: Mapping[str, str]) -> bool:
    """Whether any source includes a CUTLASS or CuTe header."""
    return any(_INCLUDE.search(text) for text in sources.values())


def find_cutlass() -> CutlassHeaders | None:
    """The CUTLASS headers of this machine: ``$CUTLASS_DIR``, upstream's default folder, then nvidia-cutlass."""
    return _find(os.environ.get("CUTLASS_DIR", ""))


@functools.lru_cache(maxsize=8)
def _find(cutlass_dir: str) -> CutlassHeaders | None:
    candidates = [(Path(cutlass_dir), "CUTLASS_DIR")] if cutlass_dir else []
    candidates.append((Path(UPSTREAM_DEFAULT_DIR), UPSTREAM_DEFAULT_DIR))
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        candidates += [(Path(p) / "source", "nvidia-cutlass") for p in spec.submodule_search_locations]
    for root, origin in candidates:
        if (root / "include" / "cutlass" / "cutlass.h").is_file():
            return CutlassHeaders(root.resolve(), _version(root), origin)
    return None


def _version(root: Path) -> str:
    try:
        text = (root / "include" / "cutlass" / "version.h").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "unknown"
    parts = dict(_VERSION.findall(text))
    if not all(k in parts for k in ("MAJOR", "MINOR", "PATCH")):
        return "unknown"
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"


def cutlass_flags(sources: Mapping[str, str]) -> tuple[str, ...] | None:
    """The include flags a build of ``sources`` needs: () when they include no CUTLASS header, None when they do and
    no CUTLASS is found (the build is refused with ``MISSING``)."""
    if not includes_cutlass(sources):
        return ()
    headers = find_cutlass()
    if headers is None:
        return None
    return (*(f"-I{d}" for d in headers.include_dirs), f"-DKERNELFLEET_CUTLASS_VERSION={headers.number}")
