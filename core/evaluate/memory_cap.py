"""The device memory cap of one worker process (``core.evaluate.memory_budget`` decides the shares): given at its
start as an environment variable, set in the process before it allocates, narrowed for a piece of work and widened
again. PyTorch's caching allocator and cupy's memory pool honour it; a raw ``cudaMalloc`` does not.

Also what a device has in all, for the pool, which holds no CUDA context of its own."""

from __future__ import annotations

import os
import shutil
import subprocess

CEILING_VARIABLE = "KERNELFLEET_MEMORY_FRACTION"  # the process's cap, a fraction of its device's memory
CUPY_LIMIT_VARIABLE = "CUPY_GPU_MEMORY_LIMIT"  # read by cupy when it is imported

# The forms a device out-of-memory takes in an error's type name or text: PyTorch's, cupy's, cuBLAS's, the
# runtime's. Triton's "out of resource: shared memory" is a launch limit, not the device's memory.
OUT_OF_MEMORY_MARKERS = ("outofmemoryerror", "out of memory", "cublas_status_alloc_failed",
                         "cudaerrormemoryallocation")


def is_out_of_memory(error: BaseException | str) -> bool:
    """Whether ``error`` (an exception, or its text as a reply carried it) is a device out-of-memory."""
    if isinstance(error, BaseException):
        if any(kind.__name__ == "OutOfMemoryError" for kind in type(error).__mro__):
            return True
        error = f"{type(error).__name__}: {error}"
    text = error.lower()
    return any(marker in text for marker in OUT_OF_MEMORY_MARKERS)


def worker_environment(fraction: float | None) -> dict[str, str]:
    """The variables that give a worker process its cap (``fraction`` of its device's memory; None: no cap)."""
    if fraction is None:
        return {}
    return {CEILING_VARIABLE: repr(fraction), CUPY_LIMIT_VARIABLE: f"{fraction * 100:g}%"}


def ceiling() -> float | None:
    """This process's cap as its start gave it; None when it has none or the value is not a fraction."""
    try:
        value = float(os.environ[CEILING_VARIABLE])
    except (KeyError, ValueError):
        return None
    return value if 0.0 < value <= 1.0 else None


def cap_process(device, nbytes: int | None = None) -> float | None:
    """Set this process's cap on ``device``: ``nbytes`` where that is under the ceiling, else the ceiling; returns
    the fraction set (None: no ceiling given, nothing set). Call it before the allocations it is to bound."""
    import torch

    top = ceiling()
    device = torch.device(device)
    if top is None or device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    fraction = top
    if nbytes is not None:
        _, total = torch.cuda.mem_get_info(index)
        fraction = min(top, max(nbytes / total, 1e-3))
    torch.cuda.set_per_process_memory_fraction(float(fraction), index)
    return fraction


def device_total_bytes(physical: str) -> int | None:
    """The memory of the GPU ``physical`` (an index or a UUID, as CUDA_VISIBLE_DEVICES names it), from NVML or
    nvidia-smi; None when neither can tell."""
    found = _from_nvml(physical)
    return found if found is not None else _from_smi(physical)


def _from_nvml(physical: str) -> int | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver: nvidia-smi is tried instead
        return None
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(int(physical)) if physical.isdigit() \
            else pynvml.nvmlDeviceGetHandleByUUID(physical)
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
    except Exception:  # noqa: BLE001
        return None
    finally:
        pynvml.nvmlShutdown()


def _from_smi(physical: str) -> int | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", physical],
                              capture_output=True, text=True, timeout=30)
        return int(float(done.stdout.split()[0])) << 20 if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None
