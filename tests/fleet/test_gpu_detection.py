"""Which GPUs a run takes when none are configured: every GPU, or those a CUDA_VISIBLE_DEVICES leaves visible."""

from __future__ import annotations

import pytest

from core.evaluate.worker_process import physical_gpu as _physical_gpu
from core.fleet import gpus


@pytest.mark.parametrize("visible, expected", [
    (None, [0, 1]),
    ("1", [0]),
    ("1,0", [0, 1]),
    ("", []),
    ("0,7,1", [0]),  # CUDA stops at the first device that does not exist
    ("GPU-5e1c9f0a", [0]),
])
def test_detection_follows_cuda_visible_devices(monkeypatch, visible, expected):
    monkeypatch.setattr(gpus, "_count_gpus", lambda: 2)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert gpus.detect_gpus() == expected


def test_a_run_limited_to_gpu_1_times_on_gpu_1(monkeypatch):
    monkeypatch.setattr(gpus, "_count_gpus", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert [_physical_gpu(i) for i in gpus.detect_gpus()] == ["1"]
