"""What the brief says about the machine and the run: facts gathered on this (CPU) machine, facts built from a
GPU's properties as torch and nvidia-smi report them, and how unknown values read."""

from __future__ import annotations

import os

import pytest

from core.fleet import facts as facts_module
from core.fleet.facts import (RunFacts, facts_from_probe, gather_facts, language_refusal, parse_smi_line,
                              probe_properties, render_facts)
from core.roofline.specs import lookup_spec, with_rates

# What torch.cuda.get_device_properties reports on an H200 (as the probe's child process prints it).
H200_PROPERTIES = {
    "name": "NVIDIA H200", "major": 9, "minor": 0, "total_memory": 150_109_782_016, "multi_processor_count": 132,
    "L2_cache_size": 62_914_560, "shared_memory_per_multiprocessor": 233_472, "shared_memory_per_block": 49_152,
    "shared_memory_per_block_optin": 232_448, "regs_per_multiprocessor": 65_536,
    "max_threads_per_multi_processor": 2048, "warp_size": 32,
}
H200_SMI = "1980, 3201, 143771, 570.86.15"


def _h200(**overrides) -> RunFacts:
    kwargs = dict(properties=H200_PROPERTIES, smi=parse_smi_line(H200_SMI), spec=lookup_spec("NVIDIA H200"),
                  arch="sm_90a", arch_flags=("-gencode=arch=compute_90a,code=sm_90a",), cuda_runtime="12.8",
                  nvcc="Cuda compilation tools, release 13.0, V13.0.88",
                  packages=(("torch", "2.8.0"), ("triton", "3.4.0"), ("nvidia-cutlass-dsl", None)))
    kwargs.update(overrides)
    return facts_from_probe("cuda", ("cuda_cpp", "triton", "pytorch"), **kwargs)


def test_cpu_facts_say_the_device_is_the_cpu_and_there_is_no_gpu():
    facts = gather_facts("cpu", ("pytorch",))
    assert facts.device == "cpu" and facts.gpu_name is None and facts.sm_count is None and facts.peak_rates == ()
    assert facts.cpu_cores == os.cpu_count()
    assert dict(facts.packages)["torch"]  # installed in the venv: its version, read from the metadata
    text = render_facts(facts)
    lines = text.splitlines()
    assert lines[0] == "## Machine and run"
    assert lines[1].startswith(f"- device: the CPU ({facts.cpu_model}, {os.cpu_count()} cores); no GPU in this run")
    assert "- GPU:" not in text and "peak rates" not in text and "CUDA driver" not in text
    assert f"torch {dict(facts.packages)['torch']}" in text
    assert lines[-1] == "- languages this run allows: pytorch"


def test_h200_properties_render_with_the_datasheet_peaks():
    facts = _h200()
    assert facts.sm_count == 132 and facts.compute_capability == "9.0" and facts.sm_clock_mhz == 1980
    assert facts.memory_bytes == H200_PROPERTIES["total_memory"] and facts.memory_bandwidth_bytes_s == 4.8e12
    assert facts.cuda_driver == "570.86.15" and facts.spec_source == "datasheet"
    rates = dict(facts.peak_rates)
    assert rates["bfloat16"] == pytest.approx(989.4e12) and rates["fp32 simt"] == pytest.approx(66.9e12)
    assert list(rates)[0] in ("float8_e4m3fn", "float8_e5m2", "int8")  # fastest first
    text = render_facts(facts)
    assert ("- GPU: NVIDIA H200, compute capability 9.0, 132 SMs, SM clock up to 1980 MHz, memory clock up to "
            "3201 MHz") in text
    assert "- memory: 139.8 GiB, peak bandwidth 4.8 TB/s; L2 60 MiB" in text
    assert ("- per SM: shared memory 228 KiB, registers 65536, threads at most 2048; shared memory per block 48 KiB "
            "(227 KiB when opted in)") in text
    assert "peak rates in TFLOP/s (datasheet of NVIDIA H200, dense" in text
    assert "bfloat16 989.4" in text and "CUDA cores fp32 66.9, fp64 33.5" in text
    assert "- build target: sm_90a (-gencode=arch=compute_90a,code=sm_90a)" in text
    assert ("CUDA driver 570.86.15; CUDA runtime (torch) 12.8; nvcc Cuda compilation tools, release 13.0, V13.0.88; "
            "torch 2.8.0; triton 3.4.0; nvidia-cutlass-dsl not installed") in text
    assert "- languages this run allows: cuda_cpp, triton, pytorch" in text
    assert "unknown" not in text.split("- host CPU")[0]


def test_measured_ceilings_are_named_as_such():
    measured = with_rates(lookup_spec("NVIDIA H200"), name="NVIDIA X1", source="measured",
                          tensor_flops={"bfloat16": 700e12})
    text = render_facts(_h200(spec=measured))
    assert "peak rates in TFLOP/s (measured ceilings of NVIDIA X1" in text and "tensor cores bfloat16 700" in text


def test_a_gpu_nothing_is_known_about_reads_unknown():
    facts = facts_from_probe("cuda", ("cuda_cpp",))
    assert facts == RunFacts(device="cuda", languages=("cuda_cpp",))
    text = render_facts(facts)
    assert ("- GPU: unknown, compute capability unknown, unknown SMs, SM clock up to unknown, memory clock up to "
            "unknown") in text
    assert "- memory: unknown, peak bandwidth unknown; L2 unknown" in text
    assert "- peak rates: unknown (no roofline spec for this GPU)" in text
    assert "- build target: unknown" in text and "CUDA driver unknown; CUDA runtime (torch) unknown; nvcc unknown" \
        in text


def test_the_spec_fills_what_torch_did_not_report():
    facts = _h200(properties={"name": "NVIDIA H200"}, smi={})
    assert facts.sm_count == 132 and facts.l2_bytes == 60 << 20 and facts.memory_bytes == 141 * 10**9
    assert facts.sm_clock_mhz is None and facts.compute_capability is None


def test_smi_values_not_available_are_left_out():
    assert parse_smi_line("[N/A], 3201, 143771, 570.86.15") == {"clocks.max.memory": "3201",
                                                               "memory.total": "143771",
                                                               "driver_version": "570.86.15"}
    assert _h200(properties={}, smi=parse_smi_line("[N/A], [N/A], 143771, 570.86.15")).memory_bytes == 143771 << 20


def test_the_probe_fails_quietly_without_a_gpu_and_sees_no_secret(monkeypatch):
    assert probe_properties(0, timeout_s=120) == {}  # no CUDA on this machine: the child fails, nothing raises
    monkeypatch.setenv("KF_FACTS_API_KEY", "sk-facts-secret")
    monkeypatch.setenv("KF_FACTS_PLAIN", "visible")
    monkeypatch.setattr(facts_module, "_PROBE", "import json, os\nprint(json.dumps({'properties': {"
                        "'secret': os.environ.get('KF_FACTS_API_KEY'), 'plain': os.environ.get('KF_FACTS_PLAIN')}}))")
    assert probe_properties(0) == {"properties": {"secret": None, "plain": "visible"}}


def test_language_refusal_names_the_allowed_languages():
    assert language_refusal("pytorch", ("pytorch", "triton")) is None
    assert language_refusal("cuda_cpp", ("pytorch", "triton")) == ("language 'cuda_cpp' is not allowed in this run; "
                                                                   "allowed: pytorch, triton")
