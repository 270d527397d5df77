"""The on-disk cache of T_b: one JSON file per (problem content, GPU model, software versions), one entry per
workload; each entry keeps the timing settings it was measured with, and is reused only under the same."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from core.cache import JsonFileCache
from core.evaluate.baseline.record import WorkloadBaseline
from core.evaluate.timing_policy import TimingPolicy
from core.problem.content import problem_content_hash

# Part of every cache key: raise it when the way T_b is measured changes, so that no older figure is reused.
# 2: timed calls behind a launch lead (core.evaluate.timing.LaunchLead); version 1's small-workload figures
# could include the host's launch time. 3: random inputs drawn as upstream SOL-ExecBench draws them
# (core.problem.input_rules), so a T_b timed on the older inputs is not reused. 4: with kernel spans every call
# counts by its span, led or not, once a pass behind a spin agrees with the events (core.evaluate.timing).
# 5: the key holds CUDA's and Triton's versions beside torch's (torch.compile's code is Triton's). 6: eager and
# torch.compile raced (the slower keeps a brief figure), our calls timed with one warm-up call.
FORMAT_VERSION = 6


def software_versions(torch_version: str) -> str:
    """What else decides a T_b on one GPU model: torch's version, the CUDA it was built with, Triton's version."""
    import importlib.metadata

    try:
        triton = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton = "none"
    try:
        import torch

        cuda = torch.version.cuda or "none"
    except ImportError:
        cuda = "none"
    return f"torch {torch_version}; cuda {cuda}; triton {triton}"


def baseline_key(problem_dir: str | Path, device_name: str, torch_version: str) -> str:
    parts = ["kernelfleet-baseline", str(FORMAT_VERSION), problem_content_hash(problem_dir), device_name,
             software_versions(torch_version)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class BaselineCache(JsonFileCache):
    """JSON files under ``root`` (default ``cache_root()/"baseline"``), one per key; writes are atomic and
    serialised by a lock file, so judges on several GPUs of one model can share it."""

    subdir = "baseline"
    format_version = FORMAT_VERSION

    def lookup(self, key: str, index: int, policy: TimingPolicy, input_sets: int,
               want_compile: bool) -> WorkloadBaseline | None:
        entry = self.read(key).get("workloads", {}).get(str(index))
        if not isinstance(entry, dict):
            return None
        try:
            found = WorkloadBaseline.from_dict(entry)
        except TypeError:
            return None
        if not found.ok or found.policy != asdict(policy) or found.input_sets != input_sets:
            return None
        if want_compile and not found.compile_attempted:
            return None
        return found.replace(cached=True)

    def store(self, key: str, result: WorkloadBaseline, about: Mapping[str, Any]) -> None:
        """Add (or replace) one workload's entry. A cache that cannot be written costs a re-measurement, nothing
        else, so OS errors are swallowed."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with _locked(self.root / f"{key}.lock"):
                data = self.read(key) or {"format": FORMAT_VERSION, "key": key, **about, "workloads": {}}
                if "torch_version" in about:
                    data.setdefault("software", software_versions(str(about["torch_version"])))
                kept = result.replace(cached=False, machine_now=None, remeasured="")
                data.setdefault("workloads", {})[str(result.index)] = kept.to_dict()
                self.write(key, data)
        except (OSError, ValueError):
            pass

    def merge(self, key: str, data: Mapping[str, Any]) -> int:
        """Add a whole file's worth of entries (an imported one, already checked): the workloads this cache lacks,
        kept as they are; returns how many were added."""
        self.root.mkdir(parents=True, exist_ok=True)
        with _locked(self.root / f"{key}.lock"):
            mine = self.read(key) or {**{k: v for k, v in data.items() if k != "workloads"}, "workloads": {}}
            added = {i: entry for i, entry in data["workloads"].items() if i not in mine["workloads"]}
            if added:
                mine["workloads"].update(added)
                self.write(key, mine)
            return len(added)

    def forget(self, key: str, index: int) -> None:
        """Drop one workload's entry (a figure found untrustworthy after it was cached)."""
        try:
            with _locked(self.root / f"{key}.lock"):
                data = self.read(key)
                if str(index) not in data.get("workloads", {}):
                    return
                del data["workloads"][str(index)]
                self.write(key, data)
        except (OSError, ValueError):
            pass

@contextlib.contextmanager
def _locked(path: Path):
    import fcntl

    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


