"""Where kernelfleet keeps its on-disk caches (builds, baselines, device ceilings)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$KERNELFLEET_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/kernelfleet`` (default ``~/.cache/kernelfleet``)."""
    explicit = os.environ.get("KERNELFLEET_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "kernelfleet"
