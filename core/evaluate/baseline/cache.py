"""The on-disk cache of T_b: one JSON file per (problem content, GPU model, torch version), one entry per workload."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from core.cache import cache_root
from core.evaluate.baseline.record import WorkloadBaseline
from core.evaluate.timing_policy import TimingPolicy
from core.problem.load import DEFINITION_FILE, WORKLOAD_FILE

# Part of every cache key: raise it when the way T_b is measured changes, so that no older figure is reused.
# 2: timed calls behind a launch lead (core.evaluate.timing.LaunchLead); version 1's small-workload figures
# could include the host's launch time. 3: random inputs drawn as upstream SOL-ExecBench draws them
# (core.problem.input_rules), so a T_b timed on the older inputs is not reused. 4: with kernel spans every call
# counts by its span, led or not, once a pass behind a spin agrees with the events (core.evaluate.timing).
FORMAT_VERSION = 4


def problem_content_hash(problem_dir: str | Path) -> str:
    """sha256 over definition.json and workload.jsonl, byte for byte (each length-prefixed)."""
    folder = Path(problem_dir)
    digest = hashlib.sha256()
    for name in (DEFINITION_FILE, WORKLOAD_FILE):
        data = (folder / name).read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def baseline_key(problem_dir: str | Path, device_name: str, torch_version: str) -> str:
    parts = ["kernelfleet-baseline", str(FORMAT_VERSION), problem_content_hash(problem_dir), device_name,
             torch_version]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class BaselineCache:
    """JSON files under ``root`` (default ``cache_root()/"baseline"``), one per key; writes are atomic and
    serialised by a lock file, so judges on several GPUs of one model can share it."""

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else cache_root() / "baseline"

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def read(self, key: str) -> dict[str, Any]:
        try:
            data = json.loads(self.path(key).read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION or data.get("key") != key:
            return {}
        return data

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
                kept = result.replace(cached=False, machine_now=None, remeasured="")
                data.setdefault("workloads", {})[str(result.index)] = kept.to_dict()
                self._write(key, data)
        except (OSError, ValueError):
            pass

    def forget(self, key: str, index: int) -> None:
        """Drop one workload's entry (a figure found untrustworthy after it was cached)."""
        try:
            with _locked(self.root / f"{key}.lock"):
                data = self.read(key)
                if str(index) not in data.get("workloads", {}):
                    return
                del data["workloads"][str(index)]
                self._write(key, data)
        except (OSError, ValueError):
            pass

    def _write(self, key: str, data: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=self.root)
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(data, handle, indent=1, allow_nan=False)
            os.replace(tmp, self.path(key))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


@contextlib.contextmanager
def _locked(path: Path):
    import fcntl

    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


