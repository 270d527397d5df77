"""The on-disk cache of T_sol: one JSON file per (problem content, GPU, counting code), one entry per workload.

Counting an SOL-ExecBench problem traces its reference (up to 15 s for one of 16 workloads on a slow host, one count
at a time per process), so a second run, a ``--resume`` or a team's imported measurements skip it. The key holds a
hash of the counting code itself: a change to how T_sol is counted makes every older entry a miss.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from core.cache import JsonFileCache
from core.problem.content import problem_content_hash
from core.roofline.problem_sol import SolModel

FORMAT_VERSION = 1


@functools.cache
def counting_code_hash() -> str:
    """sha256 over the roofline package's sources (the rules T_sol is counted and priced by)."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(f"{path.name}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def sol_key(problem_dir: str | Path, device: str, gpu_name: str) -> str:
    parts = ["kernelfleet-sol", str(FORMAT_VERSION), problem_content_hash(problem_dir), device, gpu_name,
             counting_code_hash()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def to_entry(model: SolModel, index: int) -> dict[str, Any]:
    return {"t_sol_ms": model.t_sol_ms.get(index), "note": model.notes.get(index, ""),
            "bound": model.bound.get(index, ""), "reduced": model.reduced.get(index, "")}


class SolCache(JsonFileCache):
    """JSON files under ``root`` (default ``cache_root()/"sol"``), one per key. Only complete models are kept (a
    GPU whose spec is known); a failure to count is kept per workload, as it is the same next time."""

    subdir = "sol"
    format_version = FORMAT_VERSION

    def lookup(self, key: str, indices: list[int]) -> SolModel | None:
        """The model for ``indices`` if every one is cached, else None."""
        data = self.read(key)
        entries = data.get("workloads", {})
        if not data or any(not isinstance(entries.get(str(i)), dict) for i in indices):
            return None
        model = SolModel(enforce=bool(data.get("enforce")), gpu=str(data.get("gpu", "")))
        for index in indices:
            entry = entries[str(index)]
            if isinstance(entry.get("t_sol_ms"), (int, float)):
                model.t_sol_ms[index] = float(entry["t_sol_ms"])
            for field_name, into in (("note", model.notes), ("bound", model.bound), ("reduced", model.reduced)):
                if entry.get(field_name):
                    into[index] = str(entry[field_name])
        return model

    def store(self, key: str, model: SolModel, indices: list[int], about: dict[str, Any]) -> None:
        """Keep ``model``'s figures for ``indices`` (added to what the file holds). A cache that cannot be written
        costs a count next time, nothing else."""
        if model.unavailable:
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            data = self.read(key) or {"format": FORMAT_VERSION, "key": key, **about, "workloads": {}}
            data.update(enforce=model.enforce, gpu=model.gpu)
            data["workloads"].update({str(i): to_entry(model, i) for i in indices})
            self.write(key, data)
        except (OSError, ValueError):
            pass

    def merge(self, key: str, data: dict[str, Any]) -> int:
        """Add an imported file's entries this cache lacks; how many were added."""
        mine = self.read(key) or {**{k: v for k, v in data.items() if k != "workloads"}, "workloads": {}}
        added = {i: e for i, e in data["workloads"].items() if i not in mine["workloads"]}
        if added:
            self.root.mkdir(parents=True, exist_ok=True)
            mine["workloads"].update(added)
            self.write(key, mine)
        return len(added)

def cached_sol(problem, indices: list[int], device: str, gpu_name: str) -> SolModel | None:
    """The cached T_sol of ``indices`` (their runnable ones), or None (not all cached, or nothing to key by)."""
    if device == "cpu" or not gpu_name:
        return None
    try:
        key = sol_key(problem.path, device, gpu_name)
    except OSError:
        return None
    return SolCache().lookup(key, [i for i in indices if not problem.workloads[i].unavailable])


def counted_sol(problem, indices: list[int], device: str, gpu_name: str) -> SolModel:
    """``speed_of_light`` counted, and kept in the cache when it is complete."""
    from core.roofline.problem_sol import speed_of_light

    model = speed_of_light(problem, indices, device, gpu_name)
    if device != "cpu" and gpu_name:
        try:
            key = sol_key(problem.path, device, gpu_name)
        except OSError:
            return model
        SolCache().store(key, model, [i for i in indices if not problem.workloads[i].unavailable],
                         {"problem": problem.name, "device_name": gpu_name})
    return model
