"""GPU spec table: lookup by the names torch reports, dense datasheet rates, fallbacks, unknown GPUs."""

import json

import pytest

from core.roofline import ceilings
from core.roofline.specs import SPECS, UnknownGpu, known_gpus, lookup_spec, spec_for_device

TORCH_NAMES = {
    "NVIDIA H200": "NVIDIA H200",
    "NVIDIA H100 80GB HBM3": "NVIDIA H100 80GB HBM3",
    "NVIDIA B200": "NVIDIA B200",
    "NVIDIA A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB",
    "NVIDIA L40S": "NVIDIA L40S",
    "NVIDIA H100 PCIe": "NVIDIA H100 PCIe",
}


@pytest.mark.parametrize("torch_name,expected", sorted(TORCH_NAMES.items()))
def test_lookup_by_torch_device_name(torch_name, expected):
    assert lookup_spec(torch_name).name == expected


def test_lookup_ignores_case_prefix_and_punctuation_but_not_the_model():
    assert lookup_spec("h200").name == "NVIDIA H200"
    assert lookup_spec("NVIDIA  A100 SXM4 80GB").name == "NVIDIA A100-SXM4-80GB"
    assert lookup_spec("NVIDIA H100 PCIe").sm_count == 114  # never priced as the SXM part
    with pytest.raises(UnknownGpu, match="H300"):
        lookup_spec("NVIDIA H300")


def test_dense_datasheet_rates():
    h100, h200, b200 = lookup_spec("NVIDIA H100 80GB HBM3"), lookup_spec("NVIDIA H200"), lookup_spec("NVIDIA B200")
    assert h100.tensor_flops["bfloat16"] == pytest.approx(989.4e12)  # not the 1979 sparse figure
    assert h200.tensor_flops == h100.tensor_flops and h200.memory_bandwidth_bytes_s == 4.8e12
    assert h100.memory_bandwidth_bytes_s == 3.35e12
    assert b200.tensor_flops["float4_e2m1fn_x2"] == 2 * b200.tensor_flops["float8_e4m3fn"] == 9000e12
    assert b200.tensor_flops["bfloat16"] == 2250e12 and b200.fp32_simt_flops == 80e12
    for spec in SPECS:
        assert spec.memory_bandwidth_bytes_s > 0 and spec.fp32_simt_flops > 0 and spec.sm_count > 0
        assert spec.tensor_flops["bfloat16"] > spec.fp32_simt_flops
        assert spec.l2_bytes > 0


def test_missing_formats_fall_back_to_the_next_wider_one():
    a100 = lookup_spec("NVIDIA A100-SXM4-80GB")
    h100, l40s = lookup_spec("NVIDIA H100 80GB HBM3"), lookup_spec("NVIDIA L40S")
    assert a100.tensor_rate("float8_e4m3fn") == (312e12, "bfloat16")
    assert h100.tensor_rate("float4_e2m1fn_x2") == (pytest.approx(1978.9e12), "float8_e4m3fn")
    assert l40s.tensor_rate("float64") is None  # no fp64 tensor cores: the caller uses the SIMT rate
    assert h100.tensor_rate("int32") is None


def test_spec_for_device_uses_the_table_for_known_names(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    assert spec_for_device(0).name == "NVIDIA H100 80GB HBM3"


def test_spec_for_device_measures_an_unknown_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA Future GPU")
    with pytest.raises(UnknownGpu):
        spec_for_device(0, measure_unknown=False)
    measured = ceilings.Ceilings(name="NVIDIA Future GPU", sm_count=200, l2_bytes=1 << 27, memory_bytes=1 << 38,
                                 copy_bandwidth_bytes_s=9e12, bf16_matmul_flops=3e15, fp32_matmul_flops=1e14)
    monkeypatch.setattr(ceilings, "measure_ceilings", lambda device=None: measured)
    spec = spec_for_device(0)
    assert spec.source == "measured" and spec.name == "NVIDIA Future GPU"
    assert spec.memory_bandwidth_bytes_s == 9e12 and spec.tensor_rate("float8_e4m3fn") == (3e15, "bfloat16")


def test_ceilings_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path))
    path = ceilings.cache_path("NVIDIA Future GPU/x")
    assert path.parent == tmp_path / "ceilings" and "/" not in path.name
    assert ceilings.load_cached("NVIDIA Future GPU/x") is None
    path.parent.mkdir(parents=True)
    data = {"version": ceilings.CACHE_VERSION, "name": "NVIDIA Future GPU/x", "sm_count": 1, "l2_bytes": 2,
            "memory_bytes": 3, "copy_bandwidth_bytes_s": 4.0, "bf16_matmul_flops": 5.0, "fp32_matmul_flops": 6.0}
    path.write_text(json.dumps(data))
    assert ceilings.load_cached("NVIDIA Future GPU/x").bf16_matmul_flops == 5.0
    path.write_text("not json")
    assert ceilings.load_cached("NVIDIA Future GPU/x") is None


def test_known_gpus_cover_the_required_parts():
    names = set(known_gpus())
    assert {"NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA B200", "NVIDIA A100-SXM4-80GB", "NVIDIA L40S"} <= names


@pytest.mark.gpu
def test_measure_ceilings_on_the_local_gpu(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("KERNELFLEET_CACHE_DIR", str(tmp_path))
    measured = ceilings.measure_ceilings(0)
    name = torch.cuda.get_device_name(0)
    assert measured.name == name and ceilings.cache_path(name).is_file()
    assert 1e11 < measured.copy_bandwidth_bytes_s < 2e13
    assert 1e13 < measured.bf16_matmul_flops < 2e16
    assert 1e12 < measured.fp32_matmul_flops < measured.bf16_matmul_flops
    assert ceilings.measure_ceilings(0) == measured  # second call comes from the cache
    try:
        spec = lookup_spec(name)
    except UnknownGpu:
        return
    # Measured ceilings stay below the datasheet peaks they approximate.
    assert measured.copy_bandwidth_bytes_s <= spec.memory_bandwidth_bytes_s * 1.05
    assert measured.bf16_matmul_flops <= spec.tensor_flops["bfloat16"] * 1.05
