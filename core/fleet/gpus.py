"""Which GPUs a run may use: from the config, else detected with nvidia-ml-py, else nvidia-smi."""

from __future__ import annotations

import shutil
import subprocess


def detect_gpus() -> list[int]:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return list(range(pynvml.nvmlDeviceGetCount()))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - not installed, or no driver: try nvidia-smi
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return list(range(sum(1 for line in done.stdout.splitlines() if line.startswith("GPU ")))) \
        if done.returncode == 0 else []
