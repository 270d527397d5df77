import pytest


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
