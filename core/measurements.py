"""A team's measurements in one file: the T_b and T_sol caches exported and imported, so that one measurement of a
problem set per GPU model serves every run on that model.

The file is gzip-compressed JSON: ``{"format": BUNDLE_FORMAT, "baseline": {key: file}, "sol": {key: file}}``, each
file as the cache keeps it. An entry is only ever looked up under its own key, which hashes the problem's content,
the GPU model, the software versions and the counting code, so an imported entry can serve no other problem or
setup; and each T_b entry keeps its timing settings, so a run timed otherwise measures again.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.evaluate.baseline import cache as baseline_cache
from core.evaluate.baseline.record import WorkloadBaseline
from core.roofline import sol_cache

BUNDLE_FORMAT = "kernelfleet-measurements-1"
_KEY = re.compile(r"[0-9a-f]{64}")
MAX_BUNDLE_BYTES = 512 << 20  # uncompressed: the 235 problems on one GPU model come to a few MiB


@dataclass(frozen=True)
class BundleCounts:
    baseline_files: int = 0
    baseline_workloads: int = 0
    sol_files: int = 0
    sol_workloads: int = 0
    skipped: int = 0  # files of another format (older code) or another GPU model than asked

    def line(self) -> str:
        return (f"T_b of {self.baseline_workloads} workloads ({self.baseline_files} problem-GPU pairs), T_sol of "
                f"{self.sol_workloads} workloads ({self.sol_files})"
                + (f"; {self.skipped} files skipped (another format or GPU model)" if self.skipped else ""))


class BundleError(ValueError):
    """A bundle that cannot be read or is not one: its message is one line for the user."""


def _caches(root: Path | None):
    return (baseline_cache.BaselineCache(None if root is None else root / "baseline"),
            sol_cache.SolCache(None if root is None else root / "sol"))


def export_bundle(path: str | Path, *, device_name: str = "", cache_root: Path | None = None) -> BundleCounts:
    """Write every valid cache file (of ``device_name`` only, when given) to ``path``."""
    tb, sol = _caches(cache_root)
    bundle: dict[str, Any] = {"format": BUNDLE_FORMAT, "baseline": {}, "sol": {}}
    skipped = 0
    for part, cache in (("baseline", tb), ("sol", sol)):
        for key in cache.keys():
            data = cache.read(key)
            if not data or (device_name and data.get("device_name") != device_name):
                skipped += bool(data)
                continue
            bundle[part][key] = data
    counts = _counted(bundle, skipped)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump(bundle, handle, allow_nan=False)
    return counts


def import_bundle(path: str | Path, *, cache_root: Path | None = None) -> BundleCounts:
    """Add a bundle's entries that the caches lack (what is here already is kept); what was added."""
    bundle = read_bundle(path)
    tb, sol = _caches(cache_root)
    added = {"baseline": [0, 0], "sol": [0, 0]}
    skipped = 0
    for part, cache, version in (("baseline", tb, baseline_cache.FORMAT_VERSION),
                                 ("sol", sol, sol_cache.FORMAT_VERSION)):
        for key, data in bundle[part].items():
            if data.get("format") != version:
                skipped += 1
                continue
            n = cache.merge(key, data)
            added[part][0] += n > 0
            added[part][1] += n
    return BundleCounts(added["baseline"][0], added["baseline"][1], added["sol"][0], added["sol"][1], skipped)


def read_bundle(path: str | Path) -> dict[str, Any]:
    """The bundle at ``path``, every file in it checked; BundleError says what is wrong."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            text = handle.read(MAX_BUNDLE_BYTES + 1)
    except FileNotFoundError:
        raise BundleError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BundleError(f"{path}: is a directory, not a measurements file") from None
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise BundleError(f"{path}: not a measurements file (gzip-compressed JSON): {exc}") from None
    if len(text) > MAX_BUNDLE_BYTES:
        raise BundleError(f"{path}: over {MAX_BUNDLE_BYTES >> 20} MiB uncompressed")
    try:
        bundle = json.loads(text)
    except ValueError as exc:
        raise BundleError(f"{path}: not JSON: {exc}") from None
    if not isinstance(bundle, dict) or bundle.get("format") != BUNDLE_FORMAT:
        found = bundle.get("format") if isinstance(bundle, dict) else type(bundle).__name__
        raise BundleError(f"{path}: not a kernelfleet measurements file (format {found!r}, expected "
                          f"{BUNDLE_FORMAT!r})")
    for part in ("baseline", "sol"):
        files = bundle.get(part)
        if not isinstance(files, dict):
            raise BundleError(f"{path}: {part!r} must be an object of cache files")
        for key, data in files.items():
            problem = _file_problem(part, key, data)
            if problem:
                raise BundleError(f"{path}: {part} entry {key[:16]}: {problem}")
    return bundle


def _file_problem(part: str, key: str, data: Any) -> str:
    if not _KEY.fullmatch(key):
        return "the key is not a sha256"
    if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("workloads"), dict):
        return "not a cache file of this key"
    for index, entry in data["workloads"].items():
        if not index.isdigit() or not isinstance(entry, dict):
            return f"workload {index!r} is not an entry"
        if part == "baseline" and data.get("format") == baseline_cache.FORMAT_VERSION:
            try:
                WorkloadBaseline.from_dict(entry)
            except (TypeError, ValueError) as exc:
                return f"workload {index}: {exc}"
        if part == "sol" and not isinstance(entry.get("t_sol_ms"), (int, float, type(None))):
            return f"workload {index}: t_sol_ms is not a number"
    return ""


def _counted(bundle: dict[str, Any], skipped: int) -> BundleCounts:
    return BundleCounts(len(bundle["baseline"]), sum(len(d["workloads"]) for d in bundle["baseline"].values()),
                        len(bundle["sol"]), sum(len(d["workloads"]) for d in bundle["sol"].values()), skipped)


def cache_summary(cache_root: Path | None = None) -> dict[str, Counter]:
    """GPU model -> how many workloads' T_b ("baseline") and T_sol ("sol") the caches hold."""
    tb, sol = _caches(cache_root)
    summary: dict[str, Counter] = {}
    for part, cache in (("baseline", tb), ("sol", sol)):
        for key in cache.keys():
            data = cache.read(key)
            if data:
                summary.setdefault(str(data.get("device_name", "?")), Counter())[part] += len(data["workloads"])
    return summary
