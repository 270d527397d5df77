import os
import shutil
import tempfile

import pytest

_CACHE_DIR: str | None = None


def pytest_configure(config):
    """Every test, and every process a test starts, caches in a folder of its own, never in the user's
    ~/.cache/kernelfleet (builds, baselines, GPU specs) nor the compilers' caches. Tests that need a cache of their
    own still set one."""
    global _CACHE_DIR
    _CACHE_DIR = tempfile.mkdtemp(prefix="kernelfleet-test-cache-")
    os.environ["KERNELFLEET_CACHE_DIR"] = _CACHE_DIR
    # The compilers' own caches too (torch.compile, Triton, cupy), which default to ~/.triton, ~/.cupy and /tmp.
    for name, folder in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton"),
                         ("CUPY_CACHE_DIR", "cupy")):
        os.environ[name] = os.path.join(_CACHE_DIR, folder)


def pytest_unconfigure(config):
    if _CACHE_DIR is not None:
        shutil.rmtree(_CACHE_DIR, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """Skip @pytest.mark.gpu tests cleanly where no CUDA device is usable."""
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
