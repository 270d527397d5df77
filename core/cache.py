"""Where kernelfleet keeps its on-disk caches (builds, baselines, device ceilings)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def cache_root() -> Path:
    """``$KERNELFLEET_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/kernelfleet`` (default ``~/.cache/kernelfleet``)."""
    explicit = os.environ.get("KERNELFLEET_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "kernelfleet"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file beside it: a reader sees the old or the new."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=1, allow_nan=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class JsonFileCache:
    """A cache of one JSON file per key under ``root`` (default ``cache_root()/subdir``), each holding its key, its
    format and per-workload entries; a file of another format or key reads as empty."""

    subdir = ""
    format_version = 0

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else cache_root() / self.subdir

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def keys(self) -> list[str]:
        """Every key with a file here (valid or not: ``read`` decides)."""
        return sorted(p.stem for p in self.root.glob("*.json")) if self.root.is_dir() else []

    def read(self, key: str) -> dict[str, Any]:
        try:
            data = json.loads(self.path(key).read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("format") != self.format_version or data.get("key") != key \
                or not isinstance(data.get("workloads"), dict):
            return {}
        return data

    def write(self, key: str, data: dict[str, Any]) -> None:
        write_json_atomic(self.path(key), data)
