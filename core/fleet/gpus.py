"""Which GPUs a run may use: from the config, else detected with nvidia-ml-py, else nvidia-smi; within a
CUDA_VISIBLE_DEVICES the user set, as CUDA numbers them there."""

from __future__ import annotations

import os
import shutil
import subprocess


def detect_gpus() -> list[int]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        # The run's indices are those CUDA shows under this setting (the pool translates them back).
        return list(range(len(_visible_entries(visible, _count_gpus()))))
    return list(range(_count_gpus()))


def _visible_entries(visible: str, physical: int) -> list[str]:
    """CUDA_VISIBLE_DEVICES' entries up to the first one CUDA would reject (it stops there too)."""
    entries = []
    for entry in (e.strip() for e in visible.split(",")):
        if not entry or (entry.isdigit() and int(entry) >= physical):
            break
        entries.append(entry)
    return entries


def _count_gpus() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - not installed, or no driver: try nvidia-smi
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in done.stdout.splitlines() if line.startswith("GPU ")) if done.returncode == 0 else 0


def gpu_memory_bytes(gpu: int) -> int | None:
    """GPU ``gpu``'s total memory (as nvidia-smi numbers it, like ``gpu_name_from_smi``), None when unknown."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits", f"--id={gpu}"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = done.stdout.strip().splitlines()[:1]
    try:
        return int(float(first[0])) << 20 if done.returncode == 0 and first else None  # MiB
    except ValueError:
        return None
