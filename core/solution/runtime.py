"""The helper a fast-path candidate (cuda_cpp with a ``.py`` entry) imports to launch its nvcc-built cubins.

Candidate code::

    import numpy as np
    from core.solution.runtime import current_stream, launch, load_module
    from kernelfleet_tunables import BLOCK

    _mod = load_module("rmsnorm.cu")            # cupy.RawModule of the cubin built from rmsnorm.cu
    _kernel = _mod.get_function("rmsnorm_kernel")

    def run(x, w, eps, out):
        launch(_kernel, (x.shape[0],), (BLOCK,), (x, w, out, np.int32(x.shape[1]), np.float32(eps)))

``load_module(path)`` resolves ``path`` against the folder of the calling file (then against the solution root),
maps a ``.cu`` source to the ``.cubin`` that ``core.solution.loader.materialize`` put next to it, and caches the
module per cubin path. ``current_stream()`` is a cupy stream on torch's current CUDA stream, so a launch is
ordered with the torch work around it (and timed by the same CUDA events).

cupy is imported on first use, so this module imports without it; a call then fails with
``cupy is not installed: pip install 'kernelfleet[gpu]'``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

CUPY_MISSING = "cupy is not installed: pip install 'kernelfleet[gpu]'"
_MANIFEST = Path(".kernelfleet") / "manifest.json"

_modules: dict[str, Any] = {}  # resolved cubin path -> cupy.RawModule
_streams: dict[tuple[int, int], Any] = {}  # (torch stream handle, device) -> cupy.cuda.ExternalStream


def _cupy() -> Any:
    try:
        import cupy
    except ImportError as exc:
        raise ImportError(CUPY_MISSING) from exc
    return cupy


def resolve_cubin(path: str | Path, base_dir: str | Path) -> Path:
    """The cubin for ``path`` (a ``.cu`` source or ``.cubin``): under ``base_dir``, else under the solution root."""
    rel = Path(path)
    if rel.suffix != ".cubin":
        rel = rel.with_suffix(".cubin")
    base = Path(base_dir).resolve()
    candidates = [base / rel] if not rel.is_absolute() else [rel]
    if not rel.is_absolute():
        for parent in [base, *base.parents]:
            if (parent / _MANIFEST).is_file():
                if parent != base:
                    candidates.append(parent / rel)
                break
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"no cubin for '{path}' (looked for {', '.join(str(c) for c in candidates)}): is it a .cu source of this "
        "solution, and was the solution prepared and materialized?"
    )


def load_module(path: str | Path, *, base_dir: str | Path | None = None) -> Any:
    """A ``cupy.RawModule`` for the cubin built from ``path`` of the calling candidate; cached per cubin path."""
    if base_dir is None:
        caller = sys._getframe(1).f_globals.get("__file__")
        if caller is None:
            raise RuntimeError("load_module needs base_dir when called from code that has no __file__")
        base_dir = Path(caller).parent
    cubin = resolve_cubin(path, base_dir)
    key = str(cubin)
    module = _modules.get(key)
    if module is None:
        module = _cupy().RawModule(path=key)
        _modules[key] = module
    return module


def current_stream() -> Any:
    """A cupy ``ExternalStream`` on torch's current CUDA stream (cached per stream)."""
    key = _torch_stream_key()
    ext = _streams.get(key)
    if ext is None:
        ext = _wrap_stream(_cupy(), *key)
        _streams[key] = ext
    return ext


def _torch_stream_key() -> tuple[int, int]:
    """(raw handle, device) of torch's current stream; torch's raw accessors when present (a launch pays this)."""
    import torch

    c = torch._C
    if hasattr(c, "_cuda_getCurrentRawStream") and hasattr(c, "_cuda_getDevice"):
        device = c._cuda_getDevice()
        return int(c._cuda_getCurrentRawStream(device)), int(device)
    stream = torch.cuda.current_stream()
    return int(stream.cuda_stream), int(stream.device.index or 0)


class _StreamHandle:
    """A raw stream handle in the CUDA stream protocol (``__cuda_stream__``), for cupy's ``Stream.from_external``."""

    def __init__(self, handle: int):
        self._handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self._handle)


def _wrap_stream(cupy: Any, handle: int, device: int) -> Any:
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None:  # cupy >= 14; ExternalStream is deprecated there
        try:
            return from_external(_StreamHandle(handle))
        except (TypeError, AttributeError):
            pass
    try:
        return cupy.cuda.ExternalStream(handle, device)
    except TypeError:  # old cupy: no device argument
        return cupy.cuda.ExternalStream(handle)


def launch(kernel: Any, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...], *,
           shared_mem: int = 0, stream: Any = None) -> None:
    """Launch a cupy RawKernel on torch's current stream; torch tensors are passed as device pointers.

    Scalars must carry their C type (``numpy.int32(n)``, ``numpy.float32(eps)``): a bare Python int or float
    is refused, since its width would silently differ from the kernel's parameter.
    """
    np = _numpy()
    converted = []
    for i, arg in enumerate(args):
        if hasattr(arg, "data_ptr") and hasattr(arg, "is_cuda"):
            if not arg.is_cuda:
                raise ValueError(f"argument {i}: a CPU tensor cannot be passed to a CUDA kernel")
            converted.append(np.uint64(arg.data_ptr()))
        elif isinstance(arg, (bool, int, float)):
            raise TypeError(
                f"argument {i}: {type(arg).__name__} {arg!r} has no C type; pass numpy.int32(...), "
                "numpy.int64(...), numpy.float32(...) or similar"
            )
        else:
            converted.append(arg)
    # Entering the stream makes it cupy's current stream for this launch (works across cupy versions).
    with stream if stream is not None else current_stream():
        kernel(tuple(grid), tuple(block), tuple(converted), shared_mem=shared_mem)


def forget(root: str | Path) -> None:
    """Drop cached modules whose cubins lie under ``root`` (a candidate being unloaded)."""
    prefix = str(Path(root).resolve())
    for key in [k for k in _modules if k == prefix or k.startswith(prefix + "/")]:
        del _modules[key]


def _numpy() -> Any:
    import numpy

    return numpy
